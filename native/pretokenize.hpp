// Hand-written equivalent of the GPT-4 split pattern, as the `regex` module reads it:
//
//   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*
//   |\s*[\r\n]|\s+(?!\S)|\s+
//
// The alternatives are tried in order at each position, like the regex engine does.
// Input is UTF-8; an ill-formed sequence (only reachable from raw bytes, never from a
// Python str) counts as one "other" character spanning its maximal ill-formed subpart,
// so the splitter never reads out of bounds and always makes progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "unicode_tables.h"

namespace alilama {

constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFFu;

// Decode one code point at s[0..n), n >= 1. Returns the number of bytes consumed
// (>= 1). On ill-formed input `cp` is kInvalidCodepoint and the length is that of the
// maximal subpart (Unicode 3.9, the rule Python's decoder follows).
inline size_t decode_utf8(const uint8_t* s, size_t n, uint32_t& cp) {
  uint8_t b0 = s[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    cp = kInvalidCodepoint;
    return 1;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= n) {
      cp = kInvalidCodepoint;
      return k;
    }
    uint8_t b = s[k];
    if (b < lo || b > hi) {
      cp = kInvalidCodepoint;
      return k;
    }
    lo = 0x80;
    hi = 0xBF;
    v = (v << 6) | (b & 0x3F);
  }
  cp = v;
  return need + 1;
}

// Offset of the first ill-formed byte in s[0..n), or n when all is well-formed.
inline size_t utf8_error_offset(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    size_t len = decode_utf8(s + i, n - i, cp);
    if (cp == kInvalidCodepoint) return i;
    i += len;
  }
  return n;
}

class Pretokenizer {
 public:
  // Class flags (kLetter, kNumber, kSpace) of a code point; 0 for ill-formed input.
  static inline uint8_t flags(uint32_t cp) {
    if (cp < 0x80) return kAsciiFlags[cp];
    if (cp == kInvalidCodepoint) return 0;
    return unicode_flags(cp);
  }

  // End of the chunk that starts at `pos` (pos < n). Always > pos.
  static size_t next(const uint8_t* s, size_t n, size_t pos) {
    // Fast path: [ ]?[A-Za-z]+ followed by ASCII (the bulk of English text).
    {
      size_t p = pos + (s[pos] == ' ');
      if (p < n && s[p] < 0x80 && (kAsciiFlags[s[p]] & kLetter)) {
        size_t e = ascii_letters(s, n, p + 1);
        if (e == n || s[e] < 0x80) return e;
        return letters(s, n, e);
      }
    }
    uint32_t c0;
    size_t l0 = dec(s, n, pos, c0);
    uint8_t f0 = flags(c0);

    // 1: '(?i:[sdmt]|ll|ve|re)
    if (c0 == '\'' && pos + 1 < n) {
      uint32_t c1;
      size_t l1 = dec(s, n, pos + 1, c1);
      if (c1 == 's' || c1 == 'S' || c1 == 0x17F || c1 == 'd' || c1 == 'D' || c1 == 'm' ||
          c1 == 'M' || c1 == 't' || c1 == 'T')
        return pos + 1 + l1;
      if (pos + 2 < n) {
        uint8_t a = lower(c1), b = lower(s[pos + 2]);
        if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e'))
          return pos + 3;
      }
    }
    // 2: [^\r\n\p{L}\p{N}]?+\p{L}+
    if (f0 & kLetter) return letters(s, n, pos + l0);
    if (!(f0 & kNumber) && c0 != '\r' && c0 != '\n' && pos + l0 < n) {
      uint32_t c1;
      size_t l1 = dec(s, n, pos + l0, c1);
      if (flags(c1) & kLetter) return letters(s, n, pos + l0 + l1);
    }
    // 3: \p{N}{1,3}
    if (f0 & kNumber) {
      size_t e = pos + l0;
      for (int k = 1; k < 3 && e < n; ++k) {
        uint32_t c;
        size_t l = dec(s, n, e, c);
        if (!(flags(c) & kNumber)) break;
        e += l;
      }
      return e;
    }
    // 4: ' ?[^\s\p{L}\p{N}]++[\r\n]*
    {
      size_t p = pos;
      if (c0 == ' ') p = pos + 1;
      if (p < n) {
        uint32_t c;
        size_t l = dec(s, n, p, c);
        if (is_other(c)) {
          size_t e = p + l;
          while (e < n) {
            size_t l2 = dec(s, n, e, c);
            if (!is_other(c)) break;
            e += l2;
          }
          while (e < n && (s[e] == '\r' || s[e] == '\n')) ++e;
          return e;
        }
      }
    }
    // Only whitespace is left here (every other character matched above).
    // 5: \s*[\r\n]  -- up to the last CR/LF of the whitespace run.
    size_t e = pos, last_nl = 0;
    bool has_nl = false;
    size_t last_start = pos;  // start of the run's last character
    while (e < n) {
      uint32_t c;
      size_t l = dec(s, n, e, c);
      if (!(flags(c) & kSpace)) break;
      if (c == '\r' || c == '\n') {
        has_nl = true;
        last_nl = e;
      }
      last_start = e;
      e += l;
    }
    if (e == pos) return pos + l0;  // unreachable for valid classes; guarantees progress
    if (has_nl) return last_nl + 1;
    // 6: \s+(?!\S)
    if (e == n) return e;
    if (last_start > pos) return last_start;
    // 7: \s+
    return e;
  }

 private:
  static size_t dec(const uint8_t* s, size_t n, size_t pos, uint32_t& cp) {
    if (s[pos] < 0x80) {
      cp = s[pos];
      return 1;
    }
    return decode_utf8(s + pos, n - pos, cp);
  }
  static uint8_t lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? uint8_t(c + 32) : (c < 0x80 ? uint8_t(c) : 0); }
  static bool is_other(uint32_t c) { return !(flags(c) & (kSpace | kLetter | kNumber)); }
  // End of the run of ASCII letters [A-Za-z] at e, eight bytes at a time.
  static size_t ascii_letters(const uint8_t* s, size_t n, size_t e) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && (defined(__GNUC__) || defined(__clang__))
    constexpr uint64_t k01 = 0x0101010101010101ULL, k80 = 0x8080808080808080ULL;
    while (e + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + e, 8);
      uint64_t y = (w & ~k80) | (0x20 * k01);           // low 7 bits, lower-cased: no carries below
      uint64_t ge_a = (y + (0x80 - 'a') * k01) & k80;   // byte >= 'a'
      uint64_t gt_z = (y + (0x80 - 'z' - 1) * k01) & k80;  // byte > 'z'
      uint64_t letter = ge_a & ~gt_z & ~w & k80;         // ... and ASCII
      uint64_t other = ~letter & k80;
      if (other) return e + size_t(__builtin_ctzll(other) >> 3);
      e += 8;
    }
#endif
    while (e < n && s[e] < 0x80 && (kAsciiFlags[s[e]] & kLetter)) ++e;
    return e;
  }
  static size_t letters(const uint8_t* s, size_t n, size_t e) {
    e = ascii_letters(s, n, e);
    while (e < n) {
      uint32_t c;
      size_t l = dec(s, n, e, c);
      if (!(flags(c) & kLetter)) break;
      e += l;
    }
    return e;
  }
};

// A place where text may be cut without changing its chunks: just after a '\n' that
// is followed by a character that is not whitespace. Returns the cut nearest at or
// before `want` but after `lo`, or `lo` when there is none.
inline size_t safe_cut_before(const uint8_t* s, size_t n, size_t lo, size_t want) {
  if (want >= n) return n;
  for (size_t p = want; p > lo + 1; --p) {
    if (s[p - 1] == '\n') {
      uint32_t c;
      size_t l = (s[p] < 0x80) ? (c = s[p], 1) : decode_utf8(s + p, n - p, c);
      (void)l;
      if (!(Pretokenizer::flags(c) & kSpace)) return p;
    }
  }
  return lo;
}

}  // namespace alilama

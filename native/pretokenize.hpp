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

  // End of the chunk that starts at `pos` (pos < n). Always > pos. With `ws_to_end`, a
  // whitespace run that reaches the end of the text is one chunk (tiktoken's cl100k_base
  // writes the pattern with `\s++$` before `\s*[\r\n]`).
  static size_t next(const uint8_t* s, size_t n, size_t pos, bool ws_to_end = false) {
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
    return whitespace(s, n, pos, l0, ws_to_end);
  }

  // Only whitespace is left at `pos`: \s*[\r\n] (up to the last CR/LF of the run), else
  // \s+(?!\S), else \s+ (GPT-4's, o200k_base's and their kin's last alternatives).
  static size_t whitespace(const uint8_t* s, size_t n, size_t pos, size_t l0, bool ws_to_end) {
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
    if (ws_to_end && e == n) return e;
    if (has_nl) return last_nl + 1;
    // 6: \s+(?!\S)
    if (e == n) return e;
    if (last_start > pos) return last_start;
    // 7: \s+
    return e;
  }


  // GPT-2's split (r50k_base, p50k_base; the tokenizers library's ByteLevel regex):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // (tiktoken writes the end as \s++$|\s+(?!\S)|\s, which splits alike).
  static size_t next_gpt2(const uint8_t* s, size_t n, size_t pos) {
    {
      size_t p = pos + (s[pos] == ' ');
      if (p < n && s[p] < 0x80 && (kAsciiFlags[s[p]] & kLetter)) {
        size_t e = ascii_letters(s, n, p + 1);
        if (e == n || s[e] < 0x80) return e;
        return letters(s, n, e);
      }
    }
    uint8_t b0 = s[pos];
    if (b0 == '\'' && pos + 1 < n) {  // contractions: ASCII, case-sensitive
      uint8_t b1 = s[pos + 1];
      if (b1 == 's' || b1 == 't' || b1 == 'm' || b1 == 'd') return pos + 2;
      if (pos + 2 < n) {
        uint8_t b2 = s[pos + 2];
        if ((b1 == 'r' && b2 == 'e') || (b1 == 'v' && b2 == 'e') || (b1 == 'l' && b2 == 'l')) return pos + 3;
      }
    }
    size_t p = pos + (b0 == ' ');
    if (p < n) {
      uint32_t c;
      size_t l = dec(s, n, p, c);
      uint8_t f = flags(c);
      if (f & kLetter) return letters(s, n, p + l);
      if (!(f & kSpace)) {  // a run of numbers, or of other characters
        uint8_t want = f & kNumber;
        size_t e = p + l;
        while (e < n) {
          size_t l2 = dec(s, n, e, c);
          uint8_t f2 = flags(c);
          if (want ? !(f2 & kNumber) : (f2 & (kSpace | kLetter | kNumber)) != 0) break;
          e += l2;
        }
        return e;
      }
    }
    // Whitespace: \s+(?!\S) leaves the run's last character to the next chunk, unless the
    // run ends the text; a run of one character followed by non-space is \s+.
    size_t e = pos, last_start = pos;
    while (e < n) {
      uint32_t c;
      size_t l = dec(s, n, e, c);
      if (!(flags(c) & kSpace)) break;
      last_start = e;
      e += l;
    }
    if (e == pos) return pos + 1;  // unreachable for valid classes; guarantees progress
    if (e == n || last_start == pos) return e;
    return last_start;
  }

  // tiktoken's o200k_base (GPT-4o), with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (kUpper) and
  // W = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (kLower); marks are in both and are not \p{L}:
  //   [^\r\n\p{L}\p{N}]?U*W+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?U+W*(?i:...)?
  //   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  static size_t next_o200k(const uint8_t* s, size_t n, size_t pos) {
    {  // Fast path: [ ]?[A-Z]*[a-z]+ or [ ]?[A-Z]+ followed by ASCII that is no apostrophe.
      size_t p = pos + (s[pos] == ' ');
      if (p < n && s[p] < 0x80 && (kAsciiFlags[s[p]] & kLetter)) {
        size_t i = p;
        while (i < n && s[i] >= 'A' && s[i] <= 'Z') ++i;
        size_t j = i;
        while (j < n && s[j] >= 'a' && s[j] <= 'z') ++j;
        size_t e = j > i ? j : i;
        if (e == n || (s[e] < 0x80 && s[e] != '\'')) return e;
      }
    }
    uint32_t c0;
    size_t l0 = dec(s, n, pos, c0);
    uint8_t f0 = flags(c0);
    bool prefix = !(f0 & (kLetter | kNumber)) && c0 != '\r' && c0 != '\n';
    size_t e;
    if (prefix && pos + l0 < n && (e = cased_lower(s, n, pos + l0))) return e;
    if (f0 & kUpper) {  // a letter or a mark starts the word itself
      if ((e = cased_lower(s, n, pos))) return e;
      return cased_upper(s, n, pos);
    }
    if (f0 & kLower) return cased_lower(s, n, pos);
    if (prefix && pos + l0 < n && (e = cased_upper(s, n, pos + l0))) return e;
    if (f0 & kNumber) {  // \p{N}{1,3}
      e = pos + l0;
      for (int k = 1; k < 3 && e < n; ++k) {
        uint32_t c;
        size_t l = dec(s, n, e, c);
        if (!(flags(c) & kNumber)) break;
        e += l;
      }
      return e;
    }
    {  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*
      size_t p = pos + (c0 == ' ');
      if (p < n) {
        uint32_t c;
        size_t l = dec(s, n, p, c);
        if (is_other(c)) {
          e = p + l;
          while (e < n) {
            size_t l2 = dec(s, n, e, c);
            if (!is_other(c)) break;
            e += l2;
          }
          while (e < n && (s[e] == '\r' || s[e] == '\n' || s[e] == '/')) ++e;
          return e;
        }
      }
    }
    return whitespace(s, n, pos, l0, false);
  }

 private:
  // U*W+ then an optional contraction, at `start`; 0 when it does not match. U* is greedy:
  // when no W follows the U run, the run gives back up to its last character that is also W.
  static size_t cased_lower(const uint8_t* s, size_t n, size_t start) {
    size_t j = start, last_w = 0;
    bool any_w = false;
    uint32_t c = 0;
    size_t l = 0;
    while (j < n) {
      l = dec(s, n, j, c);
      uint8_t f = flags(c);
      if (!(f & kUpper)) break;
      if (f & kLower) {
        last_w = j;
        any_w = true;
      }
      j += l;
    }
    size_t e;
    if (j < n && (flags(c) & kLower)) {
      e = j + l;
      while (e < n) {
        size_t l2 = dec(s, n, e, c);
        if (!(flags(c) & kLower)) break;
        e += l2;
      }
    } else if (any_w) {
      e = last_w + dec(s, n, last_w, c);  // the characters after it are U only
    } else {
      return 0;
    }
    return contraction(s, n, e);
  }
  // U+W* then an optional contraction, at `start`; 0 when it does not match.
  static size_t cased_upper(const uint8_t* s, size_t n, size_t start) {
    size_t e = start;
    uint32_t c;
    while (e < n) {
      size_t l = dec(s, n, e, c);
      if (!(flags(c) & kUpper)) break;
      e += l;
    }
    if (e == start) return 0;
    while (e < n) {
      size_t l = dec(s, n, e, c);
      if (!(flags(c) & kLower)) break;
      e += l;
    }
    return contraction(s, n, e);
  }
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)? at e.
  static size_t contraction(const uint8_t* s, size_t n, size_t e) {
    if (e + 1 >= n || s[e] != '\'') return e;
    uint32_t c1;
    size_t l1 = dec(s, n, e + 1, c1);
    if (c1 == 's' || c1 == 'S' || c1 == 0x17F || c1 == 't' || c1 == 'T' || c1 == 'm' || c1 == 'M' || c1 == 'd' ||
        c1 == 'D')
      return e + 1 + l1;
    if (e + 2 < n) {
      uint8_t a = lower(c1), b = lower(s[e + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return e + 3;
    }
    return e;
  }
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

// The split patterns the native code knows (plugins/alilama_bpe/patterns.py maps pattern
// strings to them).
enum class Split : int {
  kGpt4 = 0,    // Alilama's GPT-4 pattern; Llama-3's splits alike
  kCl100k = 1,  // tiktoken's cl100k_base: GPT-4's with \s++$ (trailing whitespace is one chunk)
  kGpt2 = 2,    // GPT-2's (r50k_base, p50k_base)
  kO200k = 3,   // tiktoken's o200k_base (GPT-4o)
};

inline size_t split_next(Split kind, const uint8_t* s, size_t n, size_t pos) {
  switch (kind) {
    case Split::kCl100k: return Pretokenizer::next(s, n, pos, true);
    case Split::kGpt2: return Pretokenizer::next_gpt2(s, n, pos);
    case Split::kO200k: return Pretokenizer::next_o200k(s, n, pos);
    default: return Pretokenizer::next(s, n, pos);
  }
}

// A place where text may be cut without changing its chunks: just after a '\n' that is
// followed by a character that is not whitespace (for GPT-2's split, also preceded by
// one: there a run of whitespace before a word gives its last character a chunk of its
// own; for o200k_base's, not followed by '/', which [\r\n/]* takes after punctuation).
inline bool safe_cut_at(Split kind, const uint8_t* s, size_t n, size_t p) {
  if (p == 0 || p >= n || s[p - 1] != '\n') return false;
  if (kind == Split::kGpt2 && (p < 2 || s[p - 2] >= 0x80 || (kAsciiFlags[s[p - 2]] & kSpace))) return false;
  if (kind == Split::kO200k && s[p] == '/') return false;
  uint32_t c;
  if (s[p] < 0x80) c = s[p];
  else decode_utf8(s + p, n - p, c);
  return !(Pretokenizer::flags(c) & kSpace);
}

// The safe cut nearest at or before `want` but after `lo`, or `lo` when there is none.
inline size_t safe_cut_before(const uint8_t* s, size_t n, size_t lo, size_t want, Split kind = Split::kGpt4) {
  if (want >= n) return n;
  for (size_t p = want; p > lo + 1; --p)
    if (safe_cut_at(kind, s, n, p)) return p;
  return lo;
}

}  // namespace alilama

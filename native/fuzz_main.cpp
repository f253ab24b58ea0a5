// Randomised harness for the native tokenizer, built with AddressSanitizer and
// UndefinedBehaviorSanitizer by scripts/fuzz_native.sh. It feeds arbitrary bytes
// (random, ill-formed UTF-8, mixed scripts, long runs) to the pre-tokenizer, the
// trainer, the encoder (one and two threads, with special tokens) and encode_file,
// and checks the invariants that must hold on any input:
//   * chunks are non-empty and concatenate back to the input;
//   * decode(encode(x)) == x, byte for byte;
//   * one thread and two threads give the same ids;
//   * invalid merges are rejected with TokenizerError, never undefined behaviour;
//   * special tokens are found where a naive search finds them (nested ones included);
//   * an exception in a worker thread reaches the caller.
//
//   usage: fuzz_native [--seconds N] [--seed S]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bpe.hpp"
#include "pretokenize.hpp"

using namespace alilama;

namespace {

std::mt19937_64 rng;

size_t pick(size_t n) { return n ? size_t(rng() % n) : 0; }

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

std::string random_text(size_t max_len) {
  static const char* words[] = {"the", " cat", "'s", "'LL", "'ve", " 12345", "\r\n", "\n\n", "   ", "\t",
                                "!!", " ?", "<|endoftext|>", "<|pad|>", "aaaa", "ab", "ſ", "e\xCC\x81"};
  std::string s;
  size_t len = pick(max_len + 1);
  int mode = int(pick(4));
  while (s.size() < len) {
    switch (mode == 3 ? int(pick(3)) : mode) {
      case 0:  // raw bytes, ill-formed UTF-8 included
        s += char(pick(256));
        break;
      case 1: {  // any code point, surrogates and beyond-range excluded
        uint32_t cp = uint32_t(pick(4) == 0 ? pick(0x110000) : pick(0x3000));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        append_utf8(s, cp);
        break;
      }
      default:
        s += words[pick(sizeof(words) / sizeof(words[0]))];
        if (pick(50) == 0) s += std::string(pick(3000), " a\n"[pick(3)]);  // long runs
    }
  }
  return s;
}

[[noreturn]] void fail(const char* what, const std::string& input) {
  std::fprintf(stderr, "FUZZ FAILURE: %s\ninput (%zu bytes):", what, input.size());
  for (unsigned char c : input.substr(0, 400)) std::fprintf(stderr, " %02x", c);
  std::fprintf(stderr, "\n");
  std::abort();
}

void check_split(const std::string& s) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.data());
  for (Split kind : {Split::kGpt4, Split::kCl100k, Split::kGpt2, Split::kO200k}) {  // every pattern it knows
    size_t pos = 0;
    std::string joined;
    while (pos < s.size()) {
      size_t end = split_next(kind, p, s.size(), pos);
      if (end <= pos || end > s.size()) fail("split made no progress or overran", s);
      joined.append(s, pos, end - pos);
      pos = end;
    }
    if (joined != s) fail("chunks do not concatenate to the input", s);
  }
  (void)utf8_error_offset(p, s.size());
}

// Leftmost occurrence, longest on a tie: the definition SpecialMatcher::find must meet.
std::pair<size_t, size_t> naive_find(std::string_view text, const std::vector<std::string>& tokens, size_t from) {
  size_t best = std::string_view::npos, which = 0;
  for (size_t k = 0; k < tokens.size(); ++k) {
    size_t p = text.find(tokens[k], from);
    if (p < best || (p == best && p != std::string_view::npos && tokens[k].size() > tokens[which].size())) {
      best = p;
      which = k;
    }
  }
  return {best, which};
}

void check_matcher() {
  static const char* alphabet = "<|>abe\xff";
  std::vector<std::string> tokens;
  for (size_t k = 0, n = 1 + pick(5); k < n; ++k) {
    std::string t;
    for (size_t j = 0, len = 1 + pick(6); j < len; ++j) t += alphabet[pick(7)];
    if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) tokens.push_back(t);
  }
  if (pick(2)) tokens = {"<|endoftext|>", "<|pad|>", std::string("<|\xff|>")};
  SpecialMatcher m(tokens);
  std::string text;
  for (size_t j = 0, len = pick(300); j < len; ++j) {
    if (pick(8) == 0) text += tokens[pick(tokens.size())];
    else text += alphabet[pick(7)];
  }
  for (size_t from = 0; from <= text.size(); from += 1 + pick(7)) {
    auto got = m.find(text, from);
    auto want = naive_find(text, tokens, from);
    if (got.first != want.first || (got.first != std::string_view::npos && tokens[got.second] != tokens[want.second]))
      fail("SpecialMatcher::find differs from the naive search", text);
  }
}

// An exception in any worker comes back to the caller once all have stopped.
void check_thread_errors() {
  size_t n = 1 + pick(200), bad = pick(n);
  std::atomic<size_t> ran{0};
  try {
    parallel_for(n, 1 + int(pick(4)), [&](size_t i) {
      ran.fetch_add(1);
      if (i == bad) throw TokenizerError("worker failure");
    });
    fail("parallel_for swallowed a worker's exception", "");
  } catch (const TokenizerError& e) {
    if (std::string(e.what()) != "worker failure") fail("parallel_for changed the exception", "");
  }
  if (ran.load() > n) fail("parallel_for ran too many items", "");
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 30;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seed")) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  rng.seed(seed);
  std::printf("fuzz_native: seed %llu, %.0f s\n", (unsigned long long)seed, seconds);
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::string tmp_path = "/tmp/alilama_fuzz_" + std::to_string(seed) + ".txt";
  size_t rounds = 0, bytes = 0;
  while (elapsed() < seconds) {
    ++rounds;
    // Pre-tokenizer on arbitrary bytes.
    for (int k = 0; k < 20; ++k) {
      std::string s = random_text(200);
      bytes += s.size();
      check_split(s);
    }
    check_matcher();
    check_thread_errors();
    // Trainer on a few documents.
    std::vector<std::string> docs;
    for (size_t k = 0, n = 1 + pick(6); k < n; ++k) docs.push_back(random_text(2000));
    std::vector<std::string_view> views(docs.begin(), docs.end());
    std::vector<std::string> specials = {"<|endoftext|>", "<|pad|>"};
    Trainer trainer(pick(2) ? specials : std::vector<std::string>{}, 1 + int(pick(2)));
    trainer.add(views);
    size_t want = pick(400);
    std::vector<Merge> merges = trainer.train(want, [](uint64_t, uint64_t) { return true; });
    if (merges.size() > want) fail("too many merges", docs[0]);
    uint32_t n = uint32_t(256 + merges.size());
    Encoder enc(merges, {{"<|endoftext|>", n}, {"<|pad|>", n + 1}});
    // Encoder round trips, threads agree.
    for (int k = 0; k < 10; ++k) {
      std::string s = random_text(3000);
      bytes += s.size();
      std::vector<uint32_t> ids;
      enc.encode_ordinary(reinterpret_cast<const uint8_t*>(s.data()), s.size(), ids);
      if (enc.decode_bytes(ids.data(), ids.size()) != s) fail("decode(encode_ordinary(x)) != x", s);
      auto one = enc.encode(s, specials, 1);
      auto two = enc.encode(s, specials, 2);
      if (one != two) fail("one and two threads differ", s);
      if (enc.decode_bytes(one.data(), one.size()) != s) fail("decode(encode(x)) != x", s);
    }
    std::vector<std::string_view> batch(docs.begin(), docs.end());
    auto out = enc.encode_batch(batch, specials, 2);
    for (size_t k = 0; k < docs.size(); ++k)
      if (enc.decode_bytes(out[k].data(), out[k].size()) != docs[k]) fail("encode_batch round trip", docs[k]);
    // encode_file, strict and replace.
    {
      std::string s = random_text(5000);
      FILE* f = std::fopen(tmp_path.c_str(), "wb");
      std::fwrite(s.data(), 1, s.size(), f);
      std::fclose(f);
      try {
        auto ids = enc.encode_file(tmp_path, 2, "strict", nullptr);
        if (enc.decode_bytes(ids.data(), ids.size()) != s) fail("encode_file round trip", s);
      } catch (const TokenizerError&) {
        if (utf8_error_offset(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == s.size())
          fail("encode_file rejected valid UTF-8", s);
      }
      (void)enc.encode_file(tmp_path, 1, "replace", nullptr);
      Trainer t2(specials, 2);
      try {
        t2.add_file(tmp_path, "strict", nullptr);
      } catch (const TokenizerError&) {
      }
      t2.add_file(tmp_path, "replace", nullptr);
      (void)t2.train(pick(50), nullptr);
    }
    // Bad ids and bad merges are errors, not crashes.
    uint32_t bad = n + 2 + uint32_t(pick(5));
    try {
      (void)enc.decode_bytes(&bad, 1);
      fail("decode accepted an unknown id", "");
    } catch (const TokenizerError&) {
    }
    std::vector<Merge> junk;
    for (size_t k = 0, m = pick(20); k < m; ++k) junk.emplace_back(uint32_t(pick(300)), uint32_t(pick(300)));
    try {
      Encoder e2(junk, {});
      std::string s = random_text(300);
      auto ids = e2.encode(s, {}, 1);
      if (e2.decode_bytes(ids.data(), ids.size()) != s) fail("junk-merge round trip", s);
    } catch (const TokenizerError&) {
    }
  }
  std::remove(tmp_path.c_str());
  std::printf("fuzz_native: %zu rounds, %.1f MB of input, no sanitizer findings\n", rounds, bytes / 1e6);
  return 0;
}

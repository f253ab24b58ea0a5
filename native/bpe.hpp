// Byte-level BPE: trainer and encoder, with no Python in them (the binding is
// binding.cpp). Semantics are those of plugins/alilama_bpe/reference.py.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hashmap.hpp"
#include "pretokenize.hpp"

namespace alilama {

using Merge = std::pair<uint32_t, uint32_t>;

// Longest token a vocabulary may hold, and the most bytes all its tokens may hold
// together: merges that would build more are refused when loading and never learned.
constexpr size_t kMaxTokenBytes = 4096;
constexpr uint64_t kMaxVocabBytes = uint64_t(256) << 20;

// Finds special tokens in text in one pass, whatever their number: an Aho-Corasick
// automaton over byte classes (the bytes that occur in no token share class 0), with a
// skip to the next byte that can start a token while the automaton is at its root.
// The match returned is the leftmost, the longest on a tie. Tokens that occur inside
// no other (what the Python layer allows) are found in time linear in the text.
class SpecialMatcher {
 public:
  SpecialMatcher() = default;
  explicit SpecialMatcher(std::vector<std::string> tokens);
  bool empty() const { return tokens_.empty(); }
  // Position and index of the first special token at or after `from`; pos == npos if none.
  std::pair<size_t, size_t> find(std::string_view text, size_t from) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  std::pair<size_t, size_t> leftmost_longest(std::string_view text, size_t lo, size_t hi) const;
  std::vector<std::string> tokens_;
  uint8_t cls_[256] = {};     // byte -> class (0: in no token)
  bool starts_[256] = {};     // byte starts some token
  int start_byte_ = -1;       // the only byte that starts a token, or -1
  uint32_t nclasses_ = 1;
  std::vector<uint32_t> delta_;  // state * nclasses_ + class -> state (0 is the root)
  std::vector<int32_t> out_;     // state -> token whose end it is (longest suffix), or -1
  size_t max_len_ = 0;
  bool nested_ = false;  // some token occurs inside another
};

// Runs worker(stop) on up to `threads` threads, the caller's included, and joins them.
// An exception thrown by any of them sets `stop` and is rethrown here once all have
// returned; a thread that cannot be started leaves the work to those that could.
void run_threads(size_t threads, const std::function<void(const std::atomic<bool>&)>& worker);

// Run fn(i) for i in [0, n) on up to `threads` threads (the caller's included).
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn);

// Cuts [0, n) into pieces of about `target` bytes at places that do not change chunks.
std::vector<std::pair<size_t, size_t>> cut_pieces(const uint8_t* s, size_t n, size_t target, Split kind);

struct ChunkStat {
  uint64_t count;
  uint64_t first;  // position of the first occurrence in the stream of all texts
};

// Progress: called with (done, total); returns false to cancel.
using ProgressFn = std::function<bool(uint64_t, uint64_t)>;

// Reads a UTF-8 file in ~16 MiB blocks cut where chunks cannot change (and never inside
// one of `tokens`), validates each (strict: TokenizerError with the byte offset; replace:
// U+FFFD) and calls fn(block, bytes_done, file_size).
void read_text_blocks(const std::string& path, const std::string& errors, const std::vector<std::string>& tokens,
                      const std::function<void(std::string&, uint64_t, uint64_t)>& fn, Split kind = Split::kGpt4);

class Trainer {
 public:
  Trainer(std::vector<std::string> specials, int threads)
      : specials_(std::move(specials)), threads_(threads < 1 ? 1 : threads) {}

  // Count the chunks of `texts` (cut at special tokens first). Thread-safe for one caller.
  void add(const std::vector<std::string_view>& texts);

  // Count the chunks of a UTF-8 file, read in blocks (memory does not grow with the file).
  // errors: "strict" (TokenizerError naming the byte offset) or "replace" (U+FFFD).
  void add_file(const std::string& path, const std::string& errors, const ProgressFn& progress);

  // Learn up to num_merges merges; fewer when no pair is left. Consumes the counts
  // (a Trainer trains once). Throws
  // std::runtime_error("cancelled") when progress returns false.
  std::vector<Merge> train(size_t num_merges, const ProgressFn& progress);

  size_t unique_chunks() const { return trained_ ? unique_after_train_ : counts_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t total_chunks() const { return total_chunks_; }

 private:
  SpecialMatcher specials_;
  int threads_;
  StringMap<ChunkStat> counts_;
  uint64_t stream_pos_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t total_chunks_ = 0;
  size_t unique_after_train_ = 0;
  bool trained_ = false;
};

class Encoder {
 public:
  // `ids` gives the id of each byte and merge (internal id i -> ids[i]) when a vocabulary's
  // ids are not Alilama's (bytes 0..255, merge i = 256 + i), e.g. imported from tiktoken or
  // tokenizer.json; empty for Alilama's own. `split` is the pre-tokenizer's pattern.
  Encoder(const std::vector<Merge>& merges, std::vector<std::pair<std::string, uint32_t>> specials,
          std::vector<uint32_t> ids = {}, Split split = Split::kGpt4);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  // Ids of ordinary text (special tokens are not looked for).
  void encode_ordinary(const uint8_t* s, size_t n, std::vector<uint32_t>& out) const;
  // Ids of text where the special tokens named in `allowed` are recognised.
  std::vector<uint32_t> encode(std::string_view text, const std::vector<std::string>& allowed,
                               int threads) const;
  std::vector<std::vector<uint32_t>> encode_batch(const std::vector<std::string_view>& texts,
                                                  const std::vector<std::string>& allowed,
                                                  int threads) const;
  // Encode texts[begin, end) on this thread, appending their ids to `ids` one text after
  // another and the end of each text's ids to `ends` (for pipelined callers).
  void encode_range(const std::vector<std::string_view>& texts, const SpecialMatcher& m, size_t begin,
                    size_t end, std::vector<uint32_t>& ids, std::vector<size_t>& ends) const;
  // Stream a UTF-8 file; every special token is recognised. errors: "strict" or "replace".
  std::vector<uint32_t> encode_file(const std::string& path, int threads, const std::string& errors,
                                    const ProgressFn& progress) const;

  std::string decode_bytes(const uint32_t* ids, size_t n) const;
  size_t vocab_size() const { return vocab_.size(); }
  size_t num_merges() const { return num_merges_; }
  // Largest id in use (merges and special tokens).
  uint32_t max_id() const {
    uint32_t m = uint32_t(ext_.empty() ? vocab_.size() - 1 : internal_of_.size() - 1);
    for (const auto& sp : specials_) m = std::max(m, sp.second);
    return m;
  }

 private:
  struct Cache;
  struct CacheLease;
  void encode_chunk(const uint8_t* s, size_t n, std::vector<uint32_t>& out) const;
  void encode_ordinary_cached(const uint8_t* s, size_t n, std::vector<uint32_t>& out, Cache& cache) const;
  void encode_segments(std::string_view text, const SpecialMatcher& m, int threads,
                       std::vector<uint32_t>& out) const;
  uint32_t rank_of(uint32_t a, uint32_t b) const {
    const uint32_t* v = ranks_.find(pair_key(a, b));
    return v ? *v : kNoRank;
  }
  std::unique_ptr<Cache> take_cache() const;
  void give_cache(std::unique_ptr<Cache> c) const;

  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;
  U64Map ranks_;  // pair -> merged id (256 + rank; lower id = earlier merge)
  std::vector<std::string> vocab_;
  std::vector<std::pair<std::string, uint32_t>> specials_;
  size_t num_merges_;
  Split split_;
  std::vector<uint32_t> ext_;          // internal id -> id (empty: the same)
  std::vector<uint32_t> internal_of_;  // id -> internal id (0xFFFFFFFF: none), when ext_ is set
  uint32_t ext(uint32_t internal) const { return ext_.empty() ? internal : ext_[internal]; }
  mutable std::mutex cache_mu_;
  mutable std::vector<std::unique_ptr<Cache>> cache_pool_;
};

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace alilama

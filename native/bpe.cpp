#include "bpe.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>
#include <thread>

#include "pretokenize.hpp"

namespace alilama {

// ---------------------------------------------------------------- helpers

SpecialMatcher::SpecialMatcher(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  for (const auto& t : tokens_) {
    if (t.empty()) throw TokenizerError("special tokens must not be empty");
    max_len_ = std::max(max_len_, t.size());
    for (unsigned char c : t)
      if (!cls_[c]) cls_[c] = uint8_t(nclasses_++);
    starts_[uint8_t(t[0])] = true;
  }
  if (tokens_.empty()) return;
  int nstart = 0;
  for (int c = 0; c < 256; ++c)
    if (starts_[c]) {
      ++nstart;
      start_byte_ = c;
    }
  if (nstart != 1) start_byte_ = -1;
  for (size_t i = 0; i < tokens_.size() && !nested_; ++i)
    for (size_t j = 0; j < tokens_.size(); ++j)
      if (i != j && tokens_[j].find(tokens_[i]) != std::string::npos) {
        nested_ = true;
        break;
      }
  // The trie (kNoState: no edge yet), then the failure transitions, breadth first.
  constexpr uint32_t kNoState = 0xFFFFFFFFu;
  const uint32_t C = nclasses_;
  delta_.assign(C, kNoState);
  out_.assign(1, -1);
  for (size_t k = 0; k < tokens_.size(); ++k) {
    uint32_t s = 0;
    for (unsigned char c : tokens_[k]) {
      uint32_t& next = delta_[size_t(s) * C + cls_[c]];
      if (next == kNoState) {
        next = uint32_t(out_.size());
        out_.push_back(-1);
        delta_.resize(delta_.size() + C, kNoState);
      }
      s = delta_[size_t(s) * C + cls_[c]];
    }
    if (out_[s] < 0 || tokens_[size_t(out_[s])].size() < tokens_[k].size()) out_[s] = int32_t(k);
  }
  std::vector<uint32_t> fail(out_.size(), 0), queue;
  for (uint32_t c = 0; c < C; ++c) {
    uint32_t& next = delta_[c];
    if (next == kNoState) next = 0;
    else queue.push_back(next);
  }
  for (size_t q = 0; q < queue.size(); ++q) {
    uint32_t s = queue[q];
    if (out_[s] < 0) out_[s] = out_[fail[s]];  // the longest token that ends here
    for (uint32_t c = 0; c < C; ++c) {
      uint32_t& next = delta_[size_t(s) * C + c];
      uint32_t via_fail = delta_[size_t(fail[s]) * C + c];
      if (next == kNoState) {
        next = via_fail;
      } else {
        fail[next] = via_fail;
        queue.push_back(next);
      }
    }
  }
}

// The leftmost-longest token starting in [lo, hi] (one is known to start at or before hi).
std::pair<size_t, size_t> SpecialMatcher::leftmost_longest(std::string_view text, size_t lo, size_t hi) const {
  for (size_t p = lo; p <= hi; ++p) {
    size_t which = tokens_.size();
    for (size_t k = 0; k < tokens_.size(); ++k)
      if (text.compare(p, tokens_[k].size(), tokens_[k]) == 0 &&
          (which == tokens_.size() || tokens_[k].size() > tokens_[which].size()))
        which = k;
    if (which != tokens_.size()) return {p, which};
  }
  return {std::string_view::npos, 0};  // unreachable
}

std::pair<size_t, size_t> SpecialMatcher::find(std::string_view text, size_t from) const {
  const size_t n = text.size();
  if (tokens_.empty() || from >= n) return {std::string_view::npos, 0};
  const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
  const uint32_t C = nclasses_;
  uint32_t state = 0;
  size_t i = from;
  while (i < n) {
    if (state == 0) {  // at the root: skip to the next byte that can start a token
      if (start_byte_ >= 0) {
        const void* hit = std::memchr(s + i, start_byte_, n - i);
        if (!hit) break;
        i = size_t(static_cast<const uint8_t*>(hit) - s);
      } else {
        while (i < n && !starts_[s[i]]) ++i;
        if (i == n) break;
      }
    }
    state = delta_[size_t(state) * C + cls_[s[i]]];
    ++i;
    int32_t k = out_[state];
    if (k >= 0) {  // the earliest end of any token: i
      size_t start = i - tokens_[size_t(k)].size();
      if (!nested_) return {start, size_t(k)};
      // A longer token that contains this one may start earlier and end later.
      size_t lo = std::max(from, i > max_len_ ? i - max_len_ : size_t(0));
      return leftmost_longest(text, lo, start);
    }
  }
  return {std::string_view::npos, 0};
}

void run_threads(size_t threads, const std::function<void(const std::atomic<bool>&)>& worker) {
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto guarded = [&]() {
    try {
      worker(stop);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      stop.store(true);
    }
  };
  std::vector<std::thread> pool;
  if (threads > 1) pool.reserve(threads - 1);
  for (size_t k = 1; k < threads; ++k) {
    try {
      pool.emplace_back(guarded);
    } catch (...) {  // no resources for another thread: the ones started do the work
      break;
    }
  }
  guarded();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  size_t t = std::min<size_t>(size_t(threads < 1 ? 1 : threads), n);
  std::atomic<size_t> next{0};
  run_threads(t, [&](const std::atomic<bool>& stop) {
    while (!stop.load(std::memory_order_relaxed)) {
      size_t i = next.fetch_add(1);
      if (i >= n) return;
      fn(i);
    }
  });
}

std::vector<std::pair<size_t, size_t>> cut_pieces(const uint8_t* s, size_t n, size_t target, Split kind) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t start = 0;
  while (start < n) {
    size_t want = start + target;
    size_t cut = want >= n ? n : safe_cut_before(s, n, start, want, kind);
    if (cut <= start) {  // no cut before `want`: look after it
      cut = n;
      for (size_t p = want; p < n; ++p) {
        if (safe_cut_at(kind, s, n, p)) { cut = p; break; }
      }
    }
    out.emplace_back(start, cut);
    start = cut;
  }
  return out;
}

namespace {

struct Piece {
  const uint8_t* s;
  size_t n;
  uint64_t base;  // stream position of s[0]
};

// Ordinary-text pieces of `texts` (cut at special tokens, then into ~1 MiB pieces).
std::vector<Piece> make_pieces(const std::vector<std::string_view>& texts, const SpecialMatcher& m,
                               uint64_t base, size_t target) {
  std::vector<Piece> pieces;
  for (std::string_view t : texts) {
    size_t from = 0;
    while (from <= t.size()) {
      auto [p, k] = m.empty() ? std::make_pair(std::string_view::npos, size_t(0)) : m.find(t, from);
      size_t end = p == std::string_view::npos ? t.size() : p;
      const uint8_t* s = reinterpret_cast<const uint8_t*>(t.data()) + from;
      for (auto [a, b] : cut_pieces(s, end - from, target, Split::kGpt4)) pieces.push_back({s + a, b - a, base + from + a});
      if (p == std::string_view::npos) break;
      from = p + m.tokens()[k].size();
    }
    base += t.size();
  }
  return pieces;
}

}  // namespace

// ---------------------------------------------------------------- training

void Trainer::add(const std::vector<std::string_view>& texts) {
  if (trained_) throw TokenizerError("this Trainer has already trained; make a new one");
  std::vector<Piece> pieces = make_pieces(texts, specials_, stream_pos_, size_t(1) << 20);
  for (std::string_view t : texts) {
    stream_pos_ += t.size();
    total_bytes_ += t.size();
  }
  // Each worker counts pieces in its own map and folds it into the shared table under a
  // lock after every ~1 MiB: memory stays near one table, not one per thread.
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> nchunks{0};
  auto fold = [&](StringMap<ChunkStat>& local) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t k = 0; k < local.size(); ++k) {
      const auto& e = local.entries()[k];
      std::string_view key = local.key(e);
      bool inserted;
      ChunkStat& st = counts_.find_or_insert_hashed(reinterpret_cast<const uint8_t*>(key.data()), key.size(),
                                                    e.hash, e.value, inserted);
      if (!inserted) {
        st.count += e.value.count;
        st.first = std::min(st.first, e.value.first);
      }
    }
    local.reset();
  };
  auto count_pieces = [&](const std::atomic<bool>& stop) {
    StringMap<ChunkStat> map;  // on this thread's stack: no false sharing with other workers
    uint64_t count = 0;
    size_t unfolded = 0;  // bytes counted in `map` since it was last folded
    while (!stop.load(std::memory_order_relaxed)) {
      size_t i = next.fetch_add(1);
      if (i >= pieces.size()) break;
      const Piece& pc = pieces[i];
      size_t pos = 0;
      while (pos < pc.n) {
        size_t end = Pretokenizer::next(pc.s, pc.n, pos);
        bool inserted;
        ChunkStat& st = map.find_or_insert(pc.s + pos, end - pos, ChunkStat{0, pc.base + pos}, inserted);
        st.count += 1;
        if (pc.base + pos < st.first) st.first = pc.base + pos;
        ++count;
        pos = end;
      }
      unfolded += pc.n;
      if (unfolded >= (size_t(1) << 20)) {
        fold(map);
        unfolded = 0;
      }
    }
    if (map.size()) fold(map);
    nchunks += count;
  };
  // A worker that fails (e.g. out of memory) stops the others; the error is rethrown here.
  run_threads(std::min<size_t>(size_t(threads_), std::max<size_t>(pieces.size(), 1)), count_pieces);
  total_chunks_ += nchunks.load();
}

namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;  // no such node / pair
constexpr uint32_t kDead = 0x80000000u;  // in id[]: this node does not start a symbol

struct PairInfo {
  int64_t count;
  uint32_t a, b;
  uint32_t first;       // lower bound of the node index of the first occurrence
  uint32_t begin, len;  // occurrences: pool[begin, begin + len), ascending, some maybe stale
};

struct HeapEntry {
  int64_t count;
  uint32_t first;
  uint32_t pair;
  bool operator<(const HeapEntry& o) const {  // max-heap: larger count, then earlier first
    if (count != o.count) return count < o.count;
    return first > o.first;
  }
};

}  // namespace

// BPE on the unique chunks, laid end to end in order of first occurrence.
//
// Symbols: one uint32 per byte of unique text. A node that starts a symbol holds the
// symbol's id; the symbol spans tok_len[id] nodes, so the next symbol starts right
// after it. The symbol's last node holds kDead | (distance back to its start), so the
// previous symbol is found from the node before. Other nodes hold kDead | anything.
// This is a doubly linked list of symbols in 4 bytes a node instead of 12.
//
// Pairs: a record per pair seen, found through an open-addressing index. A pair's
// count only grows in the step that creates its newer symbol (every new pair holds
// it); afterwards it only shrinks. So each pair has exactly one entry in the max-heap,
// pushed when it is made: an entry whose key has since dropped is fixed when it
// reaches the top (a lazy update), and its occurrences were all written at once,
// as one ascending run in a shared pool that is compacted as merges make runs stale.
std::vector<Merge> Trainer::train(size_t num_merges, const ProgressFn& progress) {
  if (trained_) throw TokenizerError("this Trainer has already trained; make a new one");
  // Unique chunks in order of first occurrence (this fixes the tie-breaking order).
  auto& entries = counts_.entries();
  std::vector<uint32_t> order;
  uint64_t total_nodes = 0;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (entries[i].len >= 2) {
      order.push_back(i);
      total_nodes += entries[i].len;
      if (entries[i].len >= kDead)
        throw TokenizerError("a chunk of " + std::to_string(entries[i].len) + " bytes is too long to train on");
    }
  }
  if (total_nodes >= kNone) throw TokenizerError("too much unique text for one training run (> 4 GiB)");
  std::sort(order.begin(), order.end(),
            [&](uint32_t x, uint32_t y) { return entries[x].value.first < entries[y].value.first; });
  counts_.free_index();  // only the entries and their bytes are read from here on

  const uint32_t nodes = uint32_t(total_nodes);
  std::vector<uint32_t> id(nodes);
  std::vector<uint64_t> starts_bits(nodes / 64 + 1, 0);  // bit i: node i starts a chunk (bit `nodes` too)
  std::vector<uint64_t> weight(order.size());
  std::vector<uint32_t> start(order.size() + 1);  // first node of each chunk
  {
    uint32_t pos = 0;
    for (uint32_t c = 0; c < order.size(); ++c) {
      const auto& e = entries[order[c]];
      std::string_view key = counts_.key(e);
      weight[c] = e.value.count;
      start[c] = pos;
      starts_bits[pos >> 6] |= uint64_t(1) << (pos & 63);
      for (uint32_t k = 0; k < e.len; ++k) id[pos + k] = uint8_t(key[k]);
      pos += e.len;
    }
    start[order.size()] = pos;
    starts_bits[pos >> 6] |= uint64_t(1) << (pos & 63);
  }
  std::vector<uint32_t>().swap(order);
  unique_after_train_ = counts_.size();
  counts_.clear();  // the chunk table is no longer needed: free it before the pairs grow
  trained_ = true;

  std::vector<uint32_t> tok_len(256, 1);
  tok_len.reserve(256 + std::min<size_t>(num_merges, size_t(1) << 20));
  auto starts_chunk = [&](uint32_t i) { return (starts_bits[i >> 6] >> (i & 63)) & 1; };
  auto next_of = [&](uint32_t i) -> uint32_t {  // i starts a symbol
    uint32_t j = i + tok_len[id[i]];
    return starts_chunk(j) ? kNone : j;
  };
  auto prev_of = [&](uint32_t i) -> uint32_t {  // i starts a symbol
    if (starts_chunk(i)) return kNone;
    uint32_t v = id[i - 1];
    return (v & kDead) ? i - 1 - (v & ~kDead) : i - 1;
  };
  // Weight of the chunk holding node i (binary search: no per-node chunk index to store).
  auto weight_of = [&](uint32_t i) -> uint64_t {
    size_t c = size_t(std::upper_bound(start.begin(), start.end(), i) - start.begin()) - 1;
    return weight[c];
  };

  BlockArray<PairInfo, 12> pairs;
  std::vector<uint32_t> slots(size_t(1) << 12, kNone);  // pair index: open addressing
  auto slot_of = [&](uint32_t a, uint32_t b) -> uint32_t& {
    size_t mask = slots.size() - 1, i = size_t(mix64(pair_key(a, b))) & mask;
    while (slots[i] != kNone && (pairs[slots[i]].a != a || pairs[slots[i]].b != b)) i = (i + 1) & mask;
    return slots[i];
  };
  auto find_pair = [&](uint32_t a, uint32_t b) { return slot_of(a, b); };
  auto pair_index = [&](uint32_t a, uint32_t b) -> uint32_t {
    uint32_t& s = slot_of(a, b);
    if (s != kNone) return s;
    uint32_t pi = uint32_t(pairs.size());
    pairs.push_back(PairInfo{0, a, b, kNone, 0, 0});
    s = pi;
    if (2 * pairs.size() > slots.size()) {
      std::vector<uint32_t>(slots.size() * 2, kNone).swap(slots);
      for (uint32_t q = 0; q < pairs.size(); ++q) slot_of(pairs[q].a, pairs[q].b) = q;
    }
    return pi;
  };
  auto valid = [&](const PairInfo& p, uint32_t pos) {
    if (id[pos] != p.a) return false;
    uint32_t j = next_of(pos);
    return j != kNone && id[j] == p.b;
  };

  // Every adjacent pair: counts, then the occurrences as one ascending run per pair.
  BlockArray<uint32_t, 14> pool;
  for (uint32_t c = 0; c + 1 < start.size(); ++c) {
    for (uint32_t i = start[c]; i + 1 < start[c + 1]; ++i) {
      PairInfo& p = pairs[pair_index(id[i], id[i + 1])];
      p.count += int64_t(weight[c]);
      if (p.len++ == 0) p.first = i;
    }
  }
  {
    uint32_t at = 0;
    for (uint32_t pi = 0; pi < pairs.size(); ++pi) {
      pairs[pi].begin = at;
      at += pairs[pi].len;
      pairs[pi].len = 0;
    }
    pool.resize(at);
    for (uint32_t i = 0; i + 1 < nodes; ++i) {
      if (starts_chunk(i + 1)) continue;
      PairInfo& p = pairs[find_pair(id[i], id[i + 1])];
      pool[p.begin + p.len++] = i;
    }
  }
  // Drop the stale occurrences and the runs of dead pairs (runs stay in pair order).
  auto compact = [&]() {
    uint32_t w = 0;
    for (uint32_t pi = 0; pi < pairs.size(); ++pi) {
      PairInfo& p = pairs[pi];
      uint32_t begin = w;
      if (p.count > 0)
        for (uint32_t r = p.begin; r < p.begin + p.len; ++r)
          if (valid(p, pool[r])) pool[w++] = pool[r];
      p.begin = begin;
      p.len = w - begin;
    }
    pool.resize(w);
  };
  size_t compact_at = pool.size() + pool.size() / 4 + 65536;

  std::priority_queue<HeapEntry> heap;
  for (uint32_t pi = 0; pi < pairs.size(); ++pi) heap.push({pairs[pi].count, pairs[pi].first, pi});

  std::vector<std::pair<uint32_t, uint32_t>> fresh;  // (pair, node) made by this step
  auto dec = [&](uint32_t a, uint32_t b, uint64_t w) {
    uint32_t pi = find_pair(a, b);
    if (pi != kNone) pairs[pi].count -= int64_t(w);
  };
  auto inc = [&](uint32_t a, uint32_t b, uint32_t pos, uint64_t w) {
    uint32_t pi = pair_index(a, b);
    PairInfo& p = pairs[pi];
    p.count += int64_t(w);
    if (pos < p.first) p.first = pos;
    fresh.emplace_back(pi, pos);
  };

  std::vector<Merge> merges;
  merges.reserve(std::min<size_t>(num_merges, size_t(1) << 20));  // grows past that if the text allows
  uint64_t vocab_bytes = 256;  // bytes of all tokens so far
  uint64_t report_every = std::max<uint64_t>(1, num_merges / 500);
  if (progress && !progress(0, num_merges)) throw std::runtime_error("cancelled");
  while (merges.size() < num_merges && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    PairInfo& p = pairs[top.pair];
    if (p.count <= 0) continue;  // dead for good: a count never grows again
    if (tok_len[p.a] + tok_len[p.b] > kMaxTokenBytes) {  // too long a token: never merged
      p.count = 0;
      continue;
    }
    if (top.count != p.count || top.first != p.first) {  // its key dropped since: fix it
      heap.push({p.count, p.first, top.pair});
      continue;
    }
    // `first` is a lower bound; make it exact (dropping stale occurrences) before trusting it.
    uint32_t keep = p.begin;
    for (uint32_t r = p.begin; r < p.begin + p.len; ++r)
      if (valid(p, pool[r])) pool[keep++] = pool[r];
    p.len = keep - p.begin;
    uint32_t exact = p.len ? pool[p.begin] : kNone;
    if (exact != p.first) {
      p.first = exact;
      heap.push({p.count, p.first, top.pair});
      continue;
    }
    if (vocab_bytes + tok_len[p.a] + tok_len[p.b] > kMaxVocabBytes) break;  // the vocabulary is full
    // Merge every occurrence, left to right.
    const uint32_t a = p.a, b = p.b, z = uint32_t(256 + merges.size());
    vocab_bytes += tok_len[a] + tok_len[b];
    merges.emplace_back(a, b);
    tok_len.push_back(tok_len[a] + tok_len[b]);
    const uint32_t self = top.pair, begin = p.begin, end = p.begin + p.len;
    for (uint32_t r = begin; r < end; ++r) {
      uint32_t i = pool[r];
      if (id[i] != a) continue;  // merged into the previous occurrence ("aaa")
      uint32_t j = next_of(i);
      if (j == kNone || id[j] != b) continue;
      uint64_t w = weight_of(i);
      uint32_t pv = prev_of(i), nx = next_of(j);
      if (pv != kNone) dec(id[pv], a, w);
      if (nx != kNone) dec(b, id[nx], w);
      uint32_t tail = j + tok_len[b] - 1;
      id[i] = z;
      id[j] = kDead | (j - i);
      id[tail] = kDead | (tail - i);
      if (pv != kNone) inc(id[pv], z, pv, w);
      if (nx != kNone) inc(z, id[nx], i, w);
    }
    pairs[self].count = 0;
    pairs[self].len = 0;
    // The new pairs: their runs of occurrences, and their one heap entry each.
    std::sort(fresh.begin(), fresh.end());
    if (pool.size() + fresh.size() > compact_at) {
      compact();
      compact_at = pool.size() + pool.size() / 4 + 65536;
    }
    for (size_t k = 0; k < fresh.size();) {
      uint32_t pi = fresh[k].first;
      PairInfo& q = pairs[pi];
      q.begin = uint32_t(pool.size());
      for (; k < fresh.size() && fresh[k].first == pi; ++k)
        if (q.count > 0) pool.push_back(fresh[k].second);
      q.len = uint32_t(pool.size()) - q.begin;
      if (q.count > 0) heap.push({q.count, q.first, pi});
    }
    fresh.clear();
    if (progress && (merges.size() % report_every == 0 || merges.size() == num_merges)) {
      if (!progress(merges.size(), num_merges)) throw std::runtime_error("cancelled");
    }
  }
  if (progress && merges.size() < num_merges) progress(merges.size(), merges.size());
  return merges;
}

// ---------------------------------------------------------------- encoding

// Cache of encoded chunks (up to kMaxChunk bytes), one per thread at a time. Open
// addressing with everything a hit needs in one 32-byte slot: the hash, the first 8
// key bytes (the rest, if any, in `arena`) and up to two token ids inline (more in
// `toks`). Most chunks are short words that encode to one token: one cache line.
struct Encoder::Cache {
  struct Slot {
    uint64_t hash = 0;  // 0: empty
    uint64_t key8 = 0;  // first 8 bytes of the key, zero padded
    uint32_t key_off = 0;
    uint16_t len = 0;
    uint16_t ntok = 0;
    uint32_t tok[2] = {0, 0};  // the ids when ntok <= 2, else tok[0] = offset in toks
  };
  static constexpr size_t kMaxChunk = 64;
  static constexpr size_t kMaxEntries = size_t(1) << 18;
  static constexpr size_t kHot = 16384;  // direct-mapped front table (512 KiB, stays in L2)
  std::vector<Slot> hot;
  std::vector<Slot> slots;
  size_t used = 0;
  std::vector<uint8_t> arena;
  std::vector<uint32_t> toks;

  Cache() : hot(kHot) { slots.assign(size_t(1) << 12, Slot{}); }
  void clear() {
    hot.assign(kHot, Slot{});
    slots.assign(size_t(1) << 12, Slot{});
    used = 0;
    arena.clear();
    toks.clear();
  }
  void emit(const Slot& sl, std::vector<uint32_t>& out) const {
    if (sl.ntok == 1) {
      out.push_back(sl.tok[0]);
    } else if (sl.ntok == 2) {
      out.push_back(sl.tok[0]);
      out.push_back(sl.tok[1]);
    } else {
      const uint32_t* t = toks.data() + sl.tok[0];
      out.insert(out.end(), t, t + sl.ntok);
    }
  }
  // Slot of a key in the front table: (len, key8) decide it, so that short keys are
  // looked up there without a full hash.
  static size_t hot_index(size_t len, uint64_t key8) {
    return size_t(((key8 ^ (uint64_t(len) << 58)) * 0x9E3779B97F4A7C15ULL) >> 50) & (kHot - 1);
  }
  static uint64_t hash_of(const uint8_t* p, size_t len, uint64_t key8) {
    uint64_t h = len <= 8 ? mix64(key8 ^ (uint64_t(len) * 0x9E3779B97F4A7C15ULL)) : hash_bytes(p, len);
    return h | 1;
  }
  bool same(const Slot& sl, const uint8_t* p, size_t len, uint64_t h, uint64_t key8) const {
    return sl.hash == h && sl.len == len && sl.key8 == key8 &&
           (len <= 8 || std::memcmp(arena.data() + sl.key_off, p + 8, len - 8) == 0);
  }
  // The slot holding the key, or the empty slot where it belongs.
  Slot& find(const uint8_t* p, size_t len, uint64_t h, uint64_t key8) {
    size_t mask = slots.size() - 1;
    size_t i = size_t(h) & mask;
    while (true) {
      Slot& sl = slots[i];
      if (sl.hash == 0) return sl;
      if (sl.hash == h && sl.len == len && sl.key8 == key8 &&
          (len <= 8 || std::memcmp(arena.data() + sl.key_off, p + 8, len - 8) == 0))
        return sl;
      i = (i + 1) & mask;
    }
  }
  void grow() {
    std::vector<Slot> old(slots.size() * 2);
    old.swap(slots);
    size_t mask = slots.size() - 1;
    for (const Slot& sl : old) {
      if (!sl.hash) continue;
      size_t i = size_t(sl.hash) & mask;
      while (slots[i].hash) i = (i + 1) & mask;
      slots[i] = sl;
    }
  }
};

Encoder::~Encoder() = default;

std::unique_ptr<Encoder::Cache> Encoder::take_cache() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_pool_.empty()) return std::make_unique<Cache>();
  auto c = std::move(cache_pool_.back());
  cache_pool_.pop_back();
  return c;
}

void Encoder::give_cache(std::unique_ptr<Cache> c) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_pool_.push_back(std::move(c));
}

Encoder::Encoder(const std::vector<Merge>& merges, std::vector<std::pair<std::string, uint32_t>> specials,
                 std::vector<uint32_t> ids, Split split)
    : ranks_(merges.size() + 16), specials_(std::move(specials)), num_merges_(merges.size()),
      split_(split), ext_(std::move(ids)) {
  if (!ext_.empty()) {
    if (ext_.size() != 256 + merges.size())
      throw TokenizerError("ids must give one id for each byte and merge (" + std::to_string(256 + merges.size()) +
                           "), got " + std::to_string(ext_.size()));
    uint32_t top = 0;
    for (uint32_t v : ext_) top = std::max(top, v);
    if (top >= (uint32_t(1) << 31)) throw TokenizerError("ids must be below 2^31");
    internal_of_.assign(size_t(top) + 1, kNone);
    for (size_t i = 0; i < ext_.size(); ++i) {
      if (internal_of_[ext_[i]] != kNone) throw TokenizerError("id " + std::to_string(ext_[i]) + " is given twice");
      internal_of_[ext_[i]] = uint32_t(i);
    }
  }
  // Lengths first, so that merges building ever longer tokens are refused before any
  // byte of them is allocated.
  {
    std::vector<uint32_t> len(256, 1);
    len.reserve(256 + merges.size());
    uint64_t total = 256;
    for (size_t i = 0; i < merges.size(); ++i) {
      auto [a, b] = merges[i];
      uint32_t z = uint32_t(256 + i);
      if (a >= z || b >= z) throw TokenizerError("merge " + std::to_string(i) + " uses an id not yet defined");
      uint64_t l = uint64_t(len[a]) + len[b];
      if (l > kMaxTokenBytes)
        throw TokenizerError("merge " + std::to_string(i) + " makes a token of " + std::to_string(l) +
                             " bytes; tokens are limited to " + std::to_string(kMaxTokenBytes) + " bytes");
      total += l;
      if (total > kMaxVocabBytes)
        throw TokenizerError("the merges make a vocabulary of more than " + std::to_string(kMaxVocabBytes) +
                             " bytes");
      len.push_back(uint32_t(l));
    }
  }
  vocab_.reserve(256 + merges.size());
  for (int i = 0; i < 256; ++i) vocab_.emplace_back(1, char(i));
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [a, b] = merges[i];
    uint32_t z = uint32_t(256 + i);
    bool inserted;
    uint32_t& v = ranks_.get_or_insert(pair_key(a, b), z, inserted);
    if (!inserted) throw TokenizerError("merge " + std::to_string(i) + " repeats an earlier pair");
    (void)v;
    vocab_.push_back(vocab_[a] + vocab_[b]);
  }
}

void Encoder::encode_chunk(const uint8_t* s, size_t n, std::vector<uint32_t>& out) const {
  if (n == 1) {
    out.push_back(ext(s[0]));
    return;
  }
  thread_local std::vector<uint32_t> ids, rk, nxt, prv;
  ids.assign(s, s + n);
  if (n <= 48) {
    // Short chunk: repeatedly merge the lowest-ranked pair (leftmost on a tie).
    rk.resize(n);
    size_t m = n;
    for (size_t i = 0; i + 1 < m; ++i) rk[i] = rank_of(ids[i], ids[i + 1]);
    while (m >= 2) {
      uint32_t best = kNoRank;
      size_t at = 0;
      for (size_t i = 0; i + 1 < m; ++i) {
        if (rk[i] < best) {
          best = rk[i];
          at = i;
        }
      }
      if (best == kNoRank) break;
      ids[at] = best;
      for (size_t i = at + 1; i + 1 < m; ++i) {
        ids[i] = ids[i + 1];
        rk[i] = rk[i + 1];
      }
      --m;
      if (at + 1 < m) rk[at] = rank_of(ids[at], ids[at + 1]);
      if (at > 0) rk[at - 1] = rank_of(ids[at - 1], ids[at]);
    }
    if (ext_.empty()) out.insert(out.end(), ids.begin(), ids.begin() + m);
    else for (size_t i = 0; i < m; ++i) out.push_back(ext_[ids[i]]);
    return;
  }
  // Long chunk: linked list + min-heap of (rank, position), lazily validated.
  nxt.resize(n);
  prv.resize(n);
  for (size_t i = 0; i < n; ++i) {
    nxt[i] = i + 1 < n ? uint32_t(i + 1) : kNone;
    prv[i] = i ? uint32_t(i - 1) : kNone;
  }
  using E = std::pair<uint32_t, uint32_t>;  // (rank, position)
  std::priority_queue<E, std::vector<E>, std::greater<E>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    uint32_t r = rank_of(ids[i], ids[i + 1]);
    if (r != kNoRank) heap.push({r, uint32_t(i)});
  }
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (ids[i] == kNone) continue;
    uint32_t j = nxt[i];
    if (j == kNone || rank_of(ids[i], ids[j]) != r) continue;
    ids[i] = r;
    ids[j] = kNone;
    uint32_t k = nxt[j];
    nxt[i] = k;
    if (k != kNone) {
      prv[k] = i;
      uint32_t r2 = rank_of(ids[i], ids[k]);
      if (r2 != kNoRank) heap.push({r2, i});
    }
    uint32_t p = prv[i];
    if (p != kNone) {
      uint32_t r2 = rank_of(ids[p], ids[i]);
      if (r2 != kNoRank) heap.push({r2, p});
    }
  }
  for (uint32_t i = 0; i != kNone; i = nxt[i]) out.push_back(ext(ids[i]));
}

void Encoder::encode_ordinary_cached(const uint8_t* s, size_t n, std::vector<uint32_t>& out,
                                     Cache& cache) const {
  size_t pos = 0;
  while (pos < n) {
    size_t end = split_next(split_, s, n, pos);
    size_t len = end - pos;
    if (len == 1) {
      out.push_back(ext(s[pos]));
    } else if (len > Cache::kMaxChunk) {
      encode_chunk(s + pos, len, out);
    } else {
      const uint8_t* p = s + pos;
      uint64_t key8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      if (pos + 8 <= n) {  // one fixed 8-byte load, masked to the key (no store-forwarding stall)
        std::memcpy(&key8, p, 8);
        if (len < 8) key8 &= (uint64_t(1) << (8 * len)) - 1;  // keeps the first len bytes
      } else
#endif
      {
        key8 = 0;
        for (size_t k = 0; k < len && k < 8; ++k) key8 |= uint64_t(p[k]) << (8 * k);
      }
      // Front table first. A key of up to 8 bytes is its (len, key8): no hash to compute.
      Cache::Slot* hot = &cache.hot[Cache::hot_index(len, key8)];
      if (len <= 8 && hot->len == len && hot->key8 == key8) {
        cache.emit(*hot, out);
        pos = end;
        continue;
      }
      uint64_t h = Cache::hash_of(p, len, key8);
      Cache::Slot* sl = hot;
      if (!cache.same(*sl, p, len, h, key8)) {
        sl = &cache.find(p, len, h, key8);
        if (sl->hash) *hot = *sl;
      }
      if (sl->hash) {
        cache.emit(*sl, out);
      } else {
        size_t before = out.size();
        encode_chunk(p, len, out);
        size_t ntok = out.size() - before;
        if (cache.used >= Cache::kMaxEntries) {
          cache.clear();
          sl = &cache.find(p, len, h, key8);
        }
        sl->hash = h;
        sl->key8 = key8;
        sl->len = uint16_t(len);
        sl->ntok = uint16_t(ntok);
        if (len > 8) {
          sl->key_off = uint32_t(cache.arena.size());
          cache.arena.insert(cache.arena.end(), p + 8, p + len);
        }
        if (ntok <= 2) {
          for (size_t k = 0; k < ntok; ++k) sl->tok[k] = out[before + k];
        } else {
          sl->tok[0] = uint32_t(cache.toks.size());
          cache.toks.insert(cache.toks.end(), out.begin() + before, out.end());
        }
        if (++cache.used * 2 > cache.slots.size()) cache.grow();
      }
    }
    pos = end;
  }
}

void Encoder::encode_ordinary(const uint8_t* s, size_t n, std::vector<uint32_t>& out) const {
  auto cache = take_cache();
  encode_ordinary_cached(s, n, out, *cache);
  give_cache(std::move(cache));
}

namespace {
struct Segment {
  const uint8_t* s;
  size_t n;
  uint32_t special;  // kNone for ordinary text
};

std::vector<Segment> segments_of(std::string_view text, const SpecialMatcher& m,
                                 const std::vector<std::pair<std::string, uint32_t>>& specials,
                                 size_t target, Split kind) {
  std::vector<Segment> segs;
  size_t from = 0;
  while (from <= text.size()) {
    auto [p, k] = m.empty() ? std::make_pair(std::string_view::npos, size_t(0)) : m.find(text, from);
    size_t end = p == std::string_view::npos ? text.size() : p;
    const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data()) + from;
    for (auto [a, b] : cut_pieces(s, end - from, target, kind)) segs.push_back({s + a, b - a, kNone});
    if (p == std::string_view::npos) break;
    uint32_t sid = kNone;
    for (const auto& sp : specials)
      if (sp.first == m.tokens()[k]) sid = sp.second;
    segs.push_back({nullptr, 0, sid});
    from = p + m.tokens()[k].size();
  }
  return segs;
}
}  // namespace

void Encoder::encode_segments(std::string_view text, const SpecialMatcher& m, int threads,
                              std::vector<uint32_t>& out) const {
  size_t target = std::max<size_t>(size_t(1) << 16, text.size() / size_t(std::max(threads, 1) * 8) + 1);
  std::vector<Segment> segs = segments_of(text, m, specials_, target, split_);
  if (threads <= 1 || segs.size() <= 1) {
    auto cache = take_cache();
    for (const Segment& sg : segs) {
      if (sg.special != kNone) out.push_back(sg.special);
      else encode_ordinary_cached(sg.s, sg.n, out, *cache);
    }
    give_cache(std::move(cache));
    return;
  }
  std::vector<std::vector<uint32_t>> parts(segs.size());
  std::atomic<size_t> next{0};
  // A worker that fails (e.g. out of memory) stops the others; the error is rethrown here.
  run_threads(std::min<size_t>(size_t(threads), segs.size()), [&](const std::atomic<bool>& stop) {
    auto cache = take_cache();
    while (!stop.load(std::memory_order_relaxed)) {
      size_t i = next.fetch_add(1);
      if (i >= segs.size()) break;
      const Segment& sg = segs[i];
      std::vector<uint32_t> ids;  // filled here, then moved: no false sharing on parts[]
      if (sg.special != kNone) ids.push_back(sg.special);
      else {
        ids.reserve(sg.n / 3);
        encode_ordinary_cached(sg.s, sg.n, ids, *cache);
      }
      parts[i] = std::move(ids);
    }
    give_cache(std::move(cache));
  });
  size_t total = out.size();
  for (auto& p : parts) total += p.size();
  out.reserve(total);
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

std::vector<uint32_t> Encoder::encode(std::string_view text, const std::vector<std::string>& allowed,
                                      int threads) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 16);
  encode_segments(text, SpecialMatcher(allowed), threads, out);
  return out;
}

void Encoder::encode_range(const std::vector<std::string_view>& texts, const SpecialMatcher& m, size_t begin,
                           size_t end, std::vector<uint32_t>& ids, std::vector<size_t>& ends) const {
  auto cache = take_cache();
  size_t bytes = 0;
  for (size_t i = begin; i < end; ++i) bytes += texts[i].size();
  ids.reserve(ids.size() + bytes / 4 + 16);
  ends.reserve(ends.size() + (end - begin));
  for (size_t i = begin; i < end; ++i) {
    std::string_view text = texts[i];
    if (m.empty()) {
      encode_ordinary_cached(reinterpret_cast<const uint8_t*>(text.data()), text.size(), ids, *cache);
    } else {
      for (const Segment& sg : segments_of(text, m, specials_, ~size_t(0) >> 1, split_)) {
        if (sg.special != kNone) ids.push_back(sg.special);
        else encode_ordinary_cached(sg.s, sg.n, ids, *cache);
      }
    }
    ends.push_back(ids.size());
  }
  give_cache(std::move(cache));
}

std::vector<std::vector<uint32_t>> Encoder::encode_batch(const std::vector<std::string_view>& texts,
                                                         const std::vector<std::string>& allowed,
                                                         int threads) const {
  std::vector<std::vector<uint32_t>> out(texts.size());
  SpecialMatcher m(allowed);
  constexpr size_t kBlock = 64;  // texts handed out per atomic step
  size_t nblocks = (texts.size() + kBlock - 1) / kBlock;
  parallel_for(nblocks, threads, [&](size_t b) {
    size_t begin = b * kBlock, end = std::min(texts.size(), begin + kBlock);
    std::vector<uint32_t> ids;
    std::vector<size_t> ends;
    encode_range(texts, m, begin, end, ids, ends);
    for (size_t i = begin, from = 0; i < end; from = ends[i - begin], ++i)
      out[i].assign(ids.begin() + from, ids.begin() + ends[i - begin]);
  });
  return out;
}

namespace {
// Replace every maximal ill-formed subpart by U+FFFD, as Python's errors="replace".
std::string replace_invalid(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  const uint8_t* s = reinterpret_cast<const uint8_t*>(in.data());
  size_t n = in.size(), i = 0;
  while (i < n) {
    uint32_t cp;
    size_t len = s[i] < 0x80 ? (cp = s[i], 1) : decode_utf8(s + i, n - i, cp);
    if (cp == kInvalidCodepoint) out += "\xEF\xBF\xBD";
    else out.append(in, i, len);
    i += len;
  }
  return out;
}
}  // namespace

void read_text_blocks(const std::string& path, const std::string& errors, const std::vector<std::string>& tokens,
                      const std::function<void(std::string&, uint64_t, uint64_t)>& fn, Split kind) {
  bool replace = errors == "replace";
  if (!replace && errors != "strict") throw TokenizerError("errors must be 'strict' or 'replace', not '" + errors + "'");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw TokenizerError("cannot open " + path);
  std::unique_ptr<FILE, int (*)(FILE*)> guard(f, &std::fclose);
  std::fseek(f, 0, SEEK_END);
  long long fsize = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  SpecialMatcher m(tokens);
  size_t longest = 0;
  for (const auto& t : tokens) longest = std::max(longest, t.size());

  const size_t block = size_t(16) << 20;
  std::string buf;      // unconsumed bytes
  uint64_t offset = 0;  // file offset of buf[0]
  std::vector<char> tmp(block);
  bool eof = false;
  while (!eof || !buf.empty()) {
    while (!eof && buf.size() < block) {
      size_t got = std::fread(tmp.data(), 1, tmp.size(), f);
      if (got == 0) eof = true;
      buf.append(tmp.data(), got);
    }
    // Cut at the last safe place: after "\n" before a non-space, not inside a special token.
    size_t cut = buf.size();
    if (!eof) {
      const uint8_t* s = reinterpret_cast<const uint8_t*>(buf.data());
      size_t lo = buf.size() > block / 2 ? buf.size() - block / 2 : 0;
      cut = safe_cut_before(s, buf.size(), lo, buf.size() - 1, kind);
      if (cut > lo && longest > 1) {
        size_t from = cut > longest ? cut - longest : 0;
        auto [p, k] = m.find(std::string_view(buf).substr(0, cut + longest), from);
        if (p != std::string_view::npos && p < cut && p + tokens[k].size() > cut) cut = p;
      }
      if (cut <= lo) {
        // No safe place in the last half block: read on (a line longer than a block).
        size_t got = std::fread(tmp.data(), 1, tmp.size(), f);
        if (got == 0) eof = true;
        buf.append(tmp.data(), got);
        continue;
      }
    }
    std::string piece = buf.substr(0, cut);
    buf.erase(0, cut);
    size_t bad = utf8_error_offset(reinterpret_cast<const uint8_t*>(piece.data()), piece.size());
    if (bad != piece.size()) {
      if (!replace)
        throw TokenizerError(path + ": invalid UTF-8 at byte offset " + std::to_string(offset + bad) +
                             " (use errors='replace' to substitute U+FFFD)");
      piece = replace_invalid(piece);
    }
    offset += cut;
    fn(piece, offset, uint64_t(fsize > 0 ? fsize : 0));
  }
}

std::vector<uint32_t> Encoder::encode_file(const std::string& path, int threads, const std::string& errors,
                                           const ProgressFn& progress) const {
  std::vector<std::string> tokens;
  for (const auto& sp : specials_) tokens.push_back(sp.first);
  SpecialMatcher m(tokens);
  std::vector<uint32_t> out;
  read_text_blocks(path, errors, tokens, [&](std::string& piece, uint64_t done, uint64_t total) {
    if (out.empty()) out.reserve(size_t(total / 4));
    encode_segments(piece, m, threads, out);
    if (progress && !progress(done, total)) throw std::runtime_error("cancelled");
  }, split_);
  return out;
}

void Trainer::add_file(const std::string& path, const std::string& errors, const ProgressFn& progress) {
  read_text_blocks(path, errors, specials_.tokens(), [&](std::string& piece, uint64_t done, uint64_t total) {
    add({std::string_view(piece)});
    if (progress && !progress(done, total)) throw std::runtime_error("cancelled");
  });
}

std::string Encoder::decode_bytes(const uint32_t* ids, size_t n) const {
  std::string out;
  out.reserve(n * 4);
  for (size_t i = 0; i < n; ++i) {
    uint32_t t = ids[i];
    if (ext_.empty() ? t < vocab_.size() : (t < internal_of_.size() && internal_of_[t] != kNone)) {
      out += vocab_[ext_.empty() ? t : internal_of_[t]];
      continue;
    }
    bool found = false;
    for (const auto& sp : specials_) {
      if (sp.second == t) {
        out += sp.first;
        found = true;
        break;
      }
    }
    if (!found) throw TokenizerError("token id " + std::to_string(t) + " is not in the vocabulary");
  }
  return out;
}

}  // namespace alilama

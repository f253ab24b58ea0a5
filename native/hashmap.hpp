// Small open-addressing hash maps used by the trainer and the encoder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace alilama {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ mix64(w)) * 0x9E3779B97F4A7C15ULL;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ mix64(w ^ (uint64_t(n) << 59))) * 0x9E3779B97F4A7C15ULL;
  }
  return mix64(h);
}

// Byte-string keys (stored in one arena) to a value V. Entries keep insertion order.
template <class V>
class StringMap {
 public:
  struct Entry {
    uint64_t hash;
    uint64_t off;
    uint32_t len;
    V value;
  };

  StringMap() { rehash(1024); }

  // Value of `key`, inserted with `init` when missing; `inserted` tells which.
  V& find_or_insert(const uint8_t* key, size_t len, const V& init, bool& inserted) {
    uint64_t h = hash_bytes(key, len);
    return find_or_insert_hashed(key, len, h, init, inserted);
  }

  V& find_or_insert_hashed(const uint8_t* key, size_t len, uint64_t h, const V& init, bool& inserted) {
    size_t mask = slots_.size() - 1;
    size_t i = size_t(h) & mask;
    while (true) {
      uint32_t e = slots_[i];
      if (e == kEmpty) break;
      const Entry& en = entries_[e];
      if (en.hash == h && en.len == len && std::memcmp(arena_.data() + en.off, key, len) == 0) {
        inserted = false;
        return entries_[e].value;
      }
      i = (i + 1) & mask;
    }
    inserted = true;
    slots_[i] = uint32_t(entries_.size());
    entries_.push_back(Entry{h, uint64_t(arena_.size()), uint32_t(len), init});
    arena_.insert(arena_.end(), key, key + len);
    if (entries_.size() * 2 > slots_.size()) rehash(slots_.size() * 2);
    return entries_.back().value;
  }

  V* find(const uint8_t* key, size_t len) {
    uint64_t h = hash_bytes(key, len);
    size_t mask = slots_.size() - 1;
    size_t i = size_t(h) & mask;
    while (true) {
      uint32_t e = slots_[i];
      if (e == kEmpty) return nullptr;
      const Entry& en = entries_[e];
      if (en.hash == h && en.len == len && std::memcmp(arena_.data() + en.off, key, len) == 0)
        return &entries_[e].value;
      i = (i + 1) & mask;
    }
  }

  size_t size() const { return entries_.size(); }
  size_t arena_bytes() const { return arena_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }
  std::vector<Entry>& entries() { return entries_; }
  std::string_view key(const Entry& e) const {
    return std::string_view(reinterpret_cast<const char*>(arena_.data() + e.off), e.len);
  }
  // Empty the map but keep its memory for reuse.
  void reset() {
    entries_.clear();
    arena_.clear();
    std::fill(slots_.begin(), slots_.end(), kEmpty);
  }
  void clear() {
    entries_.clear();
    arena_.clear();
    entries_.shrink_to_fit();
    arena_.shrink_to_fit();
    slots_.assign(1024, kEmpty);
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  void rehash(size_t n) {
    slots_.assign(n, kEmpty);
    size_t mask = n - 1;
    for (size_t e = 0; e < entries_.size(); ++e) {
      size_t i = size_t(entries_[e].hash) & mask;
      while (slots_[i] != kEmpty) i = (i + 1) & mask;
      slots_[i] = uint32_t(e);
    }
  }
  std::vector<uint32_t> slots_;
  std::vector<Entry> entries_;
  std::vector<uint8_t> arena_;
};

// 64-bit keys (never ~0) to 32-bit values.
class U64Map {
 public:
  explicit U64Map(size_t expected = 1024) {
    size_t n = 16;
    while (n < expected * 2) n <<= 1;
    keys_.assign(n, kEmptyKey);
    vals_.assign(n, 0);
  }
  // Pointer to the value of `key`, or nullptr.
  const uint32_t* find(uint64_t key) const {
    size_t mask = keys_.size() - 1;
    size_t i = size_t(mix64(key)) & mask;
    while (true) {
      uint64_t k = keys_[i];
      if (k == key) return &vals_[i];
      if (k == kEmptyKey) return nullptr;
      i = (i + 1) & mask;
    }
  }
  // Value of `key`, inserting `init` when missing.
  uint32_t& get_or_insert(uint64_t key, uint32_t init, bool& inserted) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t mask = keys_.size() - 1;
    size_t i = size_t(mix64(key)) & mask;
    while (true) {
      uint64_t k = keys_[i];
      if (k == key) {
        inserted = false;
        return vals_[i];
      }
      if (k == kEmptyKey) {
        keys_[i] = key;
        vals_[i] = init;
        ++size_;
        inserted = true;
        return vals_[i];
      }
      i = (i + 1) & mask;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmptyKey = ~uint64_t(0);
  void grow() {
    std::vector<uint64_t> ok;
    std::vector<uint32_t> ov;
    ok.swap(keys_);
    ov.swap(vals_);
    keys_.assign(ok.size() * 2, kEmptyKey);
    vals_.assign(ok.size() * 2, 0);
    size_t mask = keys_.size() - 1;
    for (size_t j = 0; j < ok.size(); ++j) {
      if (ok[j] == kEmptyKey) continue;
      size_t i = size_t(mix64(ok[j])) & mask;
      while (keys_[i] != kEmptyKey) i = (i + 1) & mask;
      keys_[i] = ok[j];
      vals_[i] = ov[j];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> vals_;
  size_t size_ = 0;
};

inline uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }

}  // namespace alilama

// Small open-addressing hash maps used by the trainer and the encoder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
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

// An array grown in fixed blocks: growing never copies, so it never holds two copies
// of itself (a std::vector briefly does, at twice the size, when it grows).
template <class T, size_t kShift>
class BlockArray {
 public:
  static constexpr size_t kSize = size_t(1) << kShift, kMask = kSize - 1;
  T& operator[](size_t i) { return blocks_[i >> kShift][i & kMask]; }
  const T& operator[](size_t i) const { return blocks_[i >> kShift][i & kMask]; }
  size_t size() const { return size_; }
  void push_back(const T& v) {
    if (size_ == blocks_.size() * kSize) blocks_.emplace_back(new T[kSize]);
    (*this)[size_++] = v;
  }
  // New elements are left uninitialised; blocks past the new size are freed.
  void resize(size_t n) {
    while (blocks_.size() * kSize < n) blocks_.emplace_back(new T[kSize]);
    blocks_.resize((n + kMask) >> kShift);
    size_ = n;
  }
  void clear() { size_ = 0; }  // keeps the blocks for reuse

 private:
  std::vector<std::unique_ptr<T[]>> blocks_;
  size_t size_ = 0;
};

// Byte-string keys (stored in one arena) to a value V. Entries keep insertion order.
template <class V>
class StringMap {
 public:
  struct Entry {
    uint32_t hash;  // low 32 bits of hash_bytes(key): the slot and a quick mismatch test
    uint32_t len;
    uint32_t off;   // of the key in the arena
    V value;
  };

  StringMap() { rehash(1024); }

  // Value of `key`, inserted with `init` when missing; `inserted` tells which.
  V& find_or_insert(const uint8_t* key, size_t len, const V& init, bool& inserted) {
    uint32_t h = uint32_t(hash_bytes(key, len));
    return find_or_insert_hashed(key, len, h, init, inserted);
  }

  V& find_or_insert_hashed(const uint8_t* key, size_t len, uint32_t h, const V& init, bool& inserted) {
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
    if (arena_.size() + len > UINT32_MAX)
      throw std::length_error("more than 4 GiB of distinct keys");
    slots_[i] = uint32_t(entries_.size());
    entries_.push_back(Entry{h, uint32_t(len), uint32_t(arena_.size()), init});
    arena_.insert(arena_.end(), key, key + len);
    if (entries_.size() * 2 > slots_.size()) rehash(slots_.size() * 2);
    return entries_[entries_.size() - 1].value;
  }

  V* find(const uint8_t* key, size_t len) {
    uint32_t h = uint32_t(hash_bytes(key, len));
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
  const BlockArray<Entry, 12>& entries() const { return entries_; }
  BlockArray<Entry, 12>& entries() { return entries_; }
  std::string_view key(const Entry& e) const {
    return std::string_view(reinterpret_cast<const char*>(arena_.data() + e.off), e.len);
  }
  // Empty the map but keep its memory for reuse.
  void reset() {
    entries_.clear();
    arena_.clear();
    std::fill(slots_.begin(), slots_.end(), kEmpty);
  }
  // Free the hash index (entries and keys stay readable; lookups are no longer possible
  // until clear()).
  void free_index() { std::vector<uint32_t>().swap(slots_); }
  void clear() {
    entries_.resize(0);
    arena_.clear();
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
  BlockArray<Entry, 12> entries_;
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

// Unit tests of the tokenizer core, with no Python: the pre-tokenizer (pretokenize.hpp), the
// hash maps (hashmap.hpp), the special-token matcher, the trainer and the encoder (bpe.cpp).
// Built only with -DALILAMA_BUILD_TESTS=ON (target native_tests); scripts/native_tests.sh
// configures, builds and runs it. Exit status 0 when every check passes, 1 otherwise.
//
//   usage: native_tests            (prints one line per failed check and a summary)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bpe.hpp"
#include "hashmap.hpp"
#include "pretokenize.hpp"

using namespace alilama;

namespace {

int g_checks = 0, g_failures = 0;
const char* g_test = "";

// Not assert(): the Release build defines NDEBUG.
#define CHECK(cond)                                                                             \
  do {                                                                                          \
    ++g_checks;                                                                                 \
    if (!(cond)) {                                                                              \
      ++g_failures;                                                                             \
      std::fprintf(stderr, "FAIL %s: %s (%s:%d)\n", g_test, #cond, __FILE__, __LINE__);         \
    }                                                                                           \
  } while (0)

#define CHECK_THROWS(Type, expr)                                                                \
  do {                                                                                          \
    bool thrown_ = false;                                                                       \
    try {                                                                                       \
      (void)(expr);                                                                             \
    } catch (const Type&) {                                                                     \
      thrown_ = true;                                                                           \
    } catch (...) {                                                                             \
    }                                                                                           \
    ++g_checks;                                                                                 \
    if (!thrown_) {                                                                             \
      ++g_failures;                                                                             \
      std::fprintf(stderr, "FAIL %s: %s does not throw %s (%s:%d)\n", g_test, #expr, #Type,     \
                   __FILE__, __LINE__);                                                         \
    }                                                                                           \
  } while (0)

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t pos = 0; pos < s.size();) {
    size_t end = Pretokenizer::next(p, s.size(), pos);
    if (end <= pos) return {"<no progress>"};
    out.push_back(s.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

std::string show(const std::vector<std::string>& v) {
  std::string s = "[";
  for (const auto& x : v) s += "'" + x + "' ";
  return s + "]";
}

void check_split(const std::string& text, const std::vector<std::string>& want) {
  auto got = split(text);
  ++g_checks;
  if (got != want) {
    ++g_failures;
    std::fprintf(stderr, "FAIL %s: split of '%s' is %s, want %s\n", g_test, text.c_str(), show(got).c_str(),
                 show(want).c_str());
  }
}

void test_pretokenize() {
  g_test = "pretokenize";
  // Expected chunks from regex.findall(GPT4_SPLIT_PATTERN, text) (regex, the reference).
  check_split("Hello world's 12345 !!\n\n  x", {"Hello", " world", "'s", " ", "123", "45", " !!\n\n", " ", " x"});
  check_split("I'LL don't  caf\xC3\xA9\t\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\x98\x80x",
              {"I", "'LL", " don", "'t", " ", " caf\xC3\xA9", "\t\xE4\xB8\xAD\xE6\x96\x87",
               " \xF0\x9F\x98\x80\xF0\x9F\x98\x80", "x"});
  check_split("   a\r\n\r\nb ?!.. 3.14", {"  ", " a", "\r\n\r\n", "b", " ?!..", " ", "3", ".", "14"});
  check_split("", {});
  check_split("a", {"a"});
  // Ill-formed UTF-8 still splits into chunks that cover the input.
  std::string bad = "ab\xFF\xC3 cd\xE2\x82";
  std::string joined;
  for (const auto& c : split(bad)) joined += c;
  CHECK(joined == bad);
  const uint8_t* b = reinterpret_cast<const uint8_t*>(bad.data());
  CHECK(utf8_error_offset(b, bad.size()) == 2);
  std::string good = "caf\xC3\xA9 \xF0\x9F\x98\x80";
  CHECK(utf8_error_offset(reinterpret_cast<const uint8_t*>(good.data()), good.size()) == good.size());
  uint32_t cp = 0;
  CHECK(decode_utf8(reinterpret_cast<const uint8_t*>("\xC3\xA9"), 2, cp) == 2 && cp == 0xE9);
  CHECK(decode_utf8(reinterpret_cast<const uint8_t*>("\xF0\x9F\x98\x80"), 4, cp) == 4 && cp == 0x1F600);
}

void test_string_map() {
  g_test = "StringMap";
  StringMap<int> m;
  const int n = 20000;  // far past the initial 1024 slots: grows several times
  for (int i = 0; i < n; ++i) {
    std::string k = "key" + std::to_string(i);
    bool inserted = false;
    int& v = m.find_or_insert(reinterpret_cast<const uint8_t*>(k.data()), k.size(), i * 3, inserted);
    CHECK(inserted && v == i * 3);
  }
  CHECK(m.size() == size_t(n));
  bool all_found = true, order_kept = true;
  for (int i = 0; i < n; ++i) {
    std::string k = "key" + std::to_string(i);
    int* v = m.find(reinterpret_cast<const uint8_t*>(k.data()), k.size());
    all_found = all_found && v && *v == i * 3;
    order_kept = order_kept && m.key(m.entries()[size_t(i)]) == k;
  }
  CHECK(all_found);
  CHECK(order_kept);  // entries keep insertion order through every rehash
  bool inserted = true;
  int& again = m.find_or_insert(reinterpret_cast<const uint8_t*>("key7"), 4, -1, inserted);
  CHECK(!inserted && again == 21);
  again = 5;
  CHECK(*m.find(reinterpret_cast<const uint8_t*>("key7"), 4) == 5);
  CHECK(m.find(reinterpret_cast<const uint8_t*>("nope"), 4) == nullptr);
  CHECK(m.find(reinterpret_cast<const uint8_t*>("key"), 3) == nullptr);  // a prefix of keys
  bool ins = false;
  m.find_or_insert(reinterpret_cast<const uint8_t*>(""), 0, 42, ins);  // the empty key
  CHECK(ins && *m.find(reinterpret_cast<const uint8_t*>(""), 0) == 42);
  m.clear();
  CHECK(m.size() == 0 && m.find(reinterpret_cast<const uint8_t*>("key1"), 4) == nullptr);
}

void test_u64_map() {
  g_test = "U64Map";
  U64Map m(4);  // tiny: grows many times
  const uint64_t n = 50000;
  for (uint64_t i = 0; i < n; ++i) {
    bool inserted = false;
    uint32_t& v = m.get_or_insert(pair_key(uint32_t(i), uint32_t(i * 7 + 1)), uint32_t(i + 256), inserted);
    CHECK(inserted && v == i + 256);
  }
  CHECK(m.size() == n);
  bool all = true;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t* v = m.find(pair_key(uint32_t(i), uint32_t(i * 7 + 1)));
    all = all && v && *v == i + 256;
  }
  CHECK(all);
  CHECK(m.find(pair_key(1, 2)) == nullptr);
  bool inserted = true;
  CHECK(m.get_or_insert(pair_key(3, 22), 0, inserted) == 259 && !inserted);
}

void test_matcher() {
  g_test = "SpecialMatcher";
  SpecialMatcher m({"<|endoftext|>", "<|end|>", "<|x|>"});
  auto [p, k] = m.find("abc <|x|> def <|endoftext|>", 0);
  CHECK(p == 4 && m.tokens()[k] == "<|x|>");
  auto [p2, k2] = m.find("abc <|x|> def <|endoftext|>", 5);
  CHECK(p2 == 14 && m.tokens()[k2] == "<|endoftext|>");
  CHECK(m.find("no tokens <|end", 0).first == std::string_view::npos);
  SpecialMatcher nested({"<|a|>", "x<|a|>y"});  // leftmost wins, then longest
  auto [p3, k3] = nested.find("..x<|a|>y..", 0);
  CHECK(p3 == 2 && nested.tokens()[k3] == "x<|a|>y");
  CHECK(SpecialMatcher().empty());
  CHECK_THROWS(TokenizerError, SpecialMatcher({""}));
}

std::vector<Merge> train(const std::vector<std::string>& texts, size_t merges, int threads = 1,
                         std::vector<std::string> specials = {}) {
  Trainer t(std::move(specials), threads);
  std::vector<std::string_view> views(texts.begin(), texts.end());
  t.add(views);
  return t.train(merges, nullptr);
}

void test_trainer() {
  g_test = "Trainer";
  // "aaaa": (a, a) -> 256, then (256, 256) -> 257, then no pair is left: 2 merges of 10 asked.
  auto m = train({"aaaa"}, 10);
  CHECK(m.size() == 2);
  CHECK(m.size() == 2 && m[0] == Merge(97, 97) && m[1] == Merge(256, 256));
  // "ab ab ab" is the chunks "ab", " ab", " ab": (a, b) -> 256, then (' ', 256) -> 257.
  auto m2 = train({"ab ab ab"}, 100);
  CHECK(m2.size() == 2 && m2[0] == Merge('a', 'b') && m2[1] == Merge(' ', 256));
  // Exactly num_merges when pairs remain; the same merges on 1 and 3 threads.
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat on the mat " + std::to_string(i * 7919 % 1000) + ". ";
  auto a = train({text, "caf\xC3\xA9 na\xC3\xAFve", ""}, 60, 1);
  auto b = train({text, "caf\xC3\xA9 na\xC3\xAFve", ""}, 60, 3);
  CHECK(a.size() == 60);
  CHECK(a == b);
  // Special tokens cut the text and are never merged across.
  auto s = train({"xy<|s|>xy<|s|>xy"}, 10, 1, {"<|s|>"});
  CHECK(s.size() == 1 && s[0] == Merge('x', 'y'));
  // Progress reports, and a false answer cancels.
  Trainer t({}, 1);
  std::vector<std::string_view> v{text};
  t.add(v);
  CHECK(t.total_bytes() == text.size() && t.unique_chunks() > 0);
  int calls = 0;
  CHECK_THROWS(std::runtime_error, t.train(20, [&](uint64_t, uint64_t) { return ++calls < 3; }));
  CHECK(calls == 3);
  Trainer once({}, 1);
  once.add(v);
  once.train(5, nullptr);
  CHECK_THROWS(TokenizerError, once.train(5, nullptr));  // a Trainer trains once
}

void test_encoder() {
  g_test = "Encoder";
  Encoder e(train({"ab ab ab"}, 100), {{"<|eot|>", 300}});
  CHECK(e.num_merges() == 2 && e.vocab_size() == 258 && e.max_id() == 300);
  auto ids = e.encode("ab ab", {}, 1);
  CHECK((ids == std::vector<uint32_t>{256, 257}));
  auto with_special = e.encode("ab<|eot|> ab", {"<|eot|>"}, 1);
  CHECK((with_special == std::vector<uint32_t>{256, 300, 257}));
  auto not_allowed = e.encode("<|eot|>", {}, 1);  // ordinary text then
  CHECK(e.decode_bytes(not_allowed.data(), not_allowed.size()) == "<|eot|>" && not_allowed.size() > 1);
  CHECK(e.decode_bytes(with_special.data(), with_special.size()) == "ab<|eot|> ab");
  uint32_t unknown = 299;
  CHECK_THROWS(TokenizerError, e.decode_bytes(&unknown, 1));
  // Round trips on a trained vocabulary: multi-byte text, ill-formed bytes, the empty text;
  // one thread and several give the same ids, and encode_batch agrees with encode.
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "Hello, world! caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 " + std::to_string(i) + "\n";
  Encoder big(train({corpus}, 200, 2), {});
  std::vector<std::string> texts = {corpus, "", "x", "ab\xFF\xFE cd\xC3", std::string(10000, 'a'), "  \n\n\t "};
  for (const auto& t : texts) {
    auto one = big.encode(t, {}, 1);
    auto four = big.encode(t, {}, 4);
    CHECK(one == four);
    CHECK(big.decode_bytes(one.data(), one.size()) == t);
    std::vector<uint32_t> ord;
    big.encode_ordinary(reinterpret_cast<const uint8_t*>(t.data()), t.size(), ord);
    CHECK(ord == one);
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  auto batch = big.encode_batch(views, {}, 3);
  bool same = batch.size() == texts.size();
  for (size_t i = 0; same && i < texts.size(); ++i) same = batch[i] == big.encode(texts[i], {}, 1);
  CHECK(same);
  CHECK(big.encode(corpus, {}, 1).size() < corpus.size() / 2);  // the merges compress their own corpus
  // Invalid merges are refused.
  CHECK_THROWS(TokenizerError, Encoder({{97, 999}}, {}));            // an id not yet defined
  CHECK_THROWS(TokenizerError, Encoder({{97, 97}, {97, 97}}, {}));  // a repeated pair
}

void test_files() {
  g_test = "files";
  std::string path =
      (std::filesystem::temp_directory_path() / ("alilama_native_tests_" + std::to_string(std::rand()) + ".txt"))
          .string();
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 100; ++i) f << "line " << i << " caf\xC3\xA9 <|eot|> end\n";
  }
  Trainer t({"<|eot|>"}, 2);
  uint64_t last = 0;
  t.add_file(path, "strict", [&](uint64_t done, uint64_t) { last = done; return true; });
  CHECK(last > 0);
  Encoder e(t.train(50, nullptr), {{"<|eot|>", 400}});
  auto ids = e.encode_file(path, 2, "strict", nullptr);
  std::ifstream in(path, std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(e.decode_bytes(ids.data(), ids.size()) == content);
  CHECK(std::count(ids.begin(), ids.end(), 400u) == 100);
  {
    std::ofstream f(path, std::ios::binary);
    f << "ok \xFF bad";
  }
  CHECK_THROWS(TokenizerError, e.encode_file(path, 1, "strict", nullptr));
  auto replaced = e.encode_file(path, 1, "replace", nullptr);
  CHECK(e.decode_bytes(replaced.data(), replaced.size()) == "ok \xEF\xBF\xBD bad");
  CHECK_THROWS(TokenizerError, e.encode_file(path + ".missing", 1, "strict", nullptr));
  std::remove(path.c_str());
}

std::vector<std::string> split_kind(Split kind, const std::string& s) {
  std::vector<std::string> out;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t pos = 0; pos < s.size();) {
    size_t end = split_next(kind, p, s.size(), pos);
    if (end <= pos) return {"<no progress>"};
    out.push_back(s.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

// The other split patterns (GPT-2's, tiktoken's cl100k_base) and an imported vocabulary's ids.
void test_split_kinds_and_ids() {
  g_test = "split kinds";
  using V = std::vector<std::string>;
  CHECK((split_kind(Split::kGpt2, "a  \n  b's 12345  ") == V{"a", "  \n ", " b", "'s", " 12345", "  "}));
  CHECK((split_kind(Split::kGpt2, "I'M x's !!? ") == V{"I", "'", "M", " x", "'s", " !!?", " "}));
  CHECK((split_kind(Split::kCl100k, "a \n  ") == V{"a", " \n  "}));  // \s++$: one chunk at the end
  CHECK((split_kind(Split::kGpt4, "a \n  ") == V{"a", " \n", "  "}));
  CHECK((split_kind(Split::kO200k, "HELLOworld helloWorld DON'T a!\n/b") ==
         V{"HELLOworld", " hello", "World", " DON'T", " a", "!\n/", "b"}));
  const uint8_t* t = reinterpret_cast<const uint8_t*>("ab  \ncd\nef");
  CHECK(safe_cut_at(Split::kGpt4, t, 11, 5) && !safe_cut_at(Split::kGpt2, t, 11, 5));
  CHECK(safe_cut_at(Split::kGpt2, t, 11, 8));

  g_test = "ids";
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 257; ++i) ids.push_back(i < 256 ? 1000 + (255 - i) : 5);  // bytes reversed, merge 5
  Encoder e({{'a', 'a'}}, {{"<|x|>", 7}}, ids, Split::kGpt2);
  auto out = e.encode("aab<|x|>", {"<|x|>"}, 1);
  CHECK((out == std::vector<uint32_t>{5, 1000 + 255 - 'b', 7}));
  CHECK(e.decode_bytes(out.data(), out.size()) == "aab<|x|>");
  CHECK(e.max_id() == 1255);
  uint32_t missing = 6;
  CHECK_THROWS(TokenizerError, e.decode_bytes(&missing, 1));
  CHECK_THROWS(TokenizerError, Encoder({{'a', 'a'}}, {}, std::vector<uint32_t>(10, 1)));  // not one per id
}

void test_threads() {
  g_test = "run_threads";
  std::atomic<int> ran{0};
  run_threads(4, [&](const std::atomic<bool>&) { ran.fetch_add(1); });
  CHECK(ran.load() == 4);
  CHECK_THROWS(std::runtime_error, run_threads(3, [](const std::atomic<bool>&) { throw std::runtime_error("x"); }));
  std::vector<int> hit(1000, 0);
  parallel_for(hit.size(), 4, [&](size_t i) { hit[i] += 1; });
  CHECK(std::count(hit.begin(), hit.end(), 1) == 1000);
}

}  // namespace

int main() {
  std::srand(unsigned(std::time(nullptr)));
  const std::vector<std::pair<const char*, std::function<void()>>> tests = {
      {"pretokenize", test_pretokenize}, {"StringMap", test_string_map}, {"U64Map", test_u64_map},
      {"SpecialMatcher", test_matcher},  {"Trainer", test_trainer},      {"Encoder", test_encoder},
      {"files", test_files},             {"run_threads", test_threads},     {"split kinds", test_split_kinds_and_ids},
  };
  for (const auto& [name, fn] : tests) {
    g_test = name;
    try {
      fn();
    } catch (const std::exception& e) {
      ++g_failures;
      std::fprintf(stderr, "FAIL %s: unexpected exception: %s\n", name, e.what());
    }
  }
  std::printf("native_tests: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}

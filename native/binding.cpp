// pybind11 binding: alilama_bpe._native. Heavy work runs with the GIL released.
//
// ALILAMA_CPYTHON_FASTPATH (CMake option of the same name, default ON) selects fast paths
// that rely on CPython internals: str read in place (compact ASCII data, the cached UTF-8
// of PyCompactUnicodeObject) and encode_batch's lists filled by worker threads without the
// GIL, their ints' reference counts added in one pass afterwards. Built with it 0, the
// module uses only the public C API and pybind11: UTF-8 through PyUnicode_AsUTF8AndSize /
// PyUnicode_AsUTF8String, and the lists made and filled under the GIL once the workers
// have finished, one Py_INCREF per item. Both give the same results
// (tests/native/test_binding_fallback.py builds the fallback and compares them).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "bpe.hpp"
#include "pretokenize.hpp"

#ifndef ALILAMA_CPYTHON_FASTPATH
#define ALILAMA_CPYTHON_FASTPATH 1
#endif

namespace py = pybind11;
using namespace alilama;

namespace {

// UTF-8 views of a sequence of str, and a tuple of the str objects that keeps them
// alive while the GIL is released (another thread may change the caller's list then).
// Fast path: ASCII str are read in place. Others are read through CPython's cached UTF-8,
// made on first use and kept with the str; with `transient`, a str that has no cached
// UTF-8 yet is encoded into a bytes object held here instead, so that training on a
// corpus does not leave a UTF-8 copy attached to each of the caller's str.
// Fallback (public API only): PyUnicode_AsUTF8AndSize, or with `transient` always a
// bytes copy (the API cannot tell whether a str already has its UTF-8 cached).
struct Utf8Texts {
  py::tuple held;
  std::vector<py::object> copies;
  std::vector<std::string_view> views;
};

Utf8Texts utf8_texts(const py::sequence& texts, bool transient = false) {
  Utf8Texts out{py::reinterpret_steal<py::tuple>(PySequence_Tuple(texts.ptr())), {}, {}};
  if (!out.held) throw py::error_already_set();
  Py_ssize_t n = PyTuple_GET_SIZE(out.held.ptr());
  out.views.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* h = PyTuple_GET_ITEM(out.held.ptr(), i);
    if (!PyUnicode_Check(h)) throw py::type_error("expected a list of str");
#if ALILAMA_CPYTHON_FASTPATH
    if (PyUnicode_IS_COMPACT_ASCII(h)) {  // the characters are the UTF-8 bytes
      out.views.emplace_back(static_cast<const char*>(PyUnicode_DATA(h)), size_t(PyUnicode_GET_LENGTH(h)));
      continue;
    }
    const bool copy = transient && !(PyUnicode_IS_COMPACT(h) && reinterpret_cast<PyCompactUnicodeObject*>(h)->utf8);
#else
    const bool copy = transient;
#endif
    if (copy) {
      PyObject* b = PyUnicode_AsUTF8String(h);  // UnicodeEncodeError for a lone surrogate
      if (!b) throw py::error_already_set();
      out.copies.push_back(py::reinterpret_steal<py::object>(b));
      out.views.emplace_back(PyBytes_AS_STRING(b), size_t(PyBytes_GET_SIZE(b)));
      continue;
    }
    Py_ssize_t len = 0;
    const char* p = PyUnicode_AsUTF8AndSize(h, &len);
    if (!p) throw py::error_already_set();
    out.views.emplace_back(p, size_t(len));
  }
  return out;
}

std::string_view utf8_view(const py::str& s) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (!p) throw py::error_already_set();
  return std::string_view(p, size_t(n));
}

int resolve_threads(std::optional<int> threads) {
  if (threads && *threads > 0) return *threads;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

// Runs work(progress) with the GIL released and returns what it returns. `progress` is the
// ProgressFn that calls the Python callable `fn` with the GIL held (an empty ProgressFn for
// None). When the callable raises, the ProgressFn returns false, which cancels the work
// (it throws std::runtime_error("cancelled")), and the callable's exception is raised here
// instead of what the work threw, or after the work returned (a last report whose answer
// is not looked at). Any other exception of the work propagates unchanged, for pybind11 to
// translate (TokenizerError -> NativeTokenizerError, std::bad_alloc -> MemoryError, ...).
template <class Work>
auto run_with_progress(const py::object& fn, Work&& work) {
  using Result = decltype(work(std::declval<const ProgressFn&>()));
  std::optional<py::error_already_set> error;
  ProgressFn progress;
  if (!fn.is_none())
    progress = [&fn, &error](uint64_t done, uint64_t total) {
      py::gil_scoped_acquire gil;
      try {
        fn(done, total);
        return true;
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        return false;
      }
    };
  auto raise_callback_error = [&error] {  // GIL held
    if (!error) return;
    py::error_already_set e = std::move(*error);
    error.reset();
    throw e;
  };
  if constexpr (std::is_void_v<Result>) {
    try {
      py::gil_scoped_release nogil;
      work(progress);
    } catch (...) {
      raise_callback_error();
      throw;
    }
    raise_callback_error();
  } else {
    std::optional<Result> result;
    try {
      py::gil_scoped_release nogil;
      result.emplace(work(progress));
    } catch (...) {
      raise_callback_error();
      throw;
    }
    raise_callback_error();
    return std::move(*result);
  }
}

// Pauses Python's cyclic garbage collector for a scope during which the GIL is held
// throughout (Python >= 3.10): no other thread can run, so none can see the pause or
// change the setting meanwhile, and the setting is left exactly as found.
struct GcPauseHoldingGil {
  int was_enabled = PyGC_Disable();
  ~GcPauseHoldingGil() {
    if (was_enabled) PyGC_Enable();
  }
};

// Python ints for ids [0, size): made once, shared by every call, never freed. A call
// takes a snapshot (shared_ptr) so that threads reading it without the GIL are not
// disturbed when another call grows the table; growing copies the pointers (the ints
// themselves are owned by the tables for the life of the interpreter).
using IntTable = std::vector<PyObject*>;
constexpr uint32_t kMaxTableId = (1u << 24) - 1;

std::shared_ptr<const IntTable> int_table(uint32_t max_id) {  // GIL held
  static std::shared_ptr<const IntTable> table = std::make_shared<IntTable>();
  if (max_id > kMaxTableId)
    throw TokenizerError("token id " + std::to_string(max_id) + " is too large (ids up to " +
                         std::to_string(kMaxTableId) + " are supported)");
  if (max_id < table->size()) return table;
  auto grown = std::make_shared<IntTable>(*table);
  size_t size = std::min<size_t>(size_t(kMaxTableId) + 1, std::max<size_t>(size_t(max_id) + 1, 2 * grown->size()));
  grown->reserve(size);
  for (size_t k = grown->size(); k < size; ++k) {
    PyObject* v = PyLong_FromSize_t(k);
    if (!v) throw py::error_already_set();
    grown->push_back(v);
  }
  table = grown;
  return table;
}

// A list of the encoder's ids (every id is at most e.max_id()).
py::list to_pylist(const Encoder& e, const std::vector<uint32_t>& ids) {
  auto table = int_table(e.max_id());
  PyObject* const* ints = table->data();
  py::list out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    PyObject* v = ints[ids[i]];
    Py_INCREF(v);
    PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), v);
  }
  return out;
}

// A special token that the caller did not allow occurs in the text (its message is the token).
class DisallowedSpecial : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The blocks encode_batch shares out between threads: about 64 KiB or 256 texts each.
// starts[b] is block b's first text; the last entry is the number of texts.
std::vector<size_t> block_starts(const std::vector<std::string_view>& views) {
  std::vector<size_t> starts;
  for (size_t i = 0, bytes = 0, start = 0; i < views.size(); ++i) {
    bytes += views[i].size();
    if (i + 1 == views.size() || bytes >= (size_t(1) << 16) || i + 1 - start >= 256) {
      starts.push_back(start);
      start = i + 1;
      bytes = 0;
    }
  }
  starts.push_back(views.size());
  return starts;
}

#if ALILAMA_CPYTHON_FASTPATH

// encode_batch: worker threads encode blocks of texts; the calling thread (with the GIL)
// makes the empty result lists; any thread (without the GIL) fills them with the shared
// ints, counting how often each int is used; the calling thread then adds the counts to
// the ints' reference counts. Only list allocation is serial. The lists are kept
// untracked by the cyclic GC until they are complete and their references counted.
class BatchEncoder {
 public:
  BatchEncoder(const Encoder& e, std::vector<std::string_view> views, std::vector<std::string> allowed,
               std::vector<std::string> disallowed, int threads)
      : enc_(e), views_(std::move(views)), m_(std::move(allowed)), disallowed_(std::move(disallowed)),
        threads_(threads) {
    starts_ = block_starts(views_);
    blocks_ = std::make_unique<Block[]>(nblocks());
  }

  py::list run() {  // GIL held on entry and exit
    table_ = int_table(enc_.max_id());
    size_t t = std::max<size_t>(1, std::min<size_t>(size_t(threads_), nblocks()));
    counts_.assign(t, std::vector<uint64_t>(table_->size(), 0));
    out_ = py::list(views_.size());
    PyObject_GC_UnTrack(out_.ptr());
    {
      py::gil_scoped_release nogil;
      struct Joiner {  // joins the workers however this scope is left
        std::vector<std::thread> threads;
        ~Joiner() {
          for (auto& th : threads)
            if (th.joinable()) th.join();
        }
      } joiner;
      joiner.threads.reserve(t - 1);
      for (size_t w = 1; w < t; ++w) {
        try {
          joiner.threads.emplace_back([this, w] { work(w); });
        } catch (...) {  // no resources for another thread: the ones started do the work
          break;
        }
      }
      lead();
      for (auto& th : joiner.threads) th.join();
    }
    // Every int written into a list gets its reference, and the lists join the GC.
    PyObject* const* ints = table_->data();
    for (const auto& c : counts_)
      for (size_t id = 0; id < c.size(); ++id)
        if (c[id]) Py_SET_REFCNT(ints[id], Py_REFCNT(ints[id]) + Py_ssize_t(c[id]));
    for (size_t i = 0; i < views_.size(); ++i) {
      PyObject* item = PyList_GET_ITEM(out_.ptr(), Py_ssize_t(i));
      if (item) PyObject_GC_Track(item);
    }
    PyObject_GC_Track(out_.ptr());
    if (py_error_) throw py::error_already_set();
    if (error_) std::rethrow_exception(error_);
    if (!found_.empty()) throw DisallowedSpecial(found_);
    return std::move(out_);
  }

 private:
  enum : int { kQueued, kEncoded, kListed, kFilled };
  struct Block {
    std::vector<uint32_t> ids;
    std::vector<size_t> ends;
    std::vector<PyObject**> items;  // ob_item of each text's list
    std::atomic<int> state{kQueued};
  };
  size_t nblocks() const { return starts_.size() - 1; }

  bool try_encode() {
    size_t b = next_encode_.load();
    while (b < nblocks())
      if (next_encode_.compare_exchange_weak(b, b + 1)) {
        guard([&] {
          for (size_t i = starts_[b]; i < starts_[b + 1] && !disallowed_.empty(); ++i) {
            auto [p, k] = disallowed_.find(views_[i], 0);
            if (p != std::string_view::npos) throw DisallowedSpecial(disallowed_.tokens()[k]);
          }
          enc_.encode_range(views_, m_, starts_[b], starts_[b + 1], blocks_[b].ids, blocks_[b].ends);
        });
        blocks_[b].state.store(kEncoded, std::memory_order_release);
        return true;
      }
    return false;
  }

  bool try_fill(size_t worker) {
    size_t b = next_fill_.load();
    while (b < nblocks() && blocks_[b].state.load(std::memory_order_acquire) == kListed)
      if (next_fill_.compare_exchange_weak(b, b + 1)) {
        Block& bl = blocks_[b];
        PyObject* const* ints = table_->data();
        uint64_t* count = counts_[worker].data();
        const uint32_t* ids = bl.ids.data();
        for (size_t k = 0, from = 0; k < bl.ends.size(); from = bl.ends[k], ++k) {
          PyObject** item = bl.items[k];
          for (size_t i = from; i < bl.ends[k]; ++i) {
            item[i - from] = ints[ids[i]];
            ++count[ids[i]];
          }
        }
        std::vector<uint32_t>().swap(bl.ids);
        std::vector<size_t>().swap(bl.ends);
        std::vector<PyObject**>().swap(bl.items);
        bl.state.store(kFilled, std::memory_order_release);
        filled_.fetch_add(1);
        return true;
      }
    return false;
  }

  // Make the lists of every encoded block at the front of the queue (takes the GIL).
  bool try_list() {
    if (listed_ >= nblocks() || blocks_[listed_].state.load(std::memory_order_acquire) != kEncoded) return false;
    py::gil_scoped_acquire gil;
    GcPauseHoldingGil pause;  // thousands of new lists would trigger collections again and again
    while (listed_ < nblocks() && blocks_[listed_].state.load(std::memory_order_acquire) == kEncoded) {
      Block& bl = blocks_[listed_];
      bl.items.resize(bl.ends.size());
      for (size_t k = 0, from = 0; k < bl.ends.size(); from = bl.ends[k], ++k) {
        PyObject* lst = PyList_New(Py_ssize_t(bl.ends[k] - from));
        if (!lst) {
          py_error_ = true;
          stop_.store(true);
          return true;
        }
        PyObject_GC_UnTrack(lst);
        PyList_SET_ITEM(out_.ptr(), Py_ssize_t(starts_[listed_] + k), lst);
        bl.items[k] = reinterpret_cast<PyListObject*>(lst)->ob_item;
      }
      bl.state.store(kListed, std::memory_order_release);
      ++listed_;
    }
    return true;
  }

  void lead() {  // the calling thread
    while (!stop_.load() && filled_.load() < nblocks()) {
      if (try_list() || try_fill(0) || try_encode()) continue;
      std::this_thread::yield();
    }
    stop_.store(true);
  }

  void work(size_t worker) {
    while (!stop_.load() && filled_.load() < nblocks()) {
      if (try_fill(worker) || try_encode()) continue;
      std::this_thread::yield();
    }
  }

  template <class F>
  void guard(F&& fn) {
    try {
      fn();
    } catch (const DisallowedSpecial& e) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (found_.empty()) found_ = e.what();
      stop_.store(true);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
      stop_.store(true);
    }
  }

  const Encoder& enc_;
  std::vector<std::string_view> views_;
  SpecialMatcher m_;
  SpecialMatcher disallowed_;  // special tokens whose presence is an error
  std::string found_;          // the disallowed token found, if any
  int threads_;
  std::vector<size_t> starts_;
  std::unique_ptr<Block[]> blocks_;
  std::shared_ptr<const IntTable> table_;
  std::vector<std::vector<uint64_t>> counts_;  // per thread: uses of each int
  py::list out_;
  std::atomic<size_t> next_encode_{0}, next_fill_{0}, filled_{0};
  size_t listed_ = 0;  // touched by the calling thread only
  std::atomic<bool> stop_{false};
  bool py_error_ = false;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

#else  // !ALILAMA_CPYTHON_FASTPATH

// encode_batch on the public C API: worker threads (without the GIL) encode blocks of
// texts; once all have finished, the calling thread (with the GIL) makes each text's list
// and fills it with the shared ints, one Py_INCREF per item.
class BatchEncoder {
 public:
  BatchEncoder(const Encoder& e, std::vector<std::string_view> views, std::vector<std::string> allowed,
               std::vector<std::string> disallowed, int threads)
      : enc_(e), views_(std::move(views)), m_(std::move(allowed)), disallowed_(std::move(disallowed)),
        threads_(threads) {
    starts_ = block_starts(views_);
  }

  py::list run() {  // GIL held on entry and exit
    auto table = int_table(enc_.max_id());
    const size_t nblocks = starts_.size() - 1;
    std::vector<std::vector<uint32_t>> ids(nblocks);
    std::vector<std::vector<size_t>> ends(nblocks);
    {
      py::gil_scoped_release nogil;
      std::atomic<size_t> next{0};
      std::atomic<bool> found_one{false};
      std::mutex found_mu;
      size_t t = std::max<size_t>(1, std::min<size_t>(size_t(threads_), nblocks));
      run_threads(t, [&](const std::atomic<bool>& stop) {  // rethrows the first other error
        for (size_t b; !stop.load() && !found_one.load() && (b = next.fetch_add(1)) < nblocks;) {
          try {
            for (size_t i = starts_[b]; i < starts_[b + 1] && !disallowed_.empty(); ++i) {
              auto [p, k] = disallowed_.find(views_[i], 0);
              if (p != std::string_view::npos) throw DisallowedSpecial(disallowed_.tokens()[k]);
            }
            enc_.encode_range(views_, m_, starts_[b], starts_[b + 1], ids[b], ends[b]);
          } catch (const DisallowedSpecial& e) {
            std::lock_guard<std::mutex> lock(found_mu);
            if (found_.empty()) found_ = e.what();
            found_one.store(true);
          }
        }
      });
    }
    if (!found_.empty()) throw DisallowedSpecial(found_);
    GcPauseHoldingGil pause;  // thousands of new lists would trigger collections again and again
    PyObject* const* ints = table->data();
    py::list out(views_.size());
    for (size_t b = 0; b < nblocks; ++b) {
      for (size_t k = 0, from = 0; k < ends[b].size(); from = ends[b][k], ++k) {
        PyObject* lst = PyList_New(Py_ssize_t(ends[b][k] - from));
        if (!lst) throw py::error_already_set();
        for (size_t i = from; i < ends[b][k]; ++i) {
          PyObject* v = ints[ids[b][i]];
          Py_INCREF(v);
          PyList_SET_ITEM(lst, Py_ssize_t(i - from), v);
        }
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(starts_[b] + k), lst);
      }
      std::vector<uint32_t>().swap(ids[b]);
      std::vector<size_t>().swap(ends[b]);
    }
    return out;
  }

 private:
  const Encoder& enc_;
  std::vector<std::string_view> views_;
  SpecialMatcher m_;
  SpecialMatcher disallowed_;  // special tokens whose presence is an error
  std::string found_;          // the disallowed token found, if any
  int threads_;
  std::vector<size_t> starts_;
};

#endif  // ALILAMA_CPYTHON_FASTPATH

std::vector<uint32_t> ids_from(const py::handle& ids) {
  std::vector<uint32_t> v;
  if (py::isinstance<py::array>(ids)) {
    auto arr = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
    if (!arr) throw py::type_error("ids must be integers");
    v.reserve(size_t(arr.size()));
    for (py::ssize_t i = 0; i < arr.size(); ++i) {
      int64_t x = arr.data()[i];
      if (x < 0 || x > 0xFFFFFFFFLL) throw TokenizerError("token id " + std::to_string(x) + " is not in the vocabulary");
      v.push_back(uint32_t(x));
    }
    return v;
  }
  for (py::handle h : ids) {
    long long x = h.cast<long long>();
    if (x < 0 || x > 0xFFFFFFFFLL) throw TokenizerError("token id " + std::to_string(x) + " is not in the vocabulary");
    v.push_back(uint32_t(x));
  }
  return v;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "Native byte-level BPE (trainer, encoder, GPT-4 pre-tokenizer).";
  m.attr("unicode_version") = kUnicodeVersion;
  m.attr("unicode_source") = kUnicodeSource;
  m.attr("max_token_bytes") = kMaxTokenBytes;
  m.attr("max_vocab_bytes") = kMaxVocabBytes;
  m.attr("cpython_fastpath") = bool(ALILAMA_CPYTHON_FASTPATH);  // see the top of binding.cpp
  py::register_exception<TokenizerError>(m, "NativeTokenizerError", PyExc_ValueError);
  py::register_exception<DisallowedSpecial>(m, "DisallowedSpecialError", PyExc_ValueError);

  m.def(
      "split",
      [](py::object text, int split) {
        if (split < 0 || split > int(Split::kO200k)) throw TokenizerError("unknown split kind " + std::to_string(split));
        std::string data;
        if (py::isinstance<py::bytes>(text)) data = text.cast<std::string>();
        else data = std::string(utf8_view(text.cast<py::str>()));
        const uint8_t* s = reinterpret_cast<const uint8_t*>(data.data());
        py::list out;
        size_t pos = 0;
        while (pos < data.size()) {
          size_t end = split_next(Split(split), s, data.size(), pos);
          if (py::isinstance<py::bytes>(text)) out.append(py::bytes(data.data() + pos, end - pos));
          else out.append(py::str(data.data() + pos, end - pos));
          pos = end;
        }
        return out;
      },
      py::arg("text"), py::arg("split") = 0,
      "Chunks of text under a split pattern (0 GPT-4, 1 cl100k_base, 2 GPT-2, 3 o200k_base; str -> list[str], bytes -> list[bytes]).");

  m.def(
      "utf8_error_offset",
      [](py::bytes data) {
        std::string_view v(data);
        size_t off = utf8_error_offset(reinterpret_cast<const uint8_t*>(v.data()), v.size());
        return off == v.size() ? py::ssize_t(-1) : py::ssize_t(off);
      },
      py::arg("data"), "Offset of the first ill-formed UTF-8 byte, or -1.");

  py::class_<Trainer>(m, "Trainer")
      .def(py::init([](std::vector<std::string> specials, std::optional<int> threads) {
             return new Trainer(std::move(specials), resolve_threads(threads));
           }),
           py::arg("special_tokens") = std::vector<std::string>{}, py::arg("threads") = py::none())
      .def(
          "add",
          [](Trainer& t, py::sequence texts) {
            Utf8Texts held = utf8_texts(texts, /*transient=*/true);
            py::gil_scoped_release nogil;
            t.add(held.views);
          },
          py::arg("texts"), "Count the chunks of a list of str (GIL released).")
      .def(
          "add_bytes",
          [](Trainer& t, py::bytes data) {
            std::string_view v(data);
            py::gil_scoped_release nogil;
            t.add({v});
          },
          py::arg("data"), "Count the chunks of UTF-8 bytes (the caller validates them).")
      .def(
          "add_file",
          [](Trainer& t, std::string path, std::string errors, py::object progress) {
            run_with_progress(progress, [&](const ProgressFn& p) { t.add_file(path, errors, p); });
          },
          py::arg("path"), py::arg("errors") = "strict", py::arg("progress") = py::none(),
          "Count the chunks of a UTF-8 file, streamed in blocks (GIL released).")
      .def(
          "train",
          [](Trainer& t, size_t num_merges, py::object progress) {
            return run_with_progress(progress, [&](const ProgressFn& p) { return t.train(num_merges, p); });
          },
          py::arg("num_merges"), py::arg("progress") = py::none())
      .def_property_readonly("unique_chunks", &Trainer::unique_chunks)
      .def_property_readonly("total_bytes", &Trainer::total_bytes)
      .def_property_readonly("total_chunks", &Trainer::total_chunks);

  py::class_<Encoder>(m, "Encoder")
      .def(py::init([](const std::vector<Merge>& merges, std::vector<std::pair<std::string, uint32_t>> specials,
                       std::vector<uint32_t> ids, int split) {
             if (split < 0 || split > int(Split::kO200k)) throw TokenizerError("unknown split kind " + std::to_string(split));
             return std::make_unique<Encoder>(merges, std::move(specials), std::move(ids), Split(split));
           }),
           py::arg("merges"), py::arg("special_tokens") = std::vector<std::pair<std::string, uint32_t>>{},
           py::arg("ids") = std::vector<uint32_t>{}, py::arg("split") = 0,
           "ids: the id of each byte and merge when they are not 0..255, 256 + i (empty: those); "
           "split: the pre-tokenizer (0 GPT-4, 1 tiktoken's cl100k_base, 2 GPT-2, 3 o200k_base).")
      .def(
          "encode",
          [](const Encoder& e, py::str text, std::vector<std::string> allowed, std::optional<int> threads) {
            std::string_view v = utf8_view(text);
            std::vector<uint32_t> ids;
            {
              py::gil_scoped_release nogil;
              ids = e.encode(v, allowed, threads ? std::max(*threads, 1) : 1);
            }
            return to_pylist(e, ids);
          },
          py::arg("text"), py::arg("allowed_special") = std::vector<std::string>{}, py::arg("threads") = 1)
      .def(
          "encode_bytes",
          [](const Encoder& e, py::bytes data) {
            std::string_view v(data);
            std::vector<uint32_t> ids;
            {
              py::gil_scoped_release nogil;
              ids.reserve(v.size() / 3 + 16);
              e.encode_ordinary(reinterpret_cast<const uint8_t*>(v.data()), v.size(), ids);
            }
            return to_pylist(e, ids);
          },
          py::arg("data"),
          "Ids of raw bytes, special tokens not looked for; each maximal ill-formed UTF-8 "
          "subpart is one character of no class for the split pattern.")
      .def(
          "encode_batch",
          [](const Encoder& e, py::sequence texts, std::vector<std::string> allowed, std::optional<int> threads,
             std::vector<std::string> disallowed) {
            Utf8Texts held = utf8_texts(texts);
            return BatchEncoder(e, std::move(held.views), std::move(allowed), std::move(disallowed),
                                std::max(1, resolve_threads(threads)))
                .run();
          },
          py::arg("texts"), py::arg("allowed_special") = std::vector<std::string>{}, py::arg("threads") = py::none(),
          py::arg("disallowed_special") = std::vector<std::string>{},
          "Ids of each text. A text holding one of disallowed_special raises DisallowedSpecialError "
          "(its message is the token); the check runs in the encoding threads.")
      .def(
          "encode_to_array",
          [](const Encoder& e, py::str text, std::vector<std::string> allowed, std::optional<int> threads) {
            std::string_view v = utf8_view(text);
            std::vector<uint32_t> ids;
            {
              py::gil_scoped_release nogil;
              ids = e.encode(v, allowed, resolve_threads(threads));
            }
            py::array_t<uint32_t> arr(py::ssize_t(ids.size()));
            std::copy(ids.begin(), ids.end(), arr.mutable_data());
            return arr;
          },
          py::arg("text"), py::arg("allowed_special") = std::vector<std::string>{}, py::arg("threads") = py::none())
      .def(
          "encode_file",
          [](const Encoder& e, std::string path, std::optional<int> threads, std::string errors, py::object progress) {
            const int n_threads = resolve_threads(threads);
            std::vector<uint32_t> ids = run_with_progress(
                progress, [&](const ProgressFn& p) { return e.encode_file(path, n_threads, errors, p); });
            if (e.max_id() < 65536) {
              py::array_t<uint16_t> arr(py::ssize_t(ids.size()));
              uint16_t* d = arr.mutable_data();
              for (size_t i = 0; i < ids.size(); ++i) d[i] = uint16_t(ids[i]);
              return py::object(arr);
            }
            py::array_t<uint32_t> arr(py::ssize_t(ids.size()));
            std::copy(ids.begin(), ids.end(), arr.mutable_data());
            return py::object(arr);
          },
          py::arg("path"), py::arg("threads") = py::none(), py::arg("errors") = "strict",
          py::arg("progress") = py::none())
      .def(
          "decode_bytes",
          [](const Encoder& e, py::object ids) {
            std::vector<uint32_t> v = ids_from(ids);
            std::string out;
            {
              py::gil_scoped_release nogil;
              out = e.decode_bytes(v.data(), v.size());
            }
            return py::bytes(out);
          },
          py::arg("ids"))
      .def_property_readonly("vocab_size", &Encoder::vocab_size)
      .def_property_readonly("num_merges", &Encoder::num_merges);
}

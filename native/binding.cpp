// pybind11 binding: alilama_bpe._native. Heavy work runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "bpe.hpp"
#include "pretokenize.hpp"

namespace py = pybind11;
using namespace alilama;

namespace {

// UTF-8 views of Python str objects; the list keeps them alive while the GIL is released.
std::vector<std::string_view> utf8_views(const py::sequence& texts) {
  std::vector<std::string_view> views;
  views.reserve(py::len(texts));
  for (py::handle h : texts) {
    if (!PyUnicode_Check(h.ptr())) throw py::type_error("expected a list of str");
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
    if (!p) throw py::error_already_set();
    views.emplace_back(p, size_t(n));
  }
  return views;
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

// Wraps a Python progress callable; remembers an exception it raised.
struct PyProgress {
  py::object fn;
  std::optional<py::error_already_set> error;
  ProgressFn make() {
    if (fn.is_none()) return nullptr;
    return [this](uint64_t done, uint64_t total) {
      py::gil_scoped_acquire gil;
      try {
        fn(done, total);
        return true;
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        return false;
      }
    };
  }
  void rethrow() {
    if (error) {
      py::error_already_set e = std::move(*error);
      error.reset();
      throw e;
    }
  }
};

// Pauses Python's cyclic garbage collector for a scope (Python >= 3.10).
struct GcPause {
  int was_enabled = PyGC_Disable();
  ~GcPause() {
    if (was_enabled) PyGC_Enable();
  }
};

// Python ints for ids below this bound are made once and shared (creating a fresh
// int per token would cost more than encoding it). Touched only with the GIL held.
std::vector<PyObject*>& int_cache() {
  static std::vector<PyObject*> cache;  // never freed: lives as long as the interpreter
  return cache;
}
constexpr uint32_t kIntCacheMax = 1u << 20;

py::list to_pylist(const std::vector<uint32_t>& ids) {
  auto& cache = int_cache();
  py::list out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t id = ids[i];
    PyObject* v;
    if (id < kIntCacheMax) {
      if (id >= cache.size()) {
        size_t old = cache.size();
        cache.resize(std::min<size_t>(kIntCacheMax, std::max<size_t>(size_t(id) + 1, old * 2)), nullptr);
        for (size_t k = old; k < cache.size(); ++k) {
          cache[k] = PyLong_FromUnsignedLong(k);
          if (!cache[k]) throw py::error_already_set();
        }
      }
      v = cache[id];
      Py_INCREF(v);
    } else {
      v = PyLong_FromUnsignedLong(id);
      if (!v) throw py::error_already_set();
    }
    PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), v);
  }
  return out;
}

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
  py::register_exception<TokenizerError>(m, "NativeTokenizerError", PyExc_ValueError);

  m.def(
      "split",
      [](py::object text) {
        std::string data;
        if (py::isinstance<py::bytes>(text)) data = text.cast<std::string>();
        else data = std::string(utf8_view(text.cast<py::str>()));
        const uint8_t* s = reinterpret_cast<const uint8_t*>(data.data());
        py::list out;
        size_t pos = 0;
        while (pos < data.size()) {
          size_t end = Pretokenizer::next(s, data.size(), pos);
          if (py::isinstance<py::bytes>(text)) out.append(py::bytes(data.data() + pos, end - pos));
          else out.append(py::str(data.data() + pos, end - pos));
          pos = end;
        }
        return out;
      },
      py::arg("text"), "Chunks of text under the GPT-4 split pattern (str -> list[str], bytes -> list[bytes]).");

  m.def(
      "utf8_error_offset",
      [](py::bytes data) {
        std::string_view v(data);
        size_t off = utf8_error_offset(reinterpret_cast<const uint8_t*>(v.data()), v.size());
        return off == v.size() ? py::ssize_t(-1) : py::ssize_t(off);
      },
      py::arg("data"), "Offset of the first ill-formed UTF-8 byte, or -1.");

  m.def(
      "find_special",
      [](py::sequence texts, std::vector<std::string> tokens) -> py::object {
        auto views = utf8_views(texts);
        size_t which = 0, index = views.size();
        {
          py::gil_scoped_release nogil;
          for (size_t i = 0; i < views.size() && index == views.size(); ++i)
            for (size_t k = 0; k < tokens.size(); ++k)
              if (views[i].find(tokens[k]) != std::string_view::npos) {
                index = i;
                which = k;
                break;
              }
        }
        if (index == views.size()) return py::none();
        return py::make_tuple(index, tokens[which]);
      },
      py::arg("texts"), py::arg("tokens"), "(index, token) of the first text holding one of tokens, or None.");

  py::class_<Trainer>(m, "Trainer")
      .def(py::init([](std::vector<std::string> specials, std::optional<int> threads) {
             return new Trainer(std::move(specials), resolve_threads(threads));
           }),
           py::arg("special_tokens") = std::vector<std::string>{}, py::arg("threads") = py::none())
      .def(
          "add",
          [](Trainer& t, py::sequence texts) {
            auto views = utf8_views(texts);
            py::gil_scoped_release nogil;
            t.add(views);
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
            PyProgress pp{progress, std::nullopt};
            try {
              py::gil_scoped_release nogil;
              t.add_file(path, errors, pp.make());
            } catch (TokenizerError&) {
              throw;
            } catch (std::runtime_error&) {
              pp.rethrow();
              throw;
            }
            pp.rethrow();
          },
          py::arg("path"), py::arg("errors") = "strict", py::arg("progress") = py::none(),
          "Count the chunks of a UTF-8 file, streamed in blocks (GIL released).")
      .def(
          "train",
          [](Trainer& t, size_t num_merges, py::object progress) {
            PyProgress pp{progress, std::nullopt};
            std::vector<Merge> merges;
            try {
              py::gil_scoped_release nogil;
              merges = t.train(num_merges, pp.make());
            } catch (std::runtime_error& e) {
              pp.rethrow();
              throw;
            }
            pp.rethrow();
            return merges;
          },
          py::arg("num_merges"), py::arg("progress") = py::none())
      .def_property_readonly("unique_chunks", &Trainer::unique_chunks)
      .def_property_readonly("total_bytes", &Trainer::total_bytes)
      .def_property_readonly("total_chunks", &Trainer::total_chunks);

  py::class_<Encoder>(m, "Encoder")
      .def(py::init<const std::vector<Merge>&, std::vector<std::pair<std::string, uint32_t>>>(),
           py::arg("merges"), py::arg("special_tokens") = std::vector<std::pair<std::string, uint32_t>>{})
      .def(
          "encode",
          [](const Encoder& e, py::str text, std::vector<std::string> allowed, std::optional<int> threads) {
            std::string_view v = utf8_view(text);
            std::vector<uint32_t> ids;
            {
              py::gil_scoped_release nogil;
              ids = e.encode(v, allowed, threads ? std::max(*threads, 1) : 1);
            }
            return to_pylist(ids);
          },
          py::arg("text"), py::arg("allowed_special") = std::vector<std::string>{}, py::arg("threads") = 1)
      .def(
          "encode_batch",
          [](const Encoder& e, py::sequence texts, std::vector<std::string> allowed, std::optional<int> threads) {
            // Pipelined: worker threads encode blocks of texts while this thread (with the
            // GIL) turns finished blocks into Python lists, and encodes blocks itself when
            // none is ready. Python's cyclic GC is paused meanwhile (lists of ints hold no
            // cycles, and thousands of new lists would trigger it again and again).
            auto views = utf8_views(texts);
            const size_t n = views.size(), block = 64, nblocks = (n + block - 1) / block;
            int t = std::max(1, resolve_threads(threads));
            SpecialMatcher m(allowed);
            std::vector<std::vector<uint32_t>> ids(n);
            std::unique_ptr<std::atomic<bool>[]> done(new std::atomic<bool>[nblocks]);
            for (size_t b = 0; b < nblocks; ++b) done[b].store(false);
            std::atomic<size_t> next{0};
            std::exception_ptr error;
            std::mutex error_mu;
            auto run_block = [&](size_t b) {
              try {
                e.encode_range(views, m, b * block, std::min(n, (b + 1) * block), ids);
              } catch (...) {
                std::lock_guard<std::mutex> lock(error_mu);
                if (!error) error = std::current_exception();
              }
              done[b].store(true, std::memory_order_release);
            };
            py::list out(n);
            GcPause pause;
            {
              py::gil_scoped_release nogil;
              struct Joiner {  // joins the workers however this scope is left
                std::vector<std::thread> threads;
                ~Joiner() {
                  for (auto& th : threads)
                    if (th.joinable()) th.join();
                }
              } joiner;
              auto& pool = joiner.threads;
              for (int w = 1; w < t && size_t(w) < nblocks; ++w)
                pool.emplace_back([&] {
                  for (size_t b; (b = next.fetch_add(1)) < nblocks;) run_block(b);
                });
              size_t converted = 0;
              while (converted < nblocks) {
                if (done[converted].load(std::memory_order_acquire)) {
                  py::gil_scoped_acquire gil;
                  while (converted < nblocks && done[converted].load(std::memory_order_acquire)) {
                    for (size_t i = converted * block, end = std::min(n, i + block); i < end; ++i) {
                      PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), to_pylist(ids[i]).release().ptr());
                      std::vector<uint32_t>().swap(ids[i]);
                    }
                    ++converted;
                  }
                } else {
                  size_t b = next.fetch_add(1);
                  if (b < nblocks) run_block(b);
                  else std::this_thread::yield();
                }
              }
              for (auto& th : pool) th.join();
            }
            if (error) std::rethrow_exception(error);
            return out;
          },
          py::arg("texts"), py::arg("allowed_special") = std::vector<std::string>{}, py::arg("threads") = py::none())
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
            PyProgress pp{progress, std::nullopt};
            std::vector<uint32_t> ids;
            try {
              py::gil_scoped_release nogil;
              ids = e.encode_file(path, resolve_threads(threads), errors, pp.make());
            } catch (TokenizerError&) {
              throw;
            } catch (std::runtime_error&) {
              pp.rethrow();
              throw;
            }
            pp.rethrow();
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

// pybind11 module alilama_attention._kernels: the kernel of bias_grad.hpp, called by
// plugins/alilama_attention/bias_grad.py, which checks the tensors and passes their addresses.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <vector>

#include "bias_grad.hpp"

namespace py = pybind11;
using namespace alilama::attention;

namespace {

Rows rows_of(uintptr_t address, const std::vector<int64_t>& strides) {
  if (strides.size() != 3) throw std::invalid_argument("expected the strides of the batch, head and row axes");
  return Rows{reinterpret_cast<const float*>(address), strides[0], strides[1], strides[2]};
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "Alilama's CPU attention kernels (called by alilama_attention.bias_grad, which checks the tensors).";
  m.def(
      "mask_grad",
      [](uintptr_t q, std::vector<int64_t> q_strides, uintptr_t k, std::vector<int64_t> k_strides, uintptr_t v,
         std::vector<int64_t> v_strides, uintptr_t out, std::vector<int64_t> out_strides, uintptr_t dout,
         std::vector<int64_t> dout_strides, uintptr_t lse, uintptr_t mask, uintptr_t grad, int64_t B, int64_t H,
         int64_t T, int64_t S, int64_t D, bool batched, bool causal, double scale, int n_threads,
         uintptr_t gomp_parallel) {
        if (B < 0 || H <= 0 || T < 0 || S < 0 || D <= 0) throw std::invalid_argument("bad sizes");
        Problem pb{rows_of(q, q_strides),
                   rows_of(k, k_strides),
                   rows_of(v, v_strides),
                   rows_of(out, out_strides),
                   rows_of(dout, dout_strides),
                   reinterpret_cast<const float*>(lse),
                   reinterpret_cast<const float*>(mask),
                   reinterpret_cast<float*>(grad),
                   B, H, T, S, D, batched, causal, float(scale)};
        py::gil_scoped_release release;  // the kernel touches no Python object
        run(pb, n_threads, reinterpret_cast<GompParallel>(gomp_parallel));
      },
      "Write the additive mask's gradient into grad (see native/bias_grad.hpp; float32, rows contiguous).\n"
      "gomp_parallel: the address of GOMP_parallel in PyTorch's OpenMP runtime, or 0 for threads of its own.");
}

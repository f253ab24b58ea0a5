// Randomised check of bias_grad.hpp under AddressSanitizer and UndefinedBehaviorSanitizer:
// random shapes, strides, causal and batched masks and thread counts, each compared with a
// plain double-precision computation of the same gradient. Every buffer has its exact size,
// so a read or write past any of them stops the run. Built and run by scripts/fuzz_native.sh.
//
//   bias_grad_check --seconds N --seed S
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bias_grad.hpp"

using namespace alilama::attention;

namespace {

struct Tensor4 {  // (B, H, L, D) rows with padding between them, to exercise the strides
  std::vector<float> data;
  int64_t sb, sh, sl;
  const float* at(int64_t b, int64_t h, int64_t i) const { return data.data() + b * sb + h * sh + i * sl; }
};

Tensor4 random_rows(std::mt19937& rng, int64_t B, int64_t H, int64_t L, int64_t D) {
  std::normal_distribution<float> normal;
  const int64_t sl = D + int64_t(rng() % 3), sh = L * sl + int64_t(rng() % 2), sb = H * sh;
  Tensor4 t{std::vector<float>(size_t(B * sb)), sb, sh, sl};
  for (auto& x : t.data) x = normal(rng);
  return t;
}

int check(std::mt19937& rng) {
  const int64_t B = 1 + rng() % 3, H = 1 + rng() % 4, T = 1 + rng() % 70, S = T + rng() % 40, D = 1 + rng() % 40;
  const bool causal = rng() % 4 != 0, batched = rng() % 2 == 0;
  const int threads = 1 + int(rng() % 3);
  const float scale = 1.0f / std::sqrt(float(D));
  Tensor4 q = random_rows(rng, B, H, T, D), k = random_rows(rng, B, H, S, D), v = random_rows(rng, B, H, S, D);
  Tensor4 out = random_rows(rng, B, H, T, D), dout = random_rows(rng, B, H, T, D);
  const int64_t MB = batched ? B : 1;
  std::normal_distribution<float> normal;
  std::vector<float> mask(size_t(MB * H * T * S));
  for (int64_t i = 0; i < MB * H * T * S; ++i) {
    const int64_t row = (i / S) % T, col = i % S;
    const bool hidden = causal && col > row + S - T, own = col == row + S - T;  // every row keeps its own key
    mask[size_t(i)] = hidden || (!own && rng() % 10 == 0) ? -std::numeric_limits<float>::infinity() : normal(rng);
  }
  // The forward's log-sum-exp of each row.
  auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(q.at(b, h, i)[d]) * k.at(b, h, j)[d];
    return dot * scale + mask[size_t((((batched ? b : 0) * H + h) * T + i) * S + j)];
  };
  std::vector<float> lse(size_t(B * H * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j) top = std::max(top, score(b, h, i, j));
        for (int64_t j = 0; j < S; ++j) sum += std::exp(score(b, h, i, j) - top);
        lse[size_t((b * H + h) * T + i)] = float(std::log(sum) + top);
      }
  std::vector<float> grad(mask.size(), std::nanf(""));  // the kernel must write every entry
  Problem pb{{q.data.data(), q.sb, q.sh, q.sl},          {k.data.data(), k.sb, k.sh, k.sl},
             {v.data.data(), v.sb, v.sh, v.sl},          {out.data.data(), out.sb, out.sh, out.sl},
             {dout.data.data(), dout.sb, dout.sh, dout.sl}, lse.data(), mask.data(), grad.data(),
             B, H, T, S, D, batched, causal, scale};
  run(pb, threads);
  std::vector<double> want(mask.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) delta += double(dout.at(b, h, i)[d]) * out.at(b, h, i)[d];
        for (int64_t j = 0; j < S; ++j) {
          const double p = std::exp(score(b, h, i, j) - lse[size_t((b * H + h) * T + i)]);
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) dp += double(dout.at(b, h, i)[d]) * v.at(b, h, j)[d];
          want[size_t((((batched ? b : 0) * H + h) * T + i) * S + j)] += p * (dp - delta);
        }
      }
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(double(grad[i]) - want[i]);
    if (!(err <= 1e-3 + 1e-3 * std::abs(want[i]))) {  // also catches NaN: an entry never written
      std::fprintf(stderr,
                   "mismatch at %zu: got %g, want %g (B=%lld H=%lld T=%lld S=%lld D=%lld causal=%d batched=%d)\n", i,
                   double(grad[i]), want[i], (long long)B, (long long)H, (long long)T, (long long)S, (long long)D,
                   int(causal), int(batched));
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  unsigned seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seed")) seed = unsigned(std::strtoul(argv[i + 1], nullptr, 10));
  }
  std::mt19937 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  long cases = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    if (check(rng)) {
      std::fprintf(stderr, "bias_grad_check: FAILED after %ld cases (seed %u)\n", cases, seed);
      return 1;
    }
    ++cases;
  }
  std::printf("bias_grad_check: %ld random cases agree with the double-precision reference (seed %u)\n", cases, seed);
  return 0;
}

// The gradient of an additive attention mask: the kernel of alilama_attention._kernels
// (binding in bias_grad.cpp, sanitizer check in bias_grad_check.cpp).
//
// PyTorch's fused CPU attention (the flash kernel behind scaled_dot_product_attention)
// computes dq, dk and dv but gives an additive mask no gradient, so a learnable positional
// bias would run the unfused math kernel. The sdpa backend keeps the fused kernel for the
// forward pass and for dq, dk, dv (q, k and v share one head size D, as that kernel requires),
// and gets the mask's gradient here:
//
//   P[b,h,i,j]  = exp(scale * q_i . k_j + mask[b,h,i,j] - lse[b,h,i])   (the forward's probabilities)
//   dP[b,h,i,j] = dout_i . v_j
//   dS[b,h,i,j] = P * (dP - delta[b,h,i]),   delta[b,h,i] = dout_i . out_i
//
// summed over the batch when the mask is shared by it. One pass, in registers and L1:
// nothing of size (B, H, T, S) is written except the (1 or B, H, T, S) result. Entries above
// the causal diagonal (j > i + S - T) are not computed and come out zero. Threads (PyTorch's own
// OpenMP workers where available, see run) take blocks of rows of one head, so no two threads
// write the same output. Every row must see at least one key (AttentionBias keeps a padded
// query's own key), as for the forward pass.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace alilama::attention {

// Compiled for AVX-512, AVX2+FMA and the baseline; the loader picks one for the CPU it runs on.
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define ALILAMA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ALILAMA_CLONES
#endif

// A (B, H, L, E) tensor whose last axis is contiguous: row i of (b, h) starts at
// p + b * sb + h * sh + i * sl.
struct Rows {
  const float* p;
  int64_t sb, sh, sl;
  const float* at(int64_t b, int64_t h, int64_t i) const { return p + b * sb + h * sh + i * sl; }
};

struct Problem {
  Rows q, k, v, out, dout;  // (B, H, T, D), (B, H, S, D), (B, H, S, D), (B, H, T, D), (B, H, T, D)
  const float* lse;         // (B, H, T), contiguous: the forward's log-sum-exp of each row
  const float* mask;        // (B or 1, H, T, S), contiguous
  float* grad;              // like mask; every entry is written
  int64_t B, H, T, S, D;
  bool batched, causal;  // batched: mask and grad have a batch axis (else shared by the batch)
  float scale;
};

// exp(x) for x <= ~0 (a log-probability), within a few ulp; 0 below -87 and for -inf, NaN
// for NaN. Plain arithmetic so that the loop around it vectorizes.
inline float exp_le0(float x) {
  const float lo = -87.0f;
  const float keep = x < lo ? 0.0f : x - x + 1.0f;  // 0 for a masked key (-inf); NaN stays NaN
  x = x >= lo ? x : lo;                             // NaN too: the conversion below needs a number
  x = x > 88.0f ? 88.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  const float two_n = __builtin_bit_cast(float, bits);
  return keep * p * two_n;
}

constexpr int64_t JB = 32;    // keys per block: a block's scores and dP stay in registers
constexpr int64_t ROWS = 16;  // the fewest query rows in a work item

// The gradient of keys [0, len) of one block, from their scores s and dP (len <= JB).
inline void finish(const float* s, const float* dp, const float* m, float* g, int64_t len, float scale, float lse,
                   float delta) {
  for (int64_t j = 0; j < len; ++j) g[j] += exp_le0(s[j] * scale + m[j] - lse) * (dp[j] - delta);
}

// Rows [i0, i1) of head h, for every batch element. kt and vt are scratch of D x sp
// floats, sp >= the keys these rows see, rounded up to a whole block.
ALILAMA_CLONES
static void rows(const Problem& pb, int64_t h, int64_t i0, int64_t i1, float* kt, float* vt, int64_t sp) {
  const int64_t S = pb.S, D = pb.D, T = pb.T;
  const int64_t keys = pb.causal ? std::min(S, i1 + S - T) : S;  // the last row's reach
  for (int64_t b = 0; b < pb.B; ++b) {
    const int64_t mh = (pb.batched ? b * pb.H : 0) + h;
    const float* mask = pb.mask + mh * T * S;
    float* grad = pb.grad + mh * T * S;
    if (b == 0 || pb.batched) std::fill(grad + i0 * S, grad + i1 * S, 0.0f);
    if (keys <= 0) continue;
    // Keys and values transposed, so that the inner loops run along keys; zeros pad the last block.
    for (int64_t j = 0; j < sp; ++j) {
      const float* kj = j < keys ? pb.k.at(b, h, j) : nullptr;
      const float* vj = j < keys ? pb.v.at(b, h, j) : nullptr;
      for (int64_t d = 0; d < D; ++d) {
        kt[d * sp + j] = kj ? kj[d] : 0.0f;
        vt[d * sp + j] = vj ? vj[d] : 0.0f;
      }
    }
    // Two rows at a time: four independent chains of FMAs per key block instead of two.
    for (int64_t i = i0; i < i1; i += 2) {
      const int64_t r = std::min<int64_t>(2, i1 - i);
      const float* q[2] = {pb.q.at(b, h, i), pb.q.at(b, h, i + r - 1)};
      const float* dout[2] = {pb.dout.at(b, h, i), pb.dout.at(b, h, i + r - 1)};
      float lse[2], delta[2];
      int64_t n[2];
      for (int64_t x = 0; x < 2; ++x) {
        const float* out = pb.out.at(b, h, i + x * (r - 1));
        delta[x] = 0.0f;
        for (int64_t d = 0; d < D; ++d) delta[x] += dout[x][d] * out[d];
        lse[x] = pb.lse[(b * pb.H + h) * T + i + x * (r - 1)];
        n[x] = pb.causal ? std::min(S, i + x * (r - 1) + S - T + 1) : S;
      }
      for (int64_t j0 = 0; j0 < n[1]; j0 += JB) {
        float s0[JB] = {}, dp0[JB] = {}, s1[JB] = {}, dp1[JB] = {};
        for (int64_t d = 0; d < D; ++d) {
          const float* kd = kt + d * sp + j0;
          const float* vd = vt + d * sp + j0;
          const float q0 = q[0][d], q1 = q[1][d], g0 = dout[0][d], g1 = dout[1][d];
          for (int64_t j = 0; j < JB; ++j) {
            s0[j] += q0 * kd[j];
            s1[j] += q1 * kd[j];
            dp0[j] += g0 * vd[j];
            dp1[j] += g1 * vd[j];
          }
        }
        const float* s_[2] = {s0, s1};
        const float* dp_[2] = {dp0, dp1};
        for (int64_t x = 0; x < r; ++x) {
          const float* m = mask + (i + x) * S + j0;
          float* g = grad + (i + x) * S + j0;
          if (n[x] - j0 >= JB)
            finish(s_[x], dp_[x], m, g, JB, pb.scale, lse[x], delta[x]);
          else if (n[x] > j0)
            finish(s_[x], dp_[x], m, g, n[x] - j0, pb.scale, lse[x], delta[x]);
        }
      }
    }
  }
}

// GNU OpenMP's entry point for a parallel region: fn(data) on num_threads threads, the caller included.
using GompParallel = void (*)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);

// With `parallel` (the GOMP_parallel of the OpenMP runtime PyTorch itself runs on), the work
// runs on PyTorch's own worker threads; otherwise on threads started here. The former matters:
// PyTorch's workers spin for a few milliseconds after each of its parallel regions, and threads
// of our own would share the cores with them.
inline void run(const Problem& pb, int n_threads, GompParallel parallel = nullptr) {
  // Work items are blocks of rows of one head. Each item transposes its keys once per batch
  // element, so items are as large as load balance allows: whole heads when there are enough
  // of them for every thread, else blocks of at least ROWS rows.
  n_threads = std::max(1, n_threads);
  const int64_t per_head = std::max<int64_t>(1, std::min((4 * n_threads + pb.H - 1) / pb.H, (pb.T + ROWS - 1) / ROWS));
  const int64_t block = std::max<int64_t>(1, (pb.T + per_head - 1) / per_head);
  const int64_t blocks = (pb.T + block - 1) / block, items = pb.H * blocks;
  const int64_t sp = (pb.S + JB - 1) / JB * JB;
  // Blocks of later rows hold more work under a causal mask: hand them out first.
  std::atomic<int64_t> next{0};
  auto worker = [&]() {
    std::vector<float> kt(size_t(pb.D * sp)), vt(size_t(pb.D * sp));
    for (int64_t it; (it = next.fetch_add(1)) < items;) {
      const int64_t h = it % pb.H, blk = blocks - 1 - it / pb.H;
      rows(pb, h, blk * block, std::min(pb.T, (blk + 1) * block), kt.data(), vt.data(), sp);
    }
  };
  n_threads = int(std::min<int64_t>(n_threads, items));
  if (parallel != nullptr && n_threads > 1) {
    parallel([](void* w) { (*static_cast<decltype(worker)*>(w))(); }, &worker, unsigned(n_threads), 0);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace alilama::attention

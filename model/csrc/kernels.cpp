// Row-invariant CPU kernels: dense linear layers (oneDNN brgemm on bf16 VNNI blocks, or fp32 row
// dot products) and attention over the engine's KV cache (brgemm tiles for prefill chunks, a
// vector loop for decoding). See kernels.h for the contract.
//
// Why each is row-invariant:
// - brgemm computes every C element from its own A row and B column with a K loop whose order
//   depends only on K (checked: the same bits for a row alone, at any offset, in any M tail);
//   calls split rows into M tiles and outputs into fixed kBlockN blocks.
// - the row dot product accumulates one row and one output in vector lanes in index order and
//   reduces the lanes in a fixed tree: the same for any number of rows.
// - attention walks key/value tiles at absolute positions (0, kTile, 2 kTile, ...) with an
//   online softmax per query row; positions past a row's own are masked to an exact 0 weight, so
//   whatever a tile holds beyond them (later tokens of the chunk, zero padding) adds exactly 0.

#include "kernels.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace composer {
namespace {

using Vec = at::vec::Vectorized<float>;
// Vec's register type, for arrays of accumulators: GCC keeps an array of Vec objects in memory
// (every fused multiply-add a load and a store), an array of the raw vector type in registers.
#if defined(CPU_CAPABILITY_AVX512)
using Reg = __m512;
#elif defined(CPU_CAPABILITY_AVX2)
using Reg = __m256;
#else
using Reg = Vec;
#endif
namespace cb = at::native::cpublas;

constexpr int64_t kBlockN = 64;   // outputs per packed weight block
constexpr int64_t kBlockM = 32;   // rows per brgemm call of a linear layer
constexpr int64_t kTile = 256;     // key/value positions per attention tile (absolute)
constexpr int64_t kQueryRows = 256;  // query rows (tokens x G) per attention task
constexpr int64_t kPrefetchRows = 64;  // decoding: key/value rows ahead of the one read
constexpr int64_t kSplit = 512;   // positions per decoding task (absolute), merged in order
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t even(int64_t n) { return n + (n & 1); }

float to_float(float x) { return x; }
float to_float(at::BFloat16 x) { return static_cast<float>(x); }

// The fp32 scale stored after an int8 row's Dh values (kernels.h).
float int8_scale(const int8_t* row, int64_t Dh) {
  float scale;
  std::memcpy(&scale, row + Dh, sizeof(scale));
  return scale;
}

// Vec::size() values from p (fp32 or bf16) as fp32; `count` < size() zero-fills the rest.
Vec load(const float* p, int64_t count = Vec::size()) { return Vec::loadu(p, count); }
Vec load(const at::BFloat16* p, int64_t count = Vec::size()) {
  if (count == Vec::size()) {
    Vec out;
    at::vec::load_to_float<at::BFloat16>(p, out);
    return out;
  }
  float tmp[Vec::size()] = {};
  for (int64_t i = 0; i < count; ++i) tmp[i] = static_cast<float>(p[i]);
  return Vec::loadu(tmp);
}
Vec load(const int8_t* p, int64_t count = Vec::size()) {
#if defined(CPU_CAPABILITY_AVX512)
  if (count == 16) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(CPU_CAPABILITY_AVX2)
  if (count == 8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
  float tmp[Vec::size()] = {};
  for (int64_t i = 0; i < count; ++i) tmp[i] = static_cast<float>(p[i]);
  return Vec::loadu(tmp);
}

float hmax(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, v);
}

// max(a, b) of vectors without NaN (one instruction where ATen's maximum spends four on NaNs).
Vec max_finite(const Vec& a, const Vec& b) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_max_ps(a, b);
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_max_ps(a, b);
#else
  return at::vec::maximum(a, b);
#endif
}

float hsum(const Vec& v) {
  return at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, v);
}

// out[i] = the lane sum of the i-th input, by a fixed tree, the same for each input: the four
// reductions share their shuffles (~13 instructions for four sums against ~9 for one hsum).
void hsum4(const Vec& in0, const Vec& in1, const Vec& in2, const Vec& in3, float* out) {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#if defined(CPU_CAPABILITY_AVX512)
  using R = __m512;
#else
  using R = __m256;
#endif
  const R a0 = in0, a1 = in1, a2 = in2, a3 = in3;
  // Per 128-bit block: [x0 + x2, y0 + y2, x1 + x3, y1 + y3] of two inputs, then of all four.
  R p01, p23, q;
#if defined(CPU_CAPABILITY_AVX512)
  p01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  p23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  q = _mm512_add_ps(_mm512_shuffle_ps(p01, p23, 0x44), _mm512_shuffle_ps(p01, p23, 0xEE));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(q), _mm512_extractf32x8_ps(q, 1));
#else
  p01 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  p23 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  q = _mm256_add_ps(_mm256_shuffle_ps(p01, p23, 0x44), _mm256_shuffle_ps(p01, p23, 0xEE));
  const __m256 h = q;
#endif
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#else
  const Vec* in[4] = {&in0, &in1, &in2, &in3};
  for (int i = 0; i < 4; ++i) out[i] = hsum(*in[i]);
#endif
}

// Dot product of n floats with n values of b: lanes in index order, then a fixed lane tree.
template <typename T>
float dot(const float* a, const T* b, int64_t n) {
  Vec acc(0.0f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) acc = at::vec::fmadd(Vec::loadu(a + i), load(b + i), acc);
  if (i < n) acc = at::vec::fmadd(Vec::loadu(a + i, n - i), load(b + i, n - i), acc);
  return hsum(acc);
}

// ---- linear layers ------------------------------------------------------------------------------

// Up to 4 rows x 4 outputs of y = x @ w.T, each output from its own lane accumulator.
template <typename T>
void rowdot_tile(const float* x, int64_t I, const T* w, float* y, int64_t ldy, int64_t rows, int64_t outs) {
  Vec acc[4][4];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outs; ++o) acc[r][o] = Vec(0.0f);
  for (int64_t i = 0; i < I; i += Vec::size()) {
    const int64_t n = std::min<int64_t>(Vec::size(), I - i);
    Vec wv[4], xv[4];
    for (int64_t o = 0; o < outs; ++o) wv[o] = load(w + o * I + i, n);
    for (int64_t r = 0; r < rows; ++r) xv[r] = Vec::loadu(x + r * I + i, n);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < outs; ++o) acc[r][o] = at::vec::fmadd(xv[r], wv[o], acc[r][o]);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outs; ++o) y[r * ldy + o] = hsum(acc[r][o]);
}

template <typename T>
void rowdot(const float* x, const T* w, float* y, int64_t N, int64_t O, int64_t I) {
  const int64_t oblocks = (O + kBlockN - 1) / kBlockN, mblocks = (N + 3) / 4;
  // Output blocks outside, so each thread keeps its weights in cache across the rows.
  at::parallel_for(0, oblocks * mblocks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ob = t / mblocks, m0 = (t % mblocks) * 4, rows = std::min<int64_t>(4, N - m0);
      const int64_t o_end = std::min(O, (ob + 1) * kBlockN);
      for (int64_t o0 = ob * kBlockN; o0 < o_end; o0 += 4)
        rowdot_tile(x + m0 * I, I, w + o0 * I, y + m0 * O + o0, O, rows, std::min<int64_t>(4, o_end - o0));
    }
  });
}

}  // namespace

bool bf16_matrix_available() {
  static const bool ok = [] {
    try {  // raises where oneDNN has no bf16 brgemm for this CPU
      std::vector<at::BFloat16> a(16 * 32, at::BFloat16(1.0f)), b(32 * 16, at::BFloat16(1.0f));
      std::vector<float> c(16 * 16, 0.0f);
      cb::brgemm(16, 16, 32, 32, 16, 16, false, a.data(), b.data(), c.data(), true);
      cb::brgemm_release(true);
      return c[0] == 32.0f;
    } catch (const std::exception&) {
      return false;
    }
  }();
  return ok;
}

int64_t parallel_width() {
  std::atomic<int64_t> widest{0};
  at::parallel_for(0, 4096, 1, [&](int64_t, int64_t) {
    const int64_t width = at::get_thread_num() + 1;
    int64_t seen = widest.load();
    while (seen < width && !widest.compare_exchange_weak(seen, width)) {
    }
  });
  return widest.load();
}

at::Tensor pack_vnni(const at::Tensor& w_OI) {
  TORCH_CHECK(w_OI.dim() == 2, "pack_vnni: a 2-d weight expected");
  const at::Tensor w = w_OI.to(at::kFloat).contiguous();
  const int64_t O = w.size(0), I = w.size(1), Ie = even(I);
  at::Tensor out = at::zeros({O * Ie}, w.options().dtype(at::kBFloat16));
  const float* src = w.data_ptr<float>();
  at::BFloat16* dst = out.data_ptr<at::BFloat16>();
  at::parallel_for(0, (O + kBlockN - 1) / kBlockN, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * kBlockN, nb = std::min(kBlockN, O - n0);
      at::BFloat16* blk = dst + n0 * Ie;
      for (int64_t n = 0; n < nb; ++n)
        for (int64_t k = 0; k < I; ++k) blk[((k >> 1) * nb + n) * 2 + (k & 1)] = at::BFloat16(src[(n0 + n) * I + k]);
    }
  });
  return out;
}

namespace {

// c (N, O) fp32 = a (N, Ie) bf16 @ pack_vnni's blocks (O outputs): brgemm tiles of kBlockM rows
// by kBlockN outputs, each with the whole Ie loop, so a row's result does not depend on N.
void vnni_gemm(const at::BFloat16* a, int64_t N, int64_t Ie, const at::BFloat16* w, int64_t O, float* c) {
  const int64_t oblocks = (O + kBlockN - 1) / kBlockN, mtiles = (N + kBlockM - 1) / kBlockM;
  at::parallel_for(0, oblocks * mtiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = (t / mtiles) * kBlockN, nb = std::min(kBlockN, O - n0);
      const int64_t m0 = (t % mtiles) * kBlockM, mb = std::min(kBlockM, N - m0);
      cb::brgemm(mb, nb, Ie, Ie, nb, O, false, a + m0 * Ie, w + n0 * Ie, c + m0 * O + n0, true);
    }
    cb::brgemm_release(true);
  });
}

// act (N, Fe) bf16 = silu(gate) * up of gu (N, 2F) fp32 = [gate | up]: F.silu's formula,
// x / (1 + exp(-x)), in fp32, rounded to bf16 once (as linear_vnni rounds its input).
void swiglu_to_bf16(const float* gu, int64_t N, int64_t F, at::BFloat16* act, int64_t Fe) {
  at::parallel_for(0, N, 16, [&](int64_t r0, int64_t r1) {
    const Vec one(1.0f);
    for (int64_t r = r0; r < r1; ++r) {
      const float* gate = gu + r * 2 * F;
      const float* up = gate + F;
      at::BFloat16* out = act + r * Fe;
      int64_t j = 0;
      for (; j + 2 * Vec::size() <= F; j += 2 * Vec::size()) {
        const Vec g0 = Vec::loadu(gate + j), g1 = Vec::loadu(gate + j + Vec::size());
        const Vec s0 = g0 / (one + g0.neg().exp()) * Vec::loadu(up + j);
        const Vec s1 = g1 / (one + g1.neg().exp()) * Vec::loadu(up + j + Vec::size());
        at::vec::convert_float_bfloat16(s0, s1).store(out + j);
      }
      for (; j < F; ++j) out[j] = at::BFloat16(gate[j] / (1.0f + std::exp(-gate[j])) * up[j]);
      for (; j < Fe; ++j) out[j] = at::BFloat16(0.0f);
    }
  });
}

}  // namespace

at::Tensor linear_vnni(const at::Tensor& x_NI, const at::Tensor& packed, int64_t O) {
  TORCH_CHECK(x_NI.dim() == 2 && x_NI.scalar_type() == at::kFloat, "linear_vnni: (N, I) fp32 input expected");
  const int64_t N = x_NI.size(0), I = x_NI.size(1), Ie = even(I);
  TORCH_CHECK(packed.numel() == O * Ie && packed.scalar_type() == at::kBFloat16, "linear_vnni: packed weights do not match");
  at::Tensor xb = (Ie == I ? x_NI : at::constant_pad_nd(x_NI, {0, 1})).to(at::kBFloat16).contiguous();
  at::Tensor y = at::empty({N, O}, x_NI.options());
  vnni_gemm(xb.data_ptr<at::BFloat16>(), N, Ie, packed.data_ptr<at::BFloat16>(), O, y.data_ptr<float>());
  return y;
}

at::Tensor moe_vnni(const at::Tensor& h_ND, const at::Tensor& experts_Nk, const at::Tensor& weights_Nk,
                    const std::vector<at::Tensor>& w13, const std::vector<at::Tensor>& w2) {
  TORCH_CHECK(h_ND.dim() == 2 && h_ND.scalar_type() == at::kFloat, "moe_vnni: (N, D) fp32 input expected");
  TORCH_CHECK(experts_Nk.dim() == 2 && experts_Nk.size(0) == h_ND.size(0) && weights_Nk.sizes() == experts_Nk.sizes() &&
                  weights_Nk.scalar_type() == at::kFloat, "moe_vnni: (N, k) experts and fp32 weights expected");
  TORCH_CHECK(!w13.empty() && w13.size() == w2.size(), "moe_vnni: two matrices an expert");
  const at::Tensor h = h_ND.contiguous(), chosen = experts_Nk.to(at::kLong).contiguous(), weight = weights_Nk.contiguous();
  const int64_t N = h.size(0), D = h.size(1), De = even(D), k = chosen.size(1), M = N * k, E = w13.size();
  const int64_t F2 = w13[0].numel() / De, F = F2 / 2, Fe = even(F);
  for (int64_t e = 0; e < E; ++e)
    TORCH_CHECK(w13[e].scalar_type() == at::kBFloat16 && w2[e].scalar_type() == at::kBFloat16 &&
                    w13[e].numel() == F2 * De && w2[e].numel() == D * Fe && F2 == 2 * F,
                "moe_vnni: packed weights do not match");
  // Rows grouped by expert, stably: slot_of[i] is where routed row i (token i / k) goes.
  const int64_t* ex = chosen.data_ptr<int64_t>();
  std::vector<int64_t> counts(E, 0), slot_of(M);
  for (int64_t i = 0; i < M; ++i) {
    TORCH_CHECK(ex[i] >= 0 && ex[i] < E, "moe_vnni: an expert id outside [0, ", E, ")");
    counts[ex[i]]++;
  }
  std::vector<int64_t> next(E, 0);
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + counts[e - 1];
  for (int64_t i = 0; i < M; ++i) slot_of[i] = next[ex[i]]++;
  at::Tensor xb = at::empty({M, De}, h.options().dtype(at::kBFloat16));
  const float* hs = h.data_ptr<float>();
  at::BFloat16* a = xb.data_ptr<at::BFloat16>();
  at::parallel_for(0, M, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* src = hs + (i / k) * D;
      at::BFloat16* dst = a + slot_of[i] * De;
      for (int64_t d = 0; d < D; ++d) dst[d] = at::BFloat16(src[d]);
      if (De != D) dst[D] = at::BFloat16(0.0f);  // the VNNI pair's padding
    }
  });
  at::Tensor y = at::empty({M, D}, h.options());
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  at::Tensor gu = at::empty({most, F2}, h.options());
  at::Tensor act = at::empty({most, Fe}, h.options().dtype(at::kBFloat16));
  for (int64_t e = 0, start = 0; e < E; start += counts[e], ++e) {
    if (counts[e] == 0) continue;
    vnni_gemm(a + start * De, counts[e], De, w13[e].data_ptr<at::BFloat16>(), F2, gu.data_ptr<float>());
    swiglu_to_bf16(gu.data_ptr<float>(), counts[e], F, act.data_ptr<at::BFloat16>(), Fe);
    vnni_gemm(act.data_ptr<at::BFloat16>(), counts[e], Fe, w2[e].data_ptr<at::BFloat16>(), D, y.data_ptr<float>() + start * D);
  }
  // Each token's weighted rows summed into zeros in ascending expert order (its slots' order):
  // the runner's `y * weight` then index_add_.
  at::Tensor out = at::zeros({N, D}, h.options());
  const float* ys = y.data_ptr<float>();
  const float* ws = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    std::vector<int64_t> rows(k);
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t j = 0; j < k; ++j) rows[j] = n * k + j;
      std::sort(rows.begin(), rows.end(), [&](int64_t x, int64_t z) { return slot_of[x] < slot_of[z]; });
      float* acc = o + n * D;
      for (const int64_t i : rows) {
        const float* yr = ys + slot_of[i] * D;
        const float wi = ws[i];
        for (int64_t d = 0; d < D; ++d) {
          const float product = yr[d] * wi;
          acc[d] = acc[d] + product;
        }
      }
    }
  });
  return out;
}

at::Tensor linear_rowdot(const at::Tensor& x_NI, const at::Tensor& w_OI) {
  TORCH_CHECK(x_NI.dim() == 2 && x_NI.scalar_type() == at::kFloat, "linear_rowdot: (N, I) fp32 input expected");
  TORCH_CHECK(w_OI.dim() == 2 && w_OI.size(1) == x_NI.size(1), "linear_rowdot: weight shape");
  const at::Tensor x = x_NI.contiguous(), w = w_OI.contiguous();
  const int64_t N = x.size(0), I = x.size(1), O = w.size(0);
  at::Tensor y = at::empty({N, O}, x.options());
  if (w.scalar_type() == at::kBFloat16)
    rowdot(x.data_ptr<float>(), w.data_ptr<at::BFloat16>(), y.data_ptr<float>(), N, O, I);
  else
    rowdot(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), N, O, I);
  return y;
}

// ---- normalisation ------------------------------------------------------------------------------

at::Tensor rms_norm(const at::Tensor& x_ND, const at::Tensor& w_D, double eps) {
  TORCH_CHECK(x_ND.dim() == 2 && x_ND.scalar_type() == at::kFloat, "rms_norm: (N, D) fp32 input expected");
  TORCH_CHECK(w_D.dim() == 1 && w_D.size(0) == x_ND.size(1) && w_D.scalar_type() == at::kFloat, "rms_norm: (D) fp32 weight");
  const at::Tensor x = x_ND.contiguous(), w = w_D.contiguous();
  const int64_t N = x.size(0), D = x.size(1);
  at::Tensor y = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  const float* weight = w.data_ptr<float>();
  float* out = y.data_ptr<float>();
  constexpr int64_t W = Vec::size();
  at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* row = in + n * D;
      Vec acc(0.0f);
      int64_t d = 0;
      for (; d + W <= D; d += W) {
        const Vec v = Vec::loadu(row + d);
        acc = at::vec::fmadd(v, v, acc);
      }
      if (d < D) {
        const Vec v = Vec::loadu(row + d, D - d);
        acc = at::vec::fmadd(v, v, acc);
      }
      const Vec r(1.0f / std::sqrt(hsum(acc) / static_cast<float>(D) + static_cast<float>(eps)));
      for (d = 0; d + W <= D; d += W) (Vec::loadu(row + d) * r * Vec::loadu(weight + d)).store(out + n * D + d);
      if (d < D) (Vec::loadu(row + d, D - d) * r * Vec::loadu(weight + d, D - d)).store(out + n * D + d, D - d);
    }
  });
  return y;
}

// ---- attention ----------------------------------------------------------------------------------

namespace {

struct Geometry {
  int64_t H, K, G, Dh, max_len;
  float scale;
  int64_t row;  // elements a stored key or value row takes: Dh, or Dh + kInt8ScaleBytes for int8
};

// The factor a key row's dot products are scaled by: the softmax scale, times the row's own scale
// when it is int8 (the same bits as before for fp32 and bf16 rows).
template <typename KT>
float key_factor(const KT* row, const Geometry& g) {
  if constexpr (std::is_same_v<KT, int8_t>) return int8_scale(row, g.Dh) * g.scale;
  else return g.scale;
}

// Decoding streams each head's key rows, then its value rows, thousands at a time: ask for the row
// kPrefetchRows ahead of `row` (rows `stride` elements apart). The hardware prefetcher alone kept
// int8 rows (68 bytes: two lines, not aligned) at ~6 GB/s and bf16 at ~16 on two cores of a Xeon
// with the data in memory; with it ~15 and ~19 (micro: 30 layers at 7.4k positions, 14.5 -> 5.8
// ms and 10.0 -> 9.0 ms a token).
template <typename KT>
void prefetch_ahead(const KT* row, int64_t stride) {
  const char* ahead = reinterpret_cast<const char*>(row + kPrefetchRows * stride);
  for (int64_t b = 0; b < stride * static_cast<int64_t>(sizeof(KT)); b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
}

// A value row's weight: p, times the row's scale when it is int8.
template <typename KT>
float value_weight(float p, const KT* row, int64_t Dh) {
  if constexpr (std::is_same_v<KT, int8_t>) return p * int8_scale(row, Dh);
  else return p;
}

// The largest of x[0, n) (a max is exact: any order gives the same value), in vector lanes (a
// scalar running max keeps a loop-carried dependency through memory: ~40% of decoding's attention).
float max_of(const float* x, int64_t n) {
  Vec m(kNegInf);
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size()) m = at::vec::maximum(m, Vec::loadu(x + j));
  float out = hmax(m);
  for (; j < n; ++j) out = std::max(out, x[j]);
  return out;
}

// Decoding, scores of the G heads of one key/value head against keys [s0, s1), scaled, as
// scores[h * n + j]. C > 0: Dh is C vectors; four key rows at a time are loaded once for all G
// heads, and each head's four dot products reduced together (hsum4); the rows after the last four,
// one at a time, four heads' dot products reduced together. C == 0: any Dh, dot() per head.
template <typename KT, int C>
void split_scores(const float* q, const KT* k, const Geometry& g, int64_t s0, int64_t n, float* scores) {
  constexpr int64_t W = Vec::size();
  int64_t j = 0;
  if constexpr (C > 0) {
    for (; j + 4 <= n; j += 4) {
      Reg kv[4][C];
      float factor[4];
      for (int i = 0; i < 4; ++i) {
        const KT* ki = k + (s0 + j + i) * g.row;
        prefetch_ahead(ki, g.row);
        factor[i] = key_factor(ki, g);
        for (int c = 0; c < C; ++c) kv[i][c] = load(ki + c * W);
      }
      for (int64_t h = 0; h < g.G; ++h) {
        const float* qh = q + h * g.Dh;
        Vec acc[4] = {Vec(0.0f), Vec(0.0f), Vec(0.0f), Vec(0.0f)};
        for (int c = 0; c < C; ++c) {
          const Vec qc = Vec::loadu(qh + c * W);
          for (int i = 0; i < 4; ++i) acc[i] = at::vec::fmadd(qc, Vec(kv[i][c]), acc[i]);
        }
        float sums[4];
        hsum4(acc[0], acc[1], acc[2], acc[3], sums);
        for (int i = 0; i < 4; ++i) scores[h * n + j + i] = sums[i] * factor[i];
      }
    }
  }
  for (; j < n; ++j) {
    const KT* kj = k + (s0 + j) * g.row;
    prefetch_ahead(kj, g.row);
    const float factor = key_factor(kj, g);
    if constexpr (C == 0) {
      for (int64_t h = 0; h < g.G; ++h) scores[h * n + j] = dot(q + h * g.Dh, kj, g.Dh) * factor;
    } else {
      Vec kv[C];
      for (int c = 0; c < C; ++c) kv[c] = load(kj + c * W);
      for (int64_t h0 = 0; h0 < g.G; h0 += 4) {  // four heads share one reduction
        const int64_t heads = std::min<int64_t>(4, g.G - h0);
        Vec acc[4] = {Vec(0.0f), Vec(0.0f), Vec(0.0f), Vec(0.0f)};
        for (int64_t i = 0; i < heads; ++i) {
          const float* qh = q + (h0 + i) * g.Dh;
          for (int c = 0; c < C; ++c) acc[i] = at::vec::fmadd(Vec::loadu(qh + c * W), kv[c], acc[i]);
        }
        float sums[4];
        hsum4(acc[0], acc[1], acc[2], acc[3], sums);
        for (int64_t i = 0; i < heads; ++i) scores[(h0 + i) * n + j] = sums[i] * factor;
      }
    }
  }
}

// For heads [h0, h0 + GH): acc_h[0, Dh) = sum_j p_h[j] v[s0 + j] in position order, p_h =
// p + h * n, acc_h = out + h * stride. Each value row is loaded once for the GH heads, whose sums
// stay in registers (GH * C vectors).
template <typename KT, int C, int GH>
void split_values(const float* p, const KT* v, int64_t Dh, int64_t row, int64_t s0, int64_t n, int64_t h0,
                  float* out, int64_t stride) {
  constexpr int64_t W = Vec::size();
  Reg sum[GH][C];
  for (int h = 0; h < GH; ++h)
    for (int c = 0; c < C; ++c) sum[h][c] = Vec(0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const KT* vj = v + (s0 + j) * row;
    prefetch_ahead(vj, row);
    Reg vv[C];
    for (int c = 0; c < C; ++c) vv[c] = load(vj + c * W);
    for (int h = 0; h < GH; ++h) {
      const Vec pj(value_weight(p[(h0 + h) * n + j], vj, Dh));
      for (int c = 0; c < C; ++c) sum[h][c] = at::vec::fmadd(pj, Vec(vv[c]), Vec(sum[h][c]));
    }
  }
  for (int h = 0; h < GH; ++h)
    for (int c = 0; c < C; ++c) Vec(sum[h][c]).store(out + (h0 + h) * stride + c * W);
}

// The same for any Dh, one head at a time, the sums in memory.
template <typename KT>
void split_values_any(const float* p, const KT* v, int64_t Dh, int64_t row, int64_t s0, int64_t n, float* acc) {
  constexpr int64_t W = Vec::size();
  std::fill(acc, acc + Dh, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const KT* vj = v + (s0 + j) * row;
    const Vec pj(value_weight(p[j], vj, Dh));
    for (int64_t d = 0; d < Dh; d += W) {
      const int64_t c = std::min<int64_t>(W, Dh - d);
      at::vec::fmadd(pj, load(vj + d, c), Vec::loadu(acc + d, c)).store(acc + d, c);
    }
  }
}

// Decoding: one query token, one key/value head, positions [s0, s1): the G heads' softmax over
// the split (exact max first), written as (max, sum, G x Dh weighted values) per head.
template <typename KT, int C>
void decode_split(const float* q, const KT* k, const KT* v, const Geometry& g, int64_t s0, int64_t s1, float* part) {
  const int64_t n = s1 - s0, G = g.G, Dh = g.Dh;
  std::vector<float> scores(G * n);
  split_scores<KT, C>(q, k, g, s0, n, scores.data());
  for (int64_t h = 0; h < G; ++h) {
    float* s = scores.data() + h * n;
    const float m = max_of(s, n);
    Vec sum(0.0f);
    int64_t j = 0;
    for (; j + Vec::size() <= n; j += Vec::size()) {
      Vec e = (Vec::loadu(s + j) - Vec(m)).exp();
      e.store(s + j);
      sum = sum + e;
    }
    if (j < n) {
      Vec e = (Vec::loadu(s + j, n - j) - Vec(m)).exp();
      e.store(s + j, n - j);
      sum = sum + Vec::loadu(s + j, n - j);
    }
    float* o = part + h * (Dh + 2);
    o[0] = m;
    o[1] = hsum(sum);
    if constexpr (C == 0) split_values_any(s, v, Dh, g.row, s0, n, o + 2);
  }
  if constexpr (C > 0) {
    // All heads' weighted values, in groups of up to 16 / C (at most 4) heads: at most 16 vector
    // registers of sums. Cases above kMaxGroup never run (they compile as one-head groups).
    constexpr int64_t kMaxGroup = C >= 16 ? 1 : C >= 8 ? 2 : 4;
    for (int64_t h = 0; h < G; h += kMaxGroup) {
      const float* p = scores.data();
      float* o = part + 2;
      switch (std::min(kMaxGroup, G - h)) {
        case 4: split_values<KT, C, (C >= 8 ? 1 : 4)>(p, v, Dh, g.row, s0, n, h, o, Dh + 2); break;
        case 3: split_values<KT, C, (C >= 8 ? 1 : 3)>(p, v, Dh, g.row, s0, n, h, o, Dh + 2); break;
        case 2: split_values<KT, C, (C >= 16 ? 1 : 2)>(p, v, Dh, g.row, s0, n, h, o, Dh + 2); break;
        default: split_values<KT, C, 1>(p, v, Dh, g.row, s0, n, h, o, Dh + 2);
      }
    }
  }
}

// decode_split for this Dh: a register-resident variant where Dh is 2, 4, 8 or 16 vectors.
template <typename KT>
auto decode_split_for(int64_t Dh) {
  const int64_t C = Dh % Vec::size() == 0 ? Dh / Vec::size() : 0;
  switch (C) {
    case 2: return &decode_split<KT, 2>;
    case 4: return &decode_split<KT, 4>;
    case 8: return &decode_split<KT, 8>;
    case 16: return &decode_split<KT, 16>;
    default: return &decode_split<KT, 0>;
  }
}

template <typename KT>
void attention_vector(const float* q, const KT* ck, const KT* cv, const int64_t* rows, const int64_t* pos,
                      float* out, int64_t N, const Geometry& g) {
  const int64_t K = g.K, G = g.G, Dh = g.Dh, part_size = G * (Dh + 2);
  int64_t max_splits = 0;
  for (int64_t n = 0; n < N; ++n) max_splits = std::max(max_splits, pos[n] / kSplit + 1);
  std::vector<float> parts(N * K * max_splits * part_size);
  const auto split = decode_split_for<KT>(Dh);
  // A task is one split of one key/value head of one cache row, for every token on that row (a
  // draft's tokens share their sequence's row): the first token reads the split's keys and values
  // from memory, the others find them in cache. Each token's arithmetic is the same as alone.
  std::vector<std::vector<int64_t>> by_row;
  for (int64_t n = 0; n < N; ++n) {
    auto same = std::find_if(by_row.begin(), by_row.end(), [&](const auto& ns) { return rows[ns[0]] == rows[n]; });
    if (same == by_row.end()) by_row.push_back({n});
    else same->push_back(n);
  }
  const int64_t R = static_cast<int64_t>(by_row.size());
  at::parallel_for(0, R * K * max_splits, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t kh = (t / max_splits) % K, s = t % max_splits, s0 = s * kSplit;
      for (const int64_t n : by_row[t / (K * max_splits)]) {
        const int64_t s1 = std::min(pos[n] + 1, s0 + kSplit);
        if (s0 >= s1) continue;
        const int64_t base = (rows[n] * K + kh) * g.max_len * g.row;
        split(q + (n * g.H + kh * G) * Dh, ck + base, cv + base, g, s0, s1,
              parts.data() + ((n * K + kh) * max_splits + s) * part_size);
      }
    }
  });
  // Merge each head's splits in order: o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
  at::parallel_for(0, N * K, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(Dh);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / K, splits = pos[n] / kSplit + 1;
      const float* first = parts.data() + t * max_splits * part_size;
      for (int64_t h = 0; h < G; ++h) {
        float M = kNegInf, l = 0.0f;
        for (int64_t s = 0; s < splits; ++s) M = std::max(M, first[s * part_size + h * (Dh + 2)]);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t s = 0; s < splits; ++s) {
          const float* p = first + s * part_size + h * (Dh + 2);
          const float w = std::exp(p[0] - M);
          l += w * p[1];
          for (int64_t d = 0; d < Dh; ++d) acc[d] += w * p[2 + d];
        }
        float* o = out + (n * g.H + (t % K) * G + h) * Dh;
        for (int64_t d = 0; d < Dh; ++d) o[d] = acc[d] / l;
      }
    }
  });
}

// A run of tokens of one cache row at consecutive positions (a prefill chunk).
struct Segment {
  int64_t row, t0, t1, p0;
};

std::vector<Segment> segments_of(const int64_t* rows, const int64_t* pos, int64_t N) {
  std::vector<Segment> out;
  for (int64_t n = 0; n < N; ++n) {
    if (!out.empty() && out.back().row == rows[n] && out.back().p0 + (n - out.back().t0) == pos[n]) {
      out.back().t1 = n + 1;
    } else {
      out.push_back({rows[n], n, n + 1, pos[n]});
    }
  }
  return out;
}

// e^(s - m) for s <= m, to well within bf16's precision (relative error below 1e-5): 2^t as
// 2^floor(t) times a degree-4 polynomial of the fraction, eight instructions with AVX-512
// (vscalefps), against ~20 for ATen's exp_u20, which AVX2 builds keep.
Vec exp_bf16(const Vec& s, const Vec& m) {
#if defined(CPU_CAPABILITY_AVX512)
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 t = _mm512_fmsub_ps(s, log2e, _mm512_mul_ps(m, log2e));
  const __m512 whole = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, whole);  // [0, 1)
  // Minimax fit of 2^f on [0, 1).
  __m512 p = _mm512_set1_ps(1.3697664e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.1690358e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4163844e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9296026e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000017f));
  return _mm512_scalef_ps(p, whole);
#else
  return (s - m).exp_u20();
#endif
}

// Matrix-mode element type: bf16 (VNNI pairs) or fp32 (plain rows).
template <typename CT>
struct Tiles {
  static constexpr bool vnni = std::is_same_v<CT, at::BFloat16>;

  // B of S = Q K^T: K-dim Dh (even), N = kTile positions; positions from `valid` on are zero.
  template <typename KT>
  static void pack_keys(const KT* k, int64_t valid, int64_t Dh, CT* dst) {
    if constexpr (vnni && std::is_same_v<KT, at::BFloat16>) {
      // A bf16 pair (d, d + 1) is one 32-bit word: a (kTile x Dh/2) word transpose.
      auto* out = reinterpret_cast<uint32_t*>(dst);
      const auto* in = reinterpret_cast<const uint32_t*>(k);
      const int64_t pairs = Dh / 2;
      for (int64_t c = 0; c < valid; ++c)
        for (int64_t p = 0; p < pairs; ++p) out[p * kTile + c] = in[c * pairs + p];
      for (int64_t p = 0; p < pairs; ++p) std::fill(out + p * kTile + valid, out + (p + 1) * kTile, 0u);
    } else if constexpr (!vnni && std::is_same_v<KT, float>) {
      for (int64_t c = 0; c < valid; ++c)
        for (int64_t d = 0; d < Dh; ++d) dst[d * kTile + c] = k[c * Dh + d];
      for (int64_t d = 0; d < Dh; ++d) std::fill(dst + d * kTile + valid, dst + (d + 1) * kTile, CT(0.0f));
    } else {
      for (int64_t c = 0; c < kTile; ++c)
        for (int64_t d = 0; d < Dh; ++d) {
          const CT value = c < valid ? CT(to_float(k[c * Dh + d])) : CT(0.0f);
          if constexpr (vnni) dst[((d >> 1) * kTile + c) * 2 + (d & 1)] = value;
          else dst[d * kTile + c] = value;
        }
    }
  }

  // B of O = P V: K-dim kTile positions, N = Dh; positions from `valid` on are zero.
  template <typename KT>
  static void pack_values(const KT* v, int64_t valid, int64_t Dh, CT* dst) {
    if constexpr (!vnni && std::is_same_v<KT, float>) {
      std::copy(v, v + valid * Dh, dst);
      std::fill(dst + valid * Dh, dst + kTile * Dh, CT(0.0f));
    } else if constexpr (vnni && std::is_same_v<KT, at::BFloat16>) {
      // Positions (c, c + 1) of one value dimension are one 32-bit word: rows interleaved in pairs.
      auto* out = reinterpret_cast<uint32_t*>(dst);
      const auto* in = reinterpret_cast<const uint16_t*>(v);
      for (int64_t c = 0; c < kTile; c += 2) {
        uint32_t* word = out + (c / 2) * Dh;
        if (c + 1 < valid) {
          const uint16_t* lo = in + c * Dh;
          const uint16_t* hi = lo + Dh;
          for (int64_t d = 0; d < Dh; ++d) word[d] = uint32_t(lo[d]) | (uint32_t(hi[d]) << 16);
        } else if (c < valid) {
          const uint16_t* lo = in + c * Dh;
          for (int64_t d = 0; d < Dh; ++d) word[d] = lo[d];
        } else {
          std::fill(word, word + Dh, 0u);
        }
      }
    } else {
      for (int64_t c = 0; c < kTile; ++c) {
        const KT* row = v + c * Dh;
        for (int64_t d = 0; d < Dh; ++d) {
          CT value(0.0f);
          if (c < valid) {
            if constexpr (std::is_same_v<KT, CT>) value = row[d];
            else value = CT(to_float(row[d]));
          }
          if constexpr (vnni) dst[((c >> 1) * Dh + d) * 2 + (c & 1)] = value;
          else dst[c * Dh + d] = value;
        }
      }
    }
  }

  // 2 Vec::size() fp32 values -> CT (round to nearest even for bf16; with AVX512-BF16 one
  // instruction, which also flushes denormals (below 1.2e-38) to zero).
  static void store2(const Vec& a, const Vec& b, CT* dst) {
    if constexpr (vnni) {
#if defined(COMPOSER_AVX512BF16)
      _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(b, a));
#else
      at::vec::convert_from_float<at::BFloat16>(a, b).store(dst);
#endif
    } else {
      a.store(dst);
      b.store(dst + Vec::size());
    }
  }

  // e^(s - m): a fast polynomial where the products are bf16 anyway, Sleef's 1-ulp exp for fp32.
  static Vec exp_shifted(const Vec& s, const Vec& m) {
    if constexpr (vnni) return exp_bf16(s, m);
    else return (s - m).exp();
  }
};

// One row of one tile: the online softmax update. `cols` of its kTile scores are valid (the
// rest are after the row's position); writes the weights (CT) and returns the rescale factor.
template <typename CT>
float softmax_row(const float* s, int64_t cols, float& m, float& l, CT* p) {
  constexpr int64_t W = Vec::size();
  static_assert(kTile % (4 * W) == 0, "tiles are whole groups of four vectors");
  // The row's maximum in four independent lanes of vectors (scores are finite: no NaN checks).
  Vec vmax[4] = {Vec(kNegInf), Vec(kNegInf), Vec(kNegInf), Vec(kNegInf)};
  int64_t c = 0;
  for (; c + 4 * W <= cols; c += 4 * W)
    for (int64_t i = 0; i < 4; ++i) vmax[i] = max_finite(vmax[i], Vec::loadu(s + c + i * W));
  for (; c < cols; c += W) {
    const int64_t n = std::min<int64_t>(cols - c, W);
    vmax[0] = max_finite(vmax[0], n == W ? Vec::loadu(s + c) : Vec::set(Vec(kNegInf), Vec::loadu(s + c), n));
  }
  const float m_new = std::max(m, hmax(max_finite(max_finite(vmax[0], vmax[1]), max_finite(vmax[2], vmax[3]))));
  const float alpha = m_new == m ? 1.0f : std::exp(m - m_new);  // exp(0) is exactly 1
  const Vec shift(m_new);
  Vec sum[2] = {Vec(0.0f), Vec(0.0f)};
  // Whole vector pairs at or before the row's position need no mask; the rest are masked (or 0).
  for (c = 0; c + 2 * W <= cols; c += 2 * W) {
    const Vec e0 = Tiles<CT>::exp_shifted(Vec::loadu(s + c), shift);
    const Vec e1 = Tiles<CT>::exp_shifted(Vec::loadu(s + c + W), shift);
    sum[0] = sum[0] + e0;
    sum[1] = sum[1] + e1;
    Tiles<CT>::store2(e0, e1, p + c);
  }
  for (; c < kTile; c += 2 * W) {
    Vec e[2];
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t n = std::clamp<int64_t>(cols - c - i * W, 0, W);
      if (n == 0) {
        e[i] = Vec(0.0f);
        continue;
      }
      e[i] = Tiles<CT>::exp_shifted(Vec::loadu(s + c + i * W), shift);
      if (n < W) e[i] = Vec::set(Vec(0.0f), e[i], n);  // after the row's position: exactly 0
      sum[i] = sum[i] + e[i];
    }
    Tiles<CT>::store2(e[0], e[1], p + c);
  }
  l = l * alpha + hsum(sum[0] + sum[1]);
  m = m_new;
  return alpha;
}

// One task: query rows of tokens [t0, t1) of a segment, one key/value head, over packed tiles.
template <typename CT>
void matrix_task(const float* q, const Segment& seg, int64_t t0, int64_t t1, int64_t kh, const CT* keys,
                 const CT* values, float* out, const Geometry& g) {
  constexpr int64_t W = Vec::size();
  const int64_t G = g.G, Dh = g.Dh, De = even(Dh), R = (t1 - t0) * G;
  const bool vnni = Tiles<CT>::vnni;
  std::vector<CT> a(R * De, CT(0.0f)), p(R * kTile);
  std::vector<float> s(R * kTile), o(R * Dh, 0.0f), tmp(R * Dh), m(R, kNegInf), l(R, 0.0f), alpha(R);
  std::vector<int64_t> limit(R);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = t0 + r / G, h = kh * G + r % G;
    limit[r] = seg.p0 + (t - seg.t0);
    for (int64_t d = 0; d < Dh; ++d) a[r * De + d] = CT(q[(t * g.H + h) * Dh + d] * g.scale);
  }
  const int64_t last_tile = limit[R - 1] / kTile;
  const int64_t key_tile = De * kTile, value_tile = kTile * Dh;
  for (int64_t j = 0; j <= last_tile; ++j) {
    cb::brgemm(R, kTile, De, De, kTile, kTile, false, a.data(), keys + j * key_tile, s.data(), vnni);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t cols = std::min<int64_t>(kTile, limit[r] - j * kTile + 1);
      CT* pr = p.data() + r * kTile;
      if (cols <= 0) {  // the whole tile is after this row's position: weights 0, O unchanged
        std::fill(pr, pr + kTile, CT(0.0f));
        continue;
      }
      alpha[r] = softmax_row<CT>(s.data() + r * kTile, cols, m[r], l[r], pr);
    }
    cb::brgemm(R, Dh, kTile, kTile, Dh, Dh, false, p.data(), values + j * value_tile, tmp.data(), vnni);
    for (int64_t r = 0; r < R; ++r) {
      if (limit[r] < j * kTile) continue;
      float* orow = o.data() + r * Dh;
      const float* trow = tmp.data() + r * Dh;
      const Vec scale(alpha[r]);
      int64_t d = 0;
      for (; d + W <= Dh; d += W) (Vec::loadu(orow + d) * scale + Vec::loadu(trow + d)).store(orow + d);
      for (; d < Dh; ++d) orow[d] = orow[d] * alpha[r] + trow[d];
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = t0 + r / G, h = kh * G + r % G;
    for (int64_t d = 0; d < Dh; ++d) out[(t * g.H + h) * Dh + d] = o[r * Dh + d] / l[r];
  }
}

// `n` stored int8 rows -> n x Dh values of T, fp32 or bf16 (rounded to nearest even): each value
// times its row's scale.
template <typename T>
void dequantize_rows(const int8_t* src, int64_t n, int64_t Dh, T* dst) {
  constexpr int64_t W = Vec::size();
  for (int64_t c = 0; c < n; ++c) {
    const int8_t* row = src + c * (Dh + kInt8ScaleBytes);
    const float scale = int8_scale(row, Dh);
    T* out = dst + c * Dh;
    int64_t d = 0;
    if constexpr (std::is_same_v<T, at::BFloat16>) {
      for (; d + 2 * W <= Dh; d += 2 * W)
        at::vec::convert_from_float<at::BFloat16>(load(row + d) * Vec(scale), load(row + d + W) * Vec(scale)).store(out + d);
    } else {
      for (; d + W <= Dh; d += W) (load(row + d) * Vec(scale)).store(out + d);
    }
    for (; d < Dh; ++d) out[d] = T(static_cast<float>(row[d]) * scale);
  }
}

template <typename CT, typename KT>
void attention_matrix(const float* q, const KT* ck, const KT* cv, const int64_t* rows, const int64_t* pos,
                      float* out, int64_t N, const Geometry& g) {
  const std::vector<Segment> segs = segments_of(rows, pos, N);
  const int64_t K = g.K, Dh = g.Dh, De = even(Dh), key_tile = De * kTile, value_tile = kTile * Dh;
  // Pack every segment's keys and values tile by tile, per key/value head.
  std::vector<int64_t> tiles(segs.size()), offset(segs.size() + 1, 0);
  for (size_t i = 0; i < segs.size(); ++i) {
    const int64_t kv_len = segs[i].p0 + (segs[i].t1 - segs[i].t0);
    tiles[i] = (kv_len + kTile - 1) / kTile;
    offset[i + 1] = offset[i] + K * tiles[i];
  }
  std::vector<CT> keys(offset.back() * key_tile, CT(0.0f)), values(offset.back() * value_tile);
  at::parallel_for(0, offset.back(), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const size_t i = std::upper_bound(offset.begin(), offset.end(), t) - offset.begin() - 1;
      const int64_t kh = (t - offset[i]) / tiles[i], j = (t - offset[i]) % tiles[i];
      const int64_t kv_len = segs[i].p0 + (segs[i].t1 - segs[i].t0), valid = std::min(kTile, kv_len - j * kTile);
      const int64_t base = ((segs[i].row * K + kh) * g.max_len + j * kTile) * g.row;
      if constexpr (std::is_same_v<KT, int8_t>) {  // int8 rows: as the tiles' type, then packed as such
        std::vector<CT> k(valid * Dh), v(valid * Dh);
        dequantize_rows(ck + base, valid, Dh, k.data());
        dequantize_rows(cv + base, valid, Dh, v.data());
        Tiles<CT>::pack_keys(k.data(), valid, Dh, keys.data() + t * key_tile);
        Tiles<CT>::pack_values(v.data(), valid, Dh, values.data() + t * value_tile);
      } else {
        Tiles<CT>::pack_keys(ck + base, valid, Dh, keys.data() + t * key_tile);
        Tiles<CT>::pack_values(cv + base, valid, Dh, values.data() + t * value_tile);
      }
    }
  });
  struct Task { size_t seg; int64_t t0, t1, kh; };
  std::vector<Task> tasks;
  const int64_t per_task = std::max<int64_t>(1, kQueryRows / g.G);
  for (size_t i = 0; i < segs.size(); ++i)
    for (int64_t kh = 0; kh < K; ++kh)
      for (int64_t t = segs[i].t0; t < segs[i].t1; t += per_task) tasks.push_back({i, t, std::min(segs[i].t1, t + per_task), kh});
  at::parallel_for(0, tasks.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const Task& task = tasks[t];
      const int64_t first = offset[task.seg] + task.kh * tiles[task.seg];
      matrix_task<CT>(q, segs[task.seg], task.t0, task.t1, task.kh, keys.data() + first * key_tile,
                      values.data() + first * value_tile, out, g);
    }
    if constexpr (Tiles<CT>::vnni) cb::brgemm_release(true);
  });
}

template <typename KT>
void dispatch(const float* q, const at::Tensor& ck, const at::Tensor& cv, const int64_t* rows, const int64_t* pos,
              float* out, int64_t N, const Geometry& g, int64_t mode) {
  const KT* k = ck.data_ptr<KT>();
  const KT* v = cv.data_ptr<KT>();
  if (mode == kVector) attention_vector(q, k, v, rows, pos, out, N, g);
  else if (mode == kMatrixF32) attention_matrix<float>(q, k, v, rows, pos, out, N, g);
  else attention_matrix<at::BFloat16>(q, k, v, rows, pos, out, N, g);
}

}  // namespace

void attention(const at::Tensor& q_NHD, const at::Tensor& cache_k, const at::Tensor& cache_v,
               const at::Tensor& rows_N, const at::Tensor& pos_N, at::Tensor& out_NHD, int64_t mode) {
  TORCH_CHECK(q_NHD.scalar_type() == at::kFloat && q_NHD.is_contiguous() && q_NHD.dim() == 3, "attention: q (N, H, Dh) fp32");
  TORCH_CHECK(out_NHD.sizes() == q_NHD.sizes() && out_NHD.is_contiguous(), "attention: out like q");
  TORCH_CHECK(cache_k.is_contiguous() && cache_v.is_contiguous() && cache_k.dim() == 4, "attention: contiguous cache");
  TORCH_CHECK(cache_k.scalar_type() == cache_v.scalar_type(), "attention: keys and values of one dtype");
  TORCH_CHECK(mode != kMatrixBF16 || bf16_matrix_available(), "attention: no bf16 matrix unit here");
  const int64_t N = q_NHD.size(0), H = q_NHD.size(1), Dh = q_NHD.size(2), K = cache_k.size(1);
  const bool int8 = cache_k.scalar_type() == at::kChar;
  const int64_t row = int8 ? Dh + kInt8ScaleBytes : Dh;
  TORCH_CHECK(cache_k.size(3) == row && H % K == 0, "attention: head shapes");
  const at::Tensor rows = rows_N.to(at::kLong).contiguous(), pos = pos_N.to(at::kLong).contiguous();
  const int64_t* r = rows.data_ptr<int64_t>();
  const int64_t* p = pos.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    TORCH_CHECK(r[n] >= 0 && r[n] < cache_k.size(0) && p[n] >= 0 && p[n] < cache_k.size(2), "attention: row or position outside the cache");
  const Geometry g{H, K, H / K, Dh, cache_k.size(2), 1.0f / std::sqrt(static_cast<float>(Dh)), row};
  const float* q = q_NHD.data_ptr<float>();
  float* out = out_NHD.data_ptr<float>();
  if (cache_k.scalar_type() == at::kBFloat16) dispatch<at::BFloat16>(q, cache_k, cache_v, r, p, out, N, g, mode);
  else if (int8) dispatch<int8_t>(q, cache_k, cache_v, r, p, out, N, g, mode);
  else dispatch<float>(q, cache_k, cache_v, r, p, out, N, g, mode);
}

void quantize_kv_row(const float* x, int64_t Dh, int8_t* dst) {
  float amax = 0.0f;
  for (int64_t d = 0; d < Dh; ++d) amax = std::max(amax, std::fabs(x[d]));
  const float scale = amax / 127.0f;
  const float divisor = scale > 0.0f ? scale : 1.0f;  // an all-zero row stays zero
  for (int64_t d = 0; d < Dh; ++d)
    dst[d] = static_cast<int8_t>(std::clamp(std::nearbyint(x[d] / divisor), -127.0f, 127.0f));
  std::memcpy(dst + Dh, &scale, sizeof(scale));
}

at::Tensor rotary_store(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& rows_N,
                        const at::Tensor& pos_N, const at::Tensor& cache_k, const at::Tensor& cache_v, int64_t H) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.is_contiguous(), "rotary_store: (N, (H + 2K) Dh) fp32 qkv");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && cos.is_contiguous() && sin.sizes() == cos.sizes() && sin.is_contiguous(),
              "rotary_store: fp32 rotary tables (positions, Dh)");
  TORCH_CHECK(cache_k.is_contiguous() && cache_v.is_contiguous() && cache_k.dim() == 4 &&
                  cache_k.scalar_type() == cache_v.scalar_type(), "rotary_store: contiguous caches of one dtype");
  const int64_t N = qkv.size(0), K = cache_k.size(1), Dh = cos.size(1), R = H + K, half = Dh / 2;
  const int64_t max_len = cache_k.size(2);
  const auto kv_type = cache_k.scalar_type();
  const int64_t stored = kv_type == at::kChar ? Dh + kInt8ScaleBytes : Dh;  // a row's elements
  TORCH_CHECK(qkv.size(1) == (R + K) * Dh && cache_k.size(3) == stored, "rotary_store: head shapes");
  const at::Tensor rows = rows_N.to(at::kLong).contiguous(), pos = pos_N.to(at::kLong).contiguous();
  const int64_t* rw = rows.data_ptr<int64_t>();
  const int64_t* ps = pos.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    TORCH_CHECK(rw[n] >= 0 && rw[n] < cache_k.size(0) && ps[n] >= 0 && ps[n] < std::min(max_len, cos.size(0)),
                "rotary_store: row or position outside the cache");
  at::Tensor q = at::empty({N, H, Dh}, qkv.options());
  const float* qkv_data = qkv.data_ptr<float>();
  const float* cos_data = cos.data_ptr<float>();
  const float* sin_data = sin.data_ptr<float>();
  float* q_data = q.data_ptr<float>();
  void* keys = cache_k.data_ptr();
  void* values = cache_v.data_ptr();
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> rotated(R * Dh);
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t position = ps[n], row = rw[n];
      const float* src_row = qkv_data + n * (R + K) * Dh;
      const float* c = cos_data + position * Dh;
      const float* s = sin_data + position * Dh;
      for (int64_t r = 0; r < R; ++r) {
        const float* src = src_row + r * Dh;
        for (int64_t j = 0; j < Dh; ++j) {
          const float turned = j < half ? -src[j + half] : src[j - half];
          const float a = src[j] * c[j];
          const float b = turned * s[j];
          rotated[r * Dh + j] = a + b;
        }
      }
      std::copy(rotated.begin(), rotated.begin() + H * Dh, q_data + n * H * Dh);
      for (int64_t kh = 0; kh < K; ++kh) {
        const int64_t at = ((row * K + kh) * max_len + position) * stored;
        const float* key = rotated.data() + (H + kh) * Dh;
        const float* value = src_row + (R + kh) * Dh;
        if (kv_type == at::kChar) {
          quantize_kv_row(key, Dh, static_cast<int8_t*>(keys) + at);
          quantize_kv_row(value, Dh, static_cast<int8_t*>(values) + at);
        } else if (kv_type == at::kBFloat16) {
          std::transform(key, key + Dh, static_cast<at::BFloat16*>(keys) + at, [](float x) { return at::BFloat16(x); });
          std::transform(value, value + Dh, static_cast<at::BFloat16*>(values) + at, [](float x) { return at::BFloat16(x); });
        } else {
          std::copy(key, key + Dh, static_cast<float*>(keys) + at);
          std::copy(value, value + Dh, static_cast<float*>(values) + at);
        }
      }
    }
  });
  return q;
}

at::Tensor quantize_kv(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() >= 1, "quantize_kv: (..., Dh) fp32");
  const at::Tensor src = x.contiguous();
  const int64_t Dh = src.size(-1), rows = Dh ? src.numel() / Dh : 0;
  std::vector<int64_t> shape(src.sizes().begin(), src.sizes().end());
  shape.back() = Dh + kInt8ScaleBytes;
  at::Tensor out = at::empty(shape, src.options().dtype(at::kChar));
  const float* in = src.data_ptr<float>();
  int8_t* o = out.data_ptr<int8_t>();
  for (int64_t r = 0; r < rows; ++r) quantize_kv_row(in + r * Dh, Dh, o + r * (Dh + kInt8ScaleBytes));
  return out;
}

}  // namespace composer

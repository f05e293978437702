// Row-invariant CPU kernels for the engine: every output row's arithmetic is the same whatever
// the other rows of the call, so a token's logits do not depend on how it was batched or chunked
// (the property prefix reuse and batched decoding rest on; model/kernels.py explains).
//
// Legend: N rows (tokens), I input features, O output features, H query heads, K key/value
// heads, G = H / K query heads per key/value head, Dh head width, T cached positions.

#pragma once

#include <torch/extension.h>

namespace composer {

// Attention modes: how a call's tokens are computed.
constexpr int64_t kVector = 0;      // one query at a time, fp32 arithmetic (decoding)
constexpr int64_t kMatrixF32 = 1;   // brgemm tiles, fp32 (prefill of fp32 models; no bf16 unit)
constexpr int64_t kMatrixBF16 = 2;  // brgemm tiles, bf16 inputs, fp32 accumulation (AMX prefill)

// Whether oneDNN's bf16 batch-reduce GEMM runs on this CPU (AMX or AVX512-BF16).
bool bf16_matrix_available();

// How many threads this extension's parallel loops run on: torch's thread count when it is built
// with OpenMP (ATen's parallel_for is a header `#pragma omp parallel`), 1 when it is not.
int64_t parallel_width();

// (O, I) weights -> bf16 blocks of kBlockN outputs, each (I/2, n, 2): the VNNI layout of brgemm.
at::Tensor pack_vnni(const at::Tensor& w_OI);

// y (N, O) fp32 = x (N, I) fp32 @ w.T with pack_vnni's blocks (bf16 inputs, fp32 accumulation).
at::Tensor linear_vnni(const at::Tensor& x_NI, const at::Tensor& packed, int64_t out_features);

// A MoE layer's experts on prompt rows, routed: h (N, D) fp32, experts and weights (N, k) (the
// router's top k, fp32 weights). Each token's rows go to their experts, grouped stably by expert;
// expert e computes w2[e] @ (silu(gate) * up), [gate | up] = w13[e] @ x, with pack_vnni's blocks
// (bf16 inputs, fp32 accumulation, the SwiGLU rounded to bf16 once as linear_vnni would round
// it); a token's weighted outputs are summed in ascending expert order. -> (N, D) fp32, the bits
// of the runner's expert-by-expert path in one call instead of ~10 ATen ops an expert.
at::Tensor moe_vnni(const at::Tensor& h_ND, const at::Tensor& experts_Nk, const at::Tensor& weights_Nk,
                    const std::vector<at::Tensor>& w13, const std::vector<at::Tensor>& w2);

// y (N, O) fp32 = x (N, I) fp32 @ w.T with plain (O, I) weights, fp32 or bf16, fp32 arithmetic.
at::Tensor linear_rowdot(const at::Tensor& x_NI, const at::Tensor& w_OI);

// y (N, D) fp32 = x / sqrt(mean(x^2) + eps) * w per row, x (N, D) fp32, w (D) fp32: its squares
// summed in vector lanes in index order, then a fixed lane tree (torch's rms_norm costs ~18 us a
// call in the decode step's dispatch; this ~1).
at::Tensor rms_norm(const at::Tensor& x_ND, const at::Tensor& w_D, double eps);

// An int8 cache stores each key or value row as Dh int8 values and then their fp32 scale's 4
// bytes: the row is (values) * scale, scale = max|x| / 127, values rounded to nearest (even).
constexpr int64_t kInt8ScaleBytes = 4;

// One row of Dh fp32 values -> its Dh + kInt8ScaleBytes stored int8 bytes at dst.
void quantize_kv_row(const float* x, int64_t Dh, int8_t* dst);

// x (..., Dh) fp32 -> (..., Dh + kInt8ScaleBytes) int8, quantize_kv_row on each row.
at::Tensor quantize_kv(const at::Tensor& x);

// qkv (N, (H + 2K) Dh) fp32, each token's query, key and value heads: the rotary embedding on its
// query and key heads, as layers.apply_rotary (x * cos + rotate_half(x) * sin, each product
// rounded before the sum; cos and sin (positions, Dh) fp32 tables), the key and value stored at
// (rows[n], pos[n]) of the caches (fp32, bf16 or int8 rows, as the caches hold them). Returns
// the rotated queries (N, H, Dh) fp32.
at::Tensor rotary_store(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& rows_N,
                        const at::Tensor& pos_N, const at::Tensor& cache_k, const at::Tensor& cache_v, int64_t H);

// out (N, H, Dh) fp32: token n's queries q (N, H, Dh) fp32 (rotated) over positions
// [0, pos[n]] of row rows[n] of the cache (rows, K, max_len, Dh), fp32 or bf16, or (rows, K,
// max_len, Dh + kInt8ScaleBytes) int8. Matrix modes take runs of tokens of one row at consecutive
// positions (prefill chunks) together.
void attention(const at::Tensor& q_NHD, const at::Tensor& cache_k, const at::Tensor& cache_v,
               const at::Tensor& rows_N, const at::Tensor& pos_N, at::Tensor& out_NHD, int64_t mode);

}  // namespace composer

// One decoding step of one sequence through the whole int4 model, in C++.
//
// The eager path (model/transformer.py with model/quant.py's int4 modules) issues ~2,000 small
// ATen ops a token from Python at 10-15 us each. This file runs the same step as one call: the
// reductions and matmuls are the same ATen ops the Python path calls (so the logits are the same
// bits), and the pure elementwise work (rotary, residual adds, dtype conversions, cache writes,
// silu(gate) * up) is plain loops over a few hundred floats.
//
// Built on first use by model/fused_decode.py (torch.utils.cpp_extension.load); not a public API.
// Legend: D model width, H query heads, K key/value heads, Dh head width, T attended positions,
// F expert hidden width, E experts, k experts per token, V vocab.

#include <torch/extension.h>

#include <ATen/ops/_weight_int4pack_mm_for_cpu_cpu_dispatch.h>
#include <ATen/ops/_weight_int8pack_mm_cpu_dispatch.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <vector>

using at::Tensor;

namespace {

struct Int4Weight {
  Tensor packed, scales_and_zeros;  // model/quant.py Int4Linear's buffers
  int64_t group_size;
};

struct Layer {
  Tensor attn_norm, ffn_norm;  // (D)
  Int4Weight qkv, o;           // (H + 2K) Dh x D, D x H Dh
  Tensor router;               // (E, D) fp32
  std::vector<Int4Weight> w13, w2;  // per expert: 2F x D (gate rows, then up rows), D x F
  Tensor cache_k, cache_v;     // (rows, K, max_len, Dh): the engine's KVCache tensors
};

// fp32 (1, I) -> bf16 (1, I), round to nearest even: what Tensor.to(torch.bfloat16) does.
Tensor to_bf16(const float* x, int64_t n) {
  Tensor out = at::empty({1, n}, at::TensorOptions().dtype(at::kBFloat16));
  auto* dst = out.data_ptr<at::BFloat16>();
  for (int64_t i = 0; i < n; ++i) dst[i] = at::BFloat16(x[i]);
  return out;
}

// bf16 (1, O) -> fp32, written to dst (exact).
void from_bf16(const Tensor& x, float* dst) {
  const auto* src = x.data_ptr<at::BFloat16>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

class FusedDecoder {
 public:
  FusedDecoder(int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, int64_t top_k, double eps,
               Tensor embed, Tensor cos, Tensor sin, Tensor norm, Tensor head_q, Tensor head_scale)
      : H_(num_heads), K_(num_kv_heads), Dh_(head_dim), top_k_(top_k), eps_(eps),
        embed_(embed), cos_(cos), sin_(sin), norm_(norm), head_q_(head_q), head_scale_(head_scale) {
    TORCH_CHECK(embed.dtype() == at::kFloat && embed.is_contiguous(), "fp32 contiguous embedding expected");
    TORCH_CHECK(cos.is_contiguous() && sin.is_contiguous() && cos.size(1) == head_dim, "rotary tables");
    D_ = embed.size(1);
  }

  void add_layer(Tensor attn_norm, Tensor qkv_packed, Tensor qkv_sz, Tensor o_packed, Tensor o_sz,
                 Tensor ffn_norm, Tensor router, std::vector<Tensor> w13_packed, std::vector<Tensor> w13_sz,
                 std::vector<Tensor> w2_packed, std::vector<Tensor> w2_sz, int64_t group_size,
                 Tensor cache_k, Tensor cache_v) {
    TORCH_CHECK(cache_k.is_contiguous() && cache_v.is_contiguous() && cache_k.dtype() == at::kFloat,
                "fp32 contiguous KV cache expected");
    Layer l{attn_norm, ffn_norm, {qkv_packed, qkv_sz, group_size}, {o_packed, o_sz, group_size}, router,
            {}, {}, cache_k, cache_v};
    for (size_t e = 0; e < w13_packed.size(); ++e) {
      l.w13.push_back({w13_packed[e], w13_sz[e], group_size});
      l.w2.push_back({w2_packed[e], w2_sz[e], group_size});
    }
    layers_.push_back(std::move(l));
  }

  // Feeds `token` at position `pos` of cache row `row` (attending to positions [0, pos]) and
  // returns the logits, (1, V) fp32.
  Tensor step(int64_t token, int64_t pos, int64_t row) {
    c10::InferenceMode guard;
    TORCH_CHECK(token >= 0 && token < embed_.size(0), "token id out of range");
    TORCH_CHECK(pos >= 0 && pos < cos_.size(0), "position exceeds the rotary table");
    Tensor x = embed_.narrow(0, token, 1).clone();  // (1, D) residual stream
    for (auto& layer : layers_) {
      TORCH_CHECK(pos < layer.cache_k.size(2) && row >= 0 && row < layer.cache_k.size(0),
                  "position or row outside the cache");
      attention(layer, x, pos, row);
      moe(layer, x);
    }
    auto t = clock();
    Tensor h = at::rms_norm(x, {D_}, norm_, eps_);
    Tensor logits = at::cpu::_weight_int8pack_mm(to_bf16(h.data_ptr<float>(), D_), head_q_, head_scale_);
    Tensor out = logits.to(at::kFloat);
    lap(kHead, t);
    return out;
  }

  // Seconds spent per part since the last call (only while profiling is on).
  std::map<std::string, double> take_profile() {
    static const char* names[kParts] = {"norm", "int4_mm", "rotary_cache", "attention", "router",
                                        "expert_glue", "head"};
    std::map<std::string, double> out;
    for (int i = 0; i < kParts; ++i) {
      out[names[i]] = prof_[i];
      prof_[i] = 0;
    }
    return out;
  }
  void set_profiling(bool on) { profiling_ = on; }

 private:
  enum Part { kNorm, kInt4, kRotary, kAttention, kRouter, kGlue, kHead, kParts };
  using Clock = std::chrono::steady_clock;
  Clock::time_point clock() const { return profiling_ ? Clock::now() : Clock::time_point(); }
  void lap(Part part, Clock::time_point& since) {
    if (!profiling_) return;
    auto now = Clock::now();
    prof_[part] += std::chrono::duration<double>(now - since).count();
    since = now;
  }

  // (1, I) bf16 activations times an int4 matrix -> (1, O) bf16: Int4Linear.forward for one row.
  Tensor int4_mm(const Tensor& x_bf16, const Int4Weight& w) {
    return at::cpu::_weight_int4pack_mm_for_cpu(x_bf16, w.packed, w.group_size, w.scales_and_zeros);
  }

  void attention(Layer& l, Tensor& x, int64_t pos, int64_t row) {
    auto t = clock();
    Tensor h = at::rms_norm(x, {D_}, l.attn_norm, eps_);  // (1, D)
    lap(kNorm, t);
    Tensor qkv = int4_mm(to_bf16(h.data_ptr<float>(), D_), l.qkv);  // (1, (H + 2K) Dh) bf16
    lap(kInt4, t);
    const int64_t R = H_ + K_, half = Dh_ / 2;
    std::vector<float> qkv32(qkv.numel());
    from_bf16(qkv, qkv32.data());
    // Rotary on the H + K query and key heads, as layers.apply_rotary: x * cos + rotate_half(x) * sin,
    // each product rounded before the sum (no fused multiply-add: -ffp-contract=off).
    Tensor qk = at::empty({1, 1, R, Dh_}, x.options());  // (B, S, H + K, Dh)
    float* dst = qk.data_ptr<float>();
    const float* c = cos_.data_ptr<float>() + pos * Dh_;
    const float* s = sin_.data_ptr<float>() + pos * Dh_;
    for (int64_t r = 0; r < R; ++r) {
      const float* src = qkv32.data() + r * Dh_;
      for (int64_t j = 0; j < Dh_; ++j) {
        float rotated = j < half ? -src[j + half] : src[j - half];
        float a = src[j] * c[j];
        float b = rotated * s[j];
        dst[r * Dh_ + j] = a + b;
      }
    }
    // Keys and values into the cache at `pos`: cache[row, kh, pos, :].
    const int64_t max_len = l.cache_k.size(2);
    float* ck = l.cache_k.data_ptr<float>() + row * K_ * max_len * Dh_;
    float* cv = l.cache_v.data_ptr<float>() + row * K_ * max_len * Dh_;
    for (int64_t kh = 0; kh < K_; ++kh) {
      std::memcpy(ck + (kh * max_len + pos) * Dh_, dst + (H_ + kh) * Dh_, Dh_ * sizeof(float));
      std::memcpy(cv + (kh * max_len + pos) * Dh_, qkv32.data() + (R + kh) * Dh_, Dh_ * sizeof(float));
    }
    lap(kRotary, t);
    // The same views the eager path hands to SDPA: q (1, H, 1, Dh), keys/values (1, K, T, Dh).
    Tensor q = qk.narrow(2, 0, H_).transpose(1, 2);
    Tensor keys = l.cache_k.narrow(0, row, 1).narrow(2, 0, pos + 1);
    Tensor values = l.cache_v.narrow(0, row, 1).narrow(2, 0, pos + 1);
    Tensor out = at::scaled_dot_product_attention(q, keys, values, {}, 0.0, false, std::nullopt, true);
    Tensor out_flat = out.transpose(1, 2).reshape({1, H_ * Dh_}).contiguous();  // (1, H Dh)
    lap(kAttention, t);
    Tensor o = int4_mm(to_bf16(out_flat.data_ptr<float>(), H_ * Dh_), l.o);  // (1, D) bf16
    lap(kInt4, t);
    float* xs = x.data_ptr<float>();
    const auto* os = o.data_ptr<at::BFloat16>();
    for (int64_t i = 0; i < D_; ++i) xs[i] = xs[i] + static_cast<float>(os[i]);
    lap(kGlue, t);
  }

  void moe(Layer& l, Tensor& x) {
    auto t = clock();
    Tensor h = at::rms_norm(x, {D_}, l.ffn_norm, eps_);  // (1, D)
    lap(kNorm, t);
    const int64_t E = l.w13.size();
    // Routing as model/moe.py Router: fp32 softmax over all experts, top k, renormalised. The
    // chosen experts then run in ascending order (MoE._one_token's grouped layout).
    std::vector<int64_t> chosen{0};
    Tensor weights;  // (1, k) fp32, in ascending expert order
    if (E > 1) {
      Tensor probs = at::softmax(at::linear(h, l.router), -1);  // (1, E)
      auto [top_w, top_e] = at::topk(probs, top_k_, -1);     // (1, k) each
      const float* tw = top_w.data_ptr<float>();
      const int64_t* te = top_e.data_ptr<int64_t>();
      // weights / weights.sum(-1): a sum of one or two is the same in any order; more use ATen's.
      float total = top_k_ == 1 ? tw[0] : top_k_ == 2 ? tw[0] + tw[1] : top_w.sum(-1, true).item<float>();
      std::vector<int64_t> order(top_k_);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return te[a] < te[b]; });
      weights = at::empty({1, top_k_}, x.options());
      chosen.resize(top_k_);
      for (int64_t i = 0; i < top_k_; ++i) {
        chosen[i] = te[order[i]];
        weights.data_ptr<float>()[i] = tw[order[i]] / total;
      }
    }
    lap(kRouter, t);
    const int64_t k = chosen.size();
    Tensor h_bf16 = to_bf16(h.data_ptr<float>(), D_);
    // Each chosen expert: gate_up (1, 2F) -> silu(gate) * up (1, F) -> w2 -> (1, D).
    std::vector<Tensor> gate_up(k);
    for (int64_t i = 0; i < k; ++i) gate_up[i] = int4_mm(h_bf16, l.w13[chosen[i]]);
    lap(kInt4, t);
    const int64_t F2 = gate_up[0].size(1), Fh = F2 / 2;
    Tensor gu = at::empty({k, F2}, x.options());  // (k, 2F) fp32, as QuantizedExperts' `out`
    for (int64_t i = 0; i < k; ++i) from_bf16(gate_up[i], gu.data_ptr<float>() + i * F2);
    Tensor act = at::silu(gu.narrow(1, 0, Fh)).contiguous();  // (k, F): F.silu's vectorised kernel
    std::vector<float> hidden(Fh);
    Tensor y = at::empty({k, D_}, x.options());  // (k, D)
    lap(kGlue, t);
    for (int64_t i = 0; i < k; ++i) {
      const float* a = act.data_ptr<float>() + i * Fh;
      const float* up = gu.data_ptr<float>() + i * F2 + Fh;
      for (int64_t j = 0; j < Fh; ++j) hidden[j] = a[j] * up[j];
      Tensor yi = int4_mm(to_bf16(hidden.data(), Fh), l.w2[chosen[i]]);  // (1, D) bf16
      from_bf16(yi, y.data_ptr<float>() + i * D_);
    }
    lap(kInt4, t);
    // Weighted sum of the experts' rows: the same (1, k) @ (k, D) matmul as MoE._one_token.
    Tensor moe_out = E > 1 ? at::mm(weights, y) : y;
    float* xs = x.data_ptr<float>();
    const float* ms = moe_out.data_ptr<float>();
    for (int64_t i = 0; i < D_; ++i) xs[i] = xs[i] + ms[i];
    lap(kGlue, t);
  }

  int64_t H_, K_, Dh_, top_k_, D_;
  double eps_;
  Tensor embed_, cos_, sin_, norm_, head_q_, head_scale_;
  std::vector<Layer> layers_;
  bool profiling_ = false;
  double prof_[kParts] = {};
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<FusedDecoder>(m, "FusedDecoder")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, double, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>())
      .def("add_layer", &FusedDecoder::add_layer)
      .def("step", &FusedDecoder::step, py::call_guard<py::gil_scoped_release>())
      .def("set_profiling", &FusedDecoder::set_profiling)
      .def("take_profile", &FusedDecoder::take_profile);
}

// One decoding step of B sequences through the whole int4 model, in C++: model/runner.py's
// DECODE role, op for op.
//
// The Python path issues ~2,000 small ATen ops a token at 10-15 us each. This file runs the same
// step as one call: the reductions and matmuls are the ATen ops (or kernels.h functions) the
// Python path calls, on tensors of the same shapes, so the logits are the same bits; the pure
// elementwise work (bf16 conversions, rotary, cache writes, residual adds, the expert-weighted
// sum) is plain loops that round exactly as those ops do (no fused multiply-add:
// -ffp-contract=off). Each sequence has its own cache row and position; attention reads
// positions [0, position] of its row only.
//
// Built by model/cpu_ext.py; driven by model/fused_decode.py. Not a public API.
// Legend: B sequences, D model width, H query heads, K key/value heads, Dh head width, E experts,
// k experts per token, F expert hidden width, V vocab, L layers.

#include <torch/extension.h>

#include <ATen/ops/_weight_int4pack_mm_for_cpu_cpu_dispatch.h>
#include <ATen/ops/_weight_int8pack_mm_cpu_dispatch.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "kernels.h"

using at::Tensor;

namespace {

struct Int4Weight {
  Tensor packed, scales_and_zeros;  // model/quant.py Int4Linear's buffers
  int64_t group_size;
  Tensor lora_down, lora_up;        // its adapter's residual, (r, I) and (O, r) fp32; empty if none
};

struct Layer {
  Tensor attn_norm, ffn_norm;       // (D)
  Int4Weight qkv, o;                // (H + 2K) Dh x D, D x H Dh
  Tensor router;                    // (E, D) fp32; undefined for a dense model
  std::vector<Int4Weight> w13, w2;  // per expert: 2F x D (gate rows, then up rows), D x F
  Tensor cache_k, cache_v;          // (rows, K, max_len, Dh) fp32 or bf16: the engine's KVCache
};

// fp32 rows -> bf16 (round to nearest even): what Tensor.to(torch.bfloat16) does.
Tensor to_bf16(const Tensor& x) {
  Tensor out = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
  const float* src = x.data_ptr<float>();
  auto* dst = out.data_ptr<at::BFloat16>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) dst[i] = at::BFloat16(src[i]);
  return out;
}

// bf16 -> fp32 (exact).
Tensor to_f32(const Tensor& x) {
  Tensor out = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  const auto* src = x.data_ptr<at::BFloat16>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) dst[i] = static_cast<float>(src[i]);
  return out;
}

void add_into(Tensor& x, const Tensor& y) {  // x += y, both (B, D) fp32 contiguous
  float* xs = x.data_ptr<float>();
  const float* ys = y.data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) xs[i] = xs[i] + ys[i];
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

  // Each int4 matrix as [packed, scales_and_zeros, lora_down, lora_up] (the last two empty when
  // it has no adapter): qkv, o_proj, then per expert w13 and w2.
  void add_layer(Tensor attn_norm, std::vector<Tensor> qkv, std::vector<Tensor> o, Tensor ffn_norm, Tensor router,
                 std::vector<std::vector<Tensor>> w13, std::vector<std::vector<Tensor>> w2, int64_t group_size,
                 Tensor cache_k, Tensor cache_v) {
    TORCH_CHECK(cache_k.is_contiguous() && cache_v.is_contiguous(), "contiguous KV cache expected");
    TORCH_CHECK(cache_k.dtype() == at::kFloat || cache_k.dtype() == at::kBFloat16 || cache_k.dtype() == at::kChar,
                "fp32, bf16 or int8 KV cache expected");
    auto weight = [group_size](const std::vector<Tensor>& parts) {
      TORCH_CHECK(parts.size() == 4, "an int4 matrix is [packed, scales_and_zeros, lora_down, lora_up]");
      return Int4Weight{parts[0], parts[1], group_size, parts[2], parts[3]};
    };
    Layer l{attn_norm, ffn_norm, weight(qkv), weight(o), router, {}, {}, cache_k, cache_v};
    for (size_t e = 0; e < w13.size(); ++e) {
      l.w13.push_back(weight(w13[e]));
      l.w2.push_back(weight(w2[e]));
    }
    layers_.push_back(std::move(l));
  }

  // Feeds tokens[b] at positions[b] of cache row rows[b], each attending to positions
  // [0, positions[b]] of its row. Returns the logits (B, V) fp32 and, when asked, the routed
  // experts (B, L, k) int64 (else an undefined tensor).
  std::tuple<Tensor, Tensor> step(Tensor tokens, Tensor rows, Tensor positions, bool routing) {
    c10::InferenceMode guard;
    const int64_t B = tokens.numel();
    TORCH_CHECK(rows.numel() == B && positions.numel() == B, "one row and position per token");
    tokens = tokens.to(at::kLong).contiguous();
    rows = rows.to(at::kLong).contiguous();
    positions = positions.to(at::kLong).contiguous();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t tok = tokens.data_ptr<int64_t>()[b], pos = positions.data_ptr<int64_t>()[b];
      TORCH_CHECK(tok >= 0 && tok < embed_.size(0), "token id out of range");
      TORCH_CHECK(pos >= 0 && pos < cos_.size(0), "position exceeds the rotary table");
    }
    Tensor x = embed_.index_select(0, tokens);  // (B, D) residual stream
    Tensor experts = routing ? at::empty({B, (int64_t)layers_.size(), top_k_}, tokens.options()) : Tensor();
    for (size_t i = 0; i < layers_.size(); ++i) {
      attention(layers_[i], x, rows, positions);
      moe(layers_[i], x, routing ? experts.select(1, i) : Tensor());
    }
    auto t = clock();
    Tensor h = composer::rms_norm(x, norm_, eps_);
    Tensor logits = to_f32(at::cpu::_weight_int8pack_mm(to_bf16(h), head_q_, head_scale_));
    lap(kHead, t);
    return {logits, experts};
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

  // (M, I) fp32 times an int4 matrix -> (M, O) fp32: Int4RoleLinear in the DECODE role, the
  // adapter's residual (fp32 row dots through its two factors) added when it has one.
  Tensor int4_mm(const Tensor& x, const Int4Weight& w) {
    Tensor out = to_f32(at::cpu::_weight_int4pack_mm_for_cpu(to_bf16(x), w.packed, w.group_size, w.scales_and_zeros));
    if (w.lora_down.numel() > 0) {
      Tensor residual = composer::linear_rowdot(composer::linear_rowdot(x, w.lora_down), w.lora_up);
      add_into(out, residual);
    }
    return out;
  }

  void attention(Layer& l, Tensor& x, const Tensor& rows, const Tensor& positions) {
    const int64_t B = x.size(0);
    auto t = clock();
    Tensor h = composer::rms_norm(x, l.attn_norm, eps_);  // (B, D)
    lap(kNorm, t);
    Tensor qkv = int4_mm(h, l.qkv);  // (B, (H + 2K) Dh)
    lap(kInt4, t);
    // Rotary on the query and key heads; keys and values into the cache at (row, position).
    Tensor q = composer::rotary_store(qkv, cos_, sin_, rows, positions, l.cache_k, l.cache_v, H_);
    lap(kRotary, t);
    Tensor out = at::empty_like(q);
    composer::attention(q, l.cache_k, l.cache_v, rows, positions, out, composer::kVector);
    lap(kAttention, t);
    Tensor o = int4_mm(out.view({B, H_ * Dh_}), l.o);  // (B, D)
    lap(kInt4, t);
    add_into(x, o);
    lap(kGlue, t);
  }

  void moe(Layer& l, Tensor& x, Tensor experts_out) {
    const int64_t B = x.size(0), E = l.w13.size();
    auto t = clock();
    Tensor h = composer::rms_norm(x, l.ffn_norm, eps_);  // (B, D)
    lap(kNorm, t);
    if (E == 1) {  // dense: the single expert's weight is exactly 1
      Tensor y = expert(l, 0, h, t);
      if (experts_out.defined()) experts_out.zero_();
      add_into(x, y);
      lap(kGlue, t);
      return;
    }
    // model/moe.route: fp32 softmax over all experts, the top k, renormalised.
    Tensor probs = at::softmax(composer::linear_rowdot(h, l.router), -1);  // (B, E)
    auto [top_w, top_e] = at::topk(probs, top_k_, -1);                     // (B, k) each
    Tensor weights = top_w / top_w.sum(-1, true);
    if (experts_out.defined()) experts_out.copy_(top_e);
    lap(kRouter, t);
    // Rows grouped by expert, stably (argsort of the flat (B k) expert ids), one matmul each.
    const int64_t* te = top_e.data_ptr<int64_t>();
    std::vector<int64_t> order;
    std::vector<int64_t> counts(E, 0);
    for (int64_t i = 0; i < B * top_k_; ++i) counts[te[i]]++;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < B * top_k_; ++i)
        if (te[i] == e) order.push_back(i);
    Tensor sum = at::zeros({B, D_}, x.options());
    float* acc = sum.data_ptr<float>();
    const float* w = weights.data_ptr<float>();
    int64_t start = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (counts[e] == 0) continue;
      Tensor idx = at::empty({counts[e]}, at::kLong);
      for (int64_t i = 0; i < counts[e]; ++i) idx.data_ptr<int64_t>()[i] = order[start + i] / top_k_;
      Tensor y = expert(l, e, h.index_select(0, idx), t);  // (count, D)
      lap(kInt4, t);
      // The weighted rows added into their tokens in ascending expert order: MoE's
      // `y * weight` then index_add_ into zeros.
      const float* ys = y.data_ptr<float>();
      for (int64_t i = 0; i < counts[e]; ++i) {
        const int64_t flat = order[start + i], token = flat / top_k_;
        const float wi = w[flat];
        for (int64_t d = 0; d < D_; ++d) {
          const float product = ys[i * D_ + d] * wi;
          acc[token * D_ + d] = acc[token * D_ + d] + product;
        }
      }
      start += counts[e];
    }
    add_into(x, sum);
    lap(kGlue, t);
  }

  // One expert's SwiGLU on its rows (M, D) -> (M, D), as runner._expert in the DECODE role.
  Tensor expert(Layer& l, int64_t e, const Tensor& rows, Clock::time_point& t) {
    Tensor gu = int4_mm(rows, l.w13[e]);  // (M, 2F)
    lap(kInt4, t);
    const int64_t Fh = gu.size(1) / 2;
    Tensor act = at::silu(gu.narrow(1, 0, Fh)) * gu.narrow(1, Fh, Fh);  // F.silu(gate) * up
    lap(kGlue, t);
    return int4_mm(act, l.w2[e]);
  }

  int64_t H_, K_, Dh_, top_k_, D_;
  double eps_;
  Tensor embed_, cos_, sin_, norm_, head_q_, head_scale_;
  std::vector<Layer> layers_;
  bool profiling_ = false;
  double prof_[kParts] = {};
};

}  // namespace

void bind_fused_decode(pybind11::module_& m) {
  py::class_<FusedDecoder>(m, "FusedDecoder")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, double, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>())
      .def("add_layer", &FusedDecoder::add_layer)
      .def("step", &FusedDecoder::step, py::call_guard<py::gil_scoped_release>())
      .def("set_profiling", &FusedDecoder::set_profiling)
      .def("take_profile", &FusedDecoder::take_profile);
}

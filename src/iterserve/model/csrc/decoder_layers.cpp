// The decoder layers of one packed forward in one call (model/llama.py's
// layer loop, op for op): the same kernels in the same order on the same
// tensors, so the same bits, without a Python round trip per op. A decode
// step of the small preset runs about a hundred ops a forward; between them
// the Python loop held the engine thread while torch's other thread waited.
//
// Eligible models only (PackedCausalLM._one_call_arguments): oneDNN-packed
// projections (with or without the q/k/v and o biases, with or without the
// per-head q/k norm), and every segment attended in place by this
// extension's paged_attention (with each layer's sliding window, 0 for none).
// Gemma's layer (model/gemma.py) fits too: its two extra norms (on the
// attention output and on the MLP output) come as `sandwich_norms`, its
// sliding layers may rotate with their own tables (`local_rope`), and its MLP
// is GeGLU (`gelu`); soft-capped attention does not fit (the kernel has none).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/rms_norm.h>
#include <torch/library.h>

#include <string>
#include <vector>

#ifndef ITERSERVE_OPS
#define ITERSERVE_OPS iterserve_kernels
#endif
#define ITERSERVE_TEXT(x) #x
#define ITERSERVE_NAME(x) ITERSERVE_TEXT(x)

namespace {

constexpr int64_t kWeightsPerLayer = 6;  // input norm, qkv, o, post-attention norm, gate_up, down

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(
      (std::string(ITERSERVE_NAME(ITERSERVE_OPS)) + "::" + name).c_str(), "");
}

// This build's own ops, and oneDNN's packed linear (model/projection.py), found once.
struct Ops {
  c10::TypedOperatorHandle<void(const at::Tensor&, const at::Tensor&, const at::Tensor&, double)>
      add_rms_norm = op("fused_add_rms_norm")
                         .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     double)>();
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)> silu_and_mul =
      op("silu_and_mul").typed<at::Tensor(const at::Tensor&)>();
  c10::TypedOperatorHandle<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)> rotary =
      op("rotary_in_place").typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  c10::TypedOperatorHandle<void(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, const at::Tensor&)>
      write_kv = op("write_kv").typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, const at::Tensor&)>();
  c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                      int64_t, double)>
      attention = op("paged_attention")
                      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        int64_t, double)>();
  c10::OperatorHandle linear =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
};

const Ops& ops() {
  static const Ops found;
  return found;
}

// torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "") (model/projection.py)
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias = std::nullopt) {
  torch::jit::Stack stack{x.contiguous(), weight,
                          bias.has_value() ? c10::IValue(*bias) : c10::IValue(),
                          std::string("none"), c10::List<std::optional<at::Scalar>>(),
                          std::string("")};
  ops().linear.callBoxed(&stack);
  return stack[0].toTensor();
}

// Returns the last layer's MLP output (not yet added); `residual` [W, hidden]
// (W >= num_rows: the bucketed rows of model/projection.py) is updated in place.
at::Tensor decoder_layers(const at::Tensor& residual, int64_t num_rows, at::TensorList weights,
                          const c10::List<std::optional<at::Tensor>>& biases,
                          const c10::List<std::optional<at::Tensor>>& qk_norms,
                          const c10::List<std::optional<at::Tensor>>& sandwich_norms,
                          at::IntArrayRef windows, at::IntArrayRef local_rope,
                          at::TensorList key_pools, at::TensorList value_pools,
                          const at::Tensor& slot_mapping, const at::Tensor& cos,
                          const at::Tensor& signed_sin, const std::optional<at::Tensor>& local_cos,
                          const std::optional<at::Tensor>& local_signed_sin,
                          const at::Tensor& block_tables,
                          const at::Tensor& offsets, const at::Tensor& context_lens,
                          int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps,
                          double softmax_scale, bool gelu) {
  const int64_t num_layers = static_cast<int64_t>(key_pools.size());
  TORCH_CHECK(num_layers > 0 && static_cast<int64_t>(value_pools.size()) == num_layers &&
                  static_cast<int64_t>(weights.size()) == kWeightsPerLayer * num_layers &&
                  static_cast<int64_t>(biases.size()) == 2 * num_layers &&
                  static_cast<int64_t>(qk_norms.size()) == 2 * num_layers &&
                  static_cast<int64_t>(sandwich_norms.size()) == 2 * num_layers &&
                  static_cast<int64_t>(windows.size()) == num_layers &&
                  static_cast<int64_t>(local_rope.size()) == num_layers,
              "decoder_layers: ", kWeightsPerLayer,
              " weights, two biases (qkv, o), two q/k norms, two sandwich norms, a window, a"
              " local-rope flag and a key and value pool a layer");
  TORCH_CHECK(local_cos.has_value() == local_signed_sin.has_value(),
              "decoder_layers: local_cos and local_signed_sin come together");
  const int64_t width = residual.size(0);
  TORCH_CHECK(residual.dim() == 2 && num_rows > 0 && num_rows <= width,
              "decoder_layers: residual [W, hidden] with 0 < num_rows <= W");
  const Ops& o = ops();
  at::Tensor update;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const at::Tensor* w = weights.data() + kWeightsPerLayer * layer;
    at::Tensor normed;
    if (layer == 0) {  // nothing to add yet
      normed = at::rms_norm(residual, {residual.size(1)}, w[0], eps);
    } else {
      o.add_rms_norm.call(update, residual, w[0], eps);
      normed = update;
    }
    // attention: QKV, RoPE on q and k in place, K/V into the pool, attend in place
    at::Tensor qkv = linear(normed, w[1], biases.get(2 * layer))
                         .view({width, num_heads + 2 * num_kv_heads, head_dim});
    qkv = qkv.narrow(0, 0, num_rows);
    at::Tensor rotated = qkv.narrow(1, 0, num_heads + num_kv_heads);
    const std::optional<at::Tensor> q_norm = qk_norms.get(2 * layer);
    const std::optional<at::Tensor> k_norm = qk_norms.get(2 * layer + 1);
    if (q_norm.has_value() && k_norm.has_value()) {  // Qwen3: each head RMS-normalised first
      rotated = at::cat({at::rms_norm(rotated.narrow(1, 0, num_heads), {head_dim}, *q_norm, eps),
                         at::rms_norm(rotated.narrow(1, num_heads, num_kv_heads), {head_dim},
                                      *k_norm, eps)},
                        1);
    }
    const bool is_local = local_rope[layer] != 0;
    TORCH_CHECK(!is_local || local_cos.has_value(), "decoder_layers: a local-rope layer needs "
                "local_cos and local_signed_sin");
    const at::Tensor& layer_cos = is_local ? *local_cos : cos;
    // partial rotary (tables narrower than a head): the leading dimensions only
    const int64_t rotary_dim = layer_cos.size(-1);
    o.rotary.call(rotary_dim == head_dim ? rotated : rotated.narrow(2, 0, rotary_dim), layer_cos,
                  is_local ? *local_signed_sin : signed_sin);
    at::Tensor query = rotated.narrow(1, 0, num_heads);
    o.write_kv.call(key_pools[layer], value_pools[layer], slot_mapping,
                    rotated.narrow(1, num_heads, num_kv_heads),
                    qkv.narrow(1, num_heads + num_kv_heads, num_kv_heads));
    if (query.stride(2) != 1) query = query.contiguous();
    at::Tensor attended = o.attention
                              .call(query, key_pools[layer], value_pools[layer], block_tables,
                                    offsets, context_lens, windows[layer], softmax_scale)
                              .view({num_rows, -1});
    if (width != num_rows) attended = at::constant_pad_nd(attended, {0, 0, 0, width - num_rows});
    at::Tensor projected = linear(attended, w[2], biases.get(2 * layer + 1));
    const std::optional<at::Tensor> attention_norm = sandwich_norms.get(2 * layer);
    const std::optional<at::Tensor> mlp_norm = sandwich_norms.get(2 * layer + 1);
    if (attention_norm.has_value()) {  // Gemma: the attention output normalised before the add
      projected = at::rms_norm(projected, {projected.size(1)}, *attention_norm, eps);
    }
    o.add_rms_norm.call(projected, residual, w[3], eps);
    at::Tensor gate_up = linear(projected, w[4]);
    if (gelu) {  // GeGLU: gelu_tanh(gate) * up, as model/variant_ops.gated
      const int64_t half = gate_up.size(1) / 2;
      update = linear(at::mul(at::gelu(gate_up.narrow(1, 0, half), "tanh"),
                              gate_up.narrow(1, half, half)),
                      w[5]);
    } else {  // SwiGLU
      update = linear(o.silu_and_mul.call(gate_up), w[5]);
    }
    if (mlp_norm.has_value()) {  // Gemma: the MLP output normalised before the add
      update = at::rms_norm(update, {update.size(1)}, *mlp_norm, eps);
    }
  }
  return update;
}

}  // namespace

// One kernel for every dispatch key: the weights are oneDNN (MkldnnCPU)
// tensors beside CPU ones, and the ops called inside dispatch on their own.
TORCH_LIBRARY_FRAGMENT(ITERSERVE_OPS, m) {
  m.def("decoder_layers(Tensor(a!) residual, int num_rows, Tensor[] weights, Tensor?[] biases, "
        "Tensor?[] qk_norms, Tensor?[] sandwich_norms, int[] windows, int[] local_rope, "
        "Tensor[] key_pools, Tensor[] value_pools, Tensor slot_mapping, "
        "Tensor cos, Tensor signed_sin, Tensor? local_cos, Tensor? local_signed_sin, "
        "Tensor block_tables, Tensor offsets, Tensor context_lens, int num_heads, "
        "int num_kv_heads, int head_dim, float eps, float softmax_scale, bool gelu) -> Tensor",
        &decoder_layers);
}

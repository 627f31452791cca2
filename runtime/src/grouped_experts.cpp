#include "moescope/runtime/grouped_experts.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "cpu_onednn_matmul.h"
#include "cuda_kernel_path.h"
#include "moescope/runtime/host_tensor_cache.h"

namespace moescope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Set once at::_grouped_mm has refused our operands (old GPU, build without it): from then on
// the loop path runs, with one warning instead of one failure per step.
std::atomic<bool> g_device_grouped_mm_broken{false};

void check_group_rows(int64_t total_rows, int64_t num_groups,
                      const std::vector<int64_t>& rows_per_group, const char* op) {
  TORCH_CHECK(static_cast<int64_t>(rows_per_group.size()) == num_groups, op, ": ",
              rows_per_group.size(), " group sizes given for ", num_groups, " groups");
  const int64_t sum = std::accumulate(rows_per_group.begin(), rows_per_group.end(), int64_t{0});
  TORCH_CHECK(sum == total_rows, op, ": group sizes add up to ", sum, " but there are ", total_rows,
              " rows");
}

bool aligned_for_grouped_mm(int64_t elements) {
  return elements % 8 == 0;
}

at::Tensor cumulative_group_ends(const std::vector<int64_t>& rows_per_group,
                                 const at::Device& device) {
  std::vector<int32_t> ends(rows_per_group.size());
  int64_t running = 0;
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    running += rows_per_group[g];
    ends[g] = static_cast<int32_t>(running);
  }
  return at::tensor(ends, at::TensorOptions().dtype(at::kInt)).to(device, /*non_blocking=*/true);
}

bool grouped_mm_operands_supported(const at::Tensor& a, const at::Tensor& b) {
  return a.is_cuda() && a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
         a.size(0) > 0 && aligned_for_grouped_mm(a.size(1)) && aligned_for_grouped_mm(b.size(-1)) &&
         !g_device_grouped_mm_broken.load();
}

// The cuBLAS grouped GEMM of moescope_kernels, for CUDA operands at::_grouped_mm does not take.
bool cublas_grouped_gemm_applies(const at::Tensor& a, const at::Tensor& b, bool use_fused_kernels) {
  return kernel_path::enabled_for(use_fused_kernels, a) && kernel_path::grouped_gemm_applies(a, b);
}

void disable_device_grouped_mm(const c10::Error& error) {
  g_device_grouped_mm_broken.store(true);
  TORCH_WARN_ONCE("moescope: at::_grouped_mm failed (", error.what_without_backtrace(),
                  "); the experts fall back to a loop of matmuls");
}

// Where grouped_mm's loop path puts its product: a fresh tensor, or (for the SwiGLU's own
// intermediates on the CPU) a block of the experts' HostTensorCache.
enum class OutputSource { kFresh, kExpertsCache };

// A tensor [sizes] like `like` that the SwiGLU keeps to itself (never returned to autograd as
// an output or gradient): on the CPU from the experts' cache, on the GPU from LibTorch's
// caching allocator.
at::Tensor experts_scratch(const at::Tensor& like, at::IntArrayRef sizes) {
  if (like.is_cpu()) return HostTensorCache::experts().empty(sizes, like.scalar_type());
  return at::empty(sizes, like.options());
}

at::Tensor grouped_mm_into(const at::Tensor& a, const at::Tensor& b,
                           const std::vector<int64_t>& rows_per_group, bool use_fused_kernels,
                           OutputSource output) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 3 && a.size(1) == b.size(1), "grouped_mm: expected a ",
              "[R, K] and b [G, K, N], got a ", a.sizes(), " and b ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "grouped_mm: a is ", a.scalar_type(),
              " but b is ", b.scalar_type());
  check_group_rows(a.size(0), b.size(0), rows_per_group, "grouped_mm");
  if (grouped_mm_operands_supported(a, b)) {
    try {
      return at::_grouped_mm(a.contiguous(), b, cumulative_group_ends(rows_per_group, a.device()));
    } catch (const c10::Error& error) {
      disable_device_grouped_mm(error);
    }
  }
  if (cublas_grouped_gemm_applies(a, b, use_fused_kernels)) {
    return kernel_path::grouped_gemm(a, b, rows_per_group);
  }
  at::Tensor out = output == OutputSource::kExpertsCache
                       ? experts_scratch(a, {a.size(0), b.size(2)})
                       : at::empty({a.size(0), b.size(2)}, a.options());
  int64_t start = 0;
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    const int64_t count = rows_per_group[g];
    if (count > 0) {
      at::Tensor out_rows = out.narrow(0, start, count);
      cpu_matmul::mm_out_preferring_onednn(out_rows, a.narrow(0, start, count),
                                           b.select(0, static_cast<int64_t>(g)));
    }
    start += count;
  }
  return out;
}

struct GroupedSwiGLUFunction : public torch::autograd::Function<GroupedSwiGLUFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& w_gate_up, const at::Tensor& w_down,
                            const std::vector<int64_t>& rows_per_expert,
                            GroupedSwiGLUOptions options) {
    at::Tensor gate_up =
        grouped_mm_into(rows, w_gate_up, rows_per_expert, options.use_fused_kernels,
                        OutputSource::kExpertsCache);  // [R, 2F]
    const int64_t ffn = w_down.size(1);
    at::Tensor silu_gate = experts_scratch(gate_up, {gate_up.size(0), ffn});   // [R, F]
    at::Tensor activation = experts_scratch(gate_up, {gate_up.size(0), ffn});  // [R, F]
    at::silu_out(silu_gate, gate_up.narrow(1, 0, ffn));
    at::mul_out(activation, silu_gate, gate_up.narrow(1, ffn, ffn));
    at::Tensor out = grouped_mm(activation, w_down, rows_per_expert, options.use_fused_kernels);
    if (options.recompute_activation) {
      ctx->save_for_backward({rows, w_gate_up, w_down, gate_up});
    } else {
      ctx->save_for_backward({rows, w_gate_up, w_down, gate_up, silu_gate, activation});
    }
    ctx->saved_data["rows_per_expert"] = rows_per_expert;
    ctx->saved_data["use_fused_kernels"] = options.use_fused_kernels;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const at::Tensor& w_gate_up = saved[1];
    const at::Tensor& w_down = saved[2];
    const at::Tensor& gate_up = saved[3];
    const std::vector<int64_t> rows_per_expert = ctx->saved_data["rows_per_expert"].toIntVector();
    const bool use_fused_kernels = ctx->saved_data["use_fused_kernels"].toBool();
    const at::Tensor grad_out = grad_outputs[0].contiguous();
    const int64_t ffn = w_down.size(1);

    // Fused ATen ops (silu, silu_backward) do their math in fp32 per element and write the
    // input dtype, so no [R, F] tensor is converted: a chain of fp32 temporaries was the slowest
    // part of a bf16 step on CPU.
    const at::Tensor gate = gate_up.narrow(1, 0, ffn);
    const at::Tensor up = gate_up.narrow(1, ffn, ffn);
    const bool recomputed = saved.size() == 4;  // forward kept only rows, weights and gate_up
    const at::Tensor silu_gate = recomputed ? at::silu(gate) : saved[4];
    const at::Tensor activation = recomputed ? silu_gate * up : saved[5];

    // down projection
    at::Tensor grad_activation = grouped_mm_into(grad_out, w_down.transpose(1, 2), rows_per_expert,
                                                 use_fused_kernels, OutputSource::kExpertsCache);
    at::Tensor grad_w_down;
    if (ctx->needs_input_grad(2)) {
      grad_w_down =
          grouped_mm_weight_grad(activation, grad_out, rows_per_expert, use_fused_kernels);
    }
    // SwiGLU: d/dgate = grad * up * silu'(gate), d/dup = grad * silu(gate); written straight
    // into the two halves of one [R, 2F] gradient. grad_activation is ours (a matmul output
    // nothing else holds), so grad * up overwrites it instead of taking another [R, F] tensor.
    at::Tensor grad_gate_up = experts_scratch(gate_up, gate_up.sizes());
    at::Tensor grad_gate = grad_gate_up.narrow(1, 0, ffn);
    at::Tensor grad_up = grad_gate_up.narrow(1, ffn, ffn);
    at::mul_out(grad_up, grad_activation, silu_gate);
    at::silu_backward_out(grad_gate, grad_activation.mul_(up), gate);
    // gate/up projection
    at::Tensor grad_rows;
    if (ctx->needs_input_grad(0)) {
      grad_rows =
          grouped_mm(grad_gate_up, w_gate_up.transpose(1, 2), rows_per_expert, use_fused_kernels);
    }
    at::Tensor grad_w_gate_up;
    if (ctx->needs_input_grad(1)) {
      grad_w_gate_up =
          grouped_mm_weight_grad(rows, grad_gate_up, rows_per_expert, use_fused_kernels);
    }
    return {grad_rows, grad_w_gate_up, grad_w_down, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool uses_device_grouped_mm(const at::Tensor& a, const at::Tensor& b) {
  return grouped_mm_operands_supported(a, b);
}

const char* grouped_mm_implementation(const at::Tensor& a, const at::Tensor& b,
                                      bool use_fused_kernels) {
  if (grouped_mm_operands_supported(a, b)) return "at::_grouped_mm";
  if (cublas_grouped_gemm_applies(a, b, use_fused_kernels)) return "cuBLAS grouped GEMM";
  // Decided per group from its rows; named here for a group of the mean size.
  const int64_t mean_rows = std::max<int64_t>(1, a.size(0) / std::max<int64_t>(1, b.size(0)));
  const at::Tensor mean_group = a.narrow(0, 0, std::min(a.size(0), mean_rows));
  if (cpu_matmul::onednn_applies(mean_group, b.select(0, 0))) return "loop of oneDNN matmul";
  return "loop of at::mm";
}

at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b,
                      const std::vector<int64_t>& rows_per_group, bool use_fused_kernels) {
  return grouped_mm_into(a, b, rows_per_group, use_fused_kernels, OutputSource::kFresh);
}

at::Tensor grouped_mm_weight_grad(const at::Tensor& a, const at::Tensor& d,
                                  const std::vector<int64_t>& rows_per_group,
                                  bool use_fused_kernels) {
  TORCH_CHECK(a.dim() == 2 && d.dim() == 2 && a.size(0) == d.size(0),
              "grouped_mm_weight_grad: expected a [R, K] and d [R, N], got a ", a.sizes(),
              " and d ", d.sizes());
  const auto num_groups = static_cast<int64_t>(rows_per_group.size());
  check_group_rows(a.size(0), num_groups, rows_per_group, "grouped_mm_weight_grad");
  if (grouped_mm_operands_supported(a, d)) {
    try {
      at::Tensor out = at::_grouped_mm(a.contiguous().t(), d.contiguous(),
                                       cumulative_group_ends(rows_per_group, a.device()));
      // A group without rows has a zero gradient; do not rely on the kernel writing it.
      for (int64_t g = 0; g < num_groups; ++g) {
        if (rows_per_group[static_cast<size_t>(g)] == 0) out.select(0, g).zero_();
      }
      return out;
    } catch (const c10::Error& error) {
      disable_device_grouped_mm(error);
    }
  }
  if (kernel_path::enabled_for(use_fused_kernels, a) &&
      kernel_path::grouped_gemm_weight_grad_applies(a, d)) {
    return kernel_path::grouped_gemm_weight_grad(a, d, rows_per_group);
  }
  at::Tensor out = at::empty({num_groups, a.size(1), d.size(1)}, a.options());
  int64_t start = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t count = rows_per_group[static_cast<size_t>(g)];
    at::Tensor out_group = out.select(0, g);
    if (count > 0) {
      cpu_matmul::mm_out_preferring_onednn(out_group, a.narrow(0, start, count).t(),
                                           d.narrow(0, start, count));
    } else {
      out_group.zero_();
    }
    start += count;
  }
  return out;
}

at::Tensor grouped_swiglu(const at::Tensor& rows, const at::Tensor& w_gate_up,
                          const at::Tensor& w_down, const std::vector<int64_t>& rows_per_expert,
                          GroupedSwiGLUOptions options) {
  TORCH_CHECK(w_gate_up.dim() == 3 && w_down.dim() == 3 &&
                  w_gate_up.size(2) == 2 * w_down.size(1) && w_gate_up.size(0) == w_down.size(0) &&
                  w_gate_up.size(1) == w_down.size(2),
              "grouped_swiglu: expected w_gate_up [G, H, 2F] and w_down [G, F, H], got ",
              w_gate_up.sizes(), " and ", w_down.sizes());
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) == w_gate_up.size(1), "grouped_swiglu: rows ",
              rows.sizes(), " do not have the experts' hidden size ", w_gate_up.size(1));
  return GroupedSwiGLUFunction::apply(rows.contiguous(), w_gate_up, w_down, rows_per_expert,
                                      options);
}

at::Tensor swiglu_expert(const at::Tensor& x, const at::Tensor& w_gate_up,
                         const at::Tensor& w_down) {
  const at::Tensor gate_up = x.mm(w_gate_up);
  const int64_t ffn = w_down.size(0);
  return (at::silu(gate_up.narrow(1, 0, ffn)) * gate_up.narrow(1, ffn, ffn)).mm(w_down);
}

at::Tensor swiglu_experts_loop_oracle(const at::Tensor& hidden, const at::Tensor& top_k_indices,
                                      const at::Tensor& top_k_weights, const at::Tensor& keep_mask,
                                      const at::Tensor& w_gate_up, const at::Tensor& w_down) {
  const int64_t num_experts = w_gate_up.size(0);
  const int64_t top_k = top_k_indices.size(1);
  at::Tensor out = at::zeros_like(hidden);
  const at::Tensor flat_weights = top_k_weights.flatten();
  for (int64_t e = 0; e < num_experts; ++e) {
    at::Tensor chosen = top_k_indices == e;
    if (keep_mask.defined()) chosen = chosen.logical_and(keep_mask);
    const at::Tensor positions = chosen.nonzero();  // [n, 2]: token, slot
    if (positions.size(0) == 0) continue;
    const at::Tensor tokens = positions.select(1, 0);
    const at::Tensor slots = positions.select(1, 1);
    const at::Tensor expert_out =
        swiglu_expert(hidden.index_select(0, tokens), w_gate_up[e], w_down[e]);
    const at::Tensor weights = flat_weights.index_select(0, tokens * top_k + slots);
    out = out.index_add(0, tokens, expert_out * weights.to(hidden.scalar_type()).unsqueeze(1));
  }
  return out;
}

GroupedExpertsImpl::GroupedExpertsImpl(int64_t num_local_experts, int64_t hidden_size,
                                       int64_t ffn_hidden_size, double init_std) {
  TORCH_CHECK(num_local_experts > 0 && hidden_size > 0 && ffn_hidden_size > 0,
              "GroupedExperts: num_local_experts, hidden_size and ffn_hidden_size must be > 0");
  w_gate_up = register_parameter("w_gate_up",
                                 at::empty({num_local_experts, hidden_size, 2 * ffn_hidden_size}));
  w_down =
      register_parameter("w_down", at::empty({num_local_experts, ffn_hidden_size, hidden_size}));
  torch::nn::init::normal_(w_gate_up, 0.0, init_std);
  torch::nn::init::normal_(w_down, 0.0, init_std);
}

at::Tensor GroupedExpertsImpl::forward(const at::Tensor& rows,
                                       const std::vector<int64_t>& rows_per_expert) {
  return grouped_swiglu(rows, w_gate_up, w_down, rows_per_expert,
                        {use_fused_kernels, recompute_activation});
}

}  // namespace moescope::runtime

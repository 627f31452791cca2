// SwiGLU experts stored stacked, and the grouped matrix multiply that runs them all at once.
//
// Weights of the G local experts:
//   w_gate_up [G, H, 2F]   columns [0, F) are the gate projection, [F, 2F) the up projection
//   w_down    [G, F, H]
// Rows arrive expert-contiguous (see token_dispatcher.h): rows_per_expert[g] rows for expert g,
// one after another. expert(x) = (silu(x @ gate) * (x @ up)) @ down.
//
// grouped_mm / grouped_mm_weight_grad are the one place that picks a matmul implementation:
// on CUDA bf16 at::_grouped_mm (one launch, no host sync); with use_fused_kernels, CUDA operands
// at::_grouped_mm does not take (float32, or bf16 once it has failed) go to moescope_kernels'
// cuBLAS grouped GEMM (cublasGemmGroupedBatchedEx, float32 accumulation, no TF32) when it
// supports them; elsewhere a loop over contiguous segments: float32 CPU segments of at least
// 2^24 multiply-adds through oneDNN's matmul (see CpuFloat32Gemm), everything else through
// at::mm.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

#include "moescope/runtime/moe_config.h"

namespace moescope::runtime {

/// Which library runs the float32 CPU matmuls of grouped_mm / grouped_mm_weight_grad.
/// kOneDnn (the default): oneDNN's matmul, bundled with LibTorch, for segments of at least 2^24
/// multiply-adds (below that its per-call cost outweighs the gain); on CPUs where LibTorch's
/// MKL takes its generic code path (AMD) it is about twice as fast (docs/performance.md, "MoE
/// layer (CPU)"); used only where this LibTorch has it. kATen: at::mm, as the oracle and the rest
/// of LibTorch use. Process-wide, like torch.backends flags.
enum class CpuFloat32Gemm { kOneDnn, kATen };
void set_cpu_float32_gemm(CpuFloat32Gemm gemm);
CpuFloat32Gemm cpu_float32_gemm();

/// out[rows of group g] = a[rows of group g] @ b[g]. a [R, K], b [G, K, N] -> [R, N].
at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b,
                      const std::vector<int64_t>& rows_per_group, bool use_fused_kernels = false);

/// out[g] = a[rows of g]^T @ d[rows of g] (the weight gradient). a [R, K], d [R, N] ->
/// [G, K, N]; groups without rows get zeros.
at::Tensor grouped_mm_weight_grad(const at::Tensor& a, const at::Tensor& d,
                                  const std::vector<int64_t>& rows_per_group,
                                  bool use_fused_kernels = false);

/// True when grouped_mm would take the at::_grouped_mm path for these operands.
bool uses_device_grouped_mm(const at::Tensor& a, const at::Tensor& b);

/// The implementation grouped_mm picks for a [R > 0, K] and b [G, K, N]: "at::_grouped_mm",
/// "cuBLAS grouped GEMM", "loop of oneDNN matmul" or "loop of at::mm".
const char* grouped_mm_implementation(const at::Tensor& a, const at::Tensor& b,
                                      bool use_fused_kernels);

struct GroupedSwiGLUOptions {
  bool use_fused_kernels = false;  // see GroupedExpertsImpl::use_fused_kernels
  // Save only rows and the [R, 2F] pre-activation and recompute silu(gate) and the [R, F]
  // activation in backward: 2 * R * F fewer saved elements per layer for one silu and one
  // multiply more (about 7% of a CPU fp32 step at hidden 512, ffn 1024; docs/performance.md).
  bool recompute_activation = false;
};

/// All local experts on expert-contiguous rows [R, H] -> [R, H], as one custom autograd
/// Function that saves rows, the [R, 2F] pre-activation and (unless recomputed) silu(gate) and
/// the activation [R, F], and writes each expert's weight gradient directly (no per-expert
/// zero-filled [G, ...] copy).
at::Tensor grouped_swiglu(const at::Tensor& rows, const at::Tensor& w_gate_up,
                          const at::Tensor& w_down, const std::vector<int64_t>& rows_per_expert,
                          GroupedSwiGLUOptions options = {});

/// One expert with plain autograd ops: x [N, H], w_gate_up [H, 2F], w_down [F, H] -> [N, H].
at::Tensor swiglu_expert(const at::Tensor& x, const at::Tensor& w_gate_up,
                         const at::Tensor& w_down);

/// The oracle: a plain loop over experts with autograd ops, no permutation. For each expert it
/// finds its tokens, runs swiglu_expert on them and adds the weighted result back.
/// hidden [T, H], top_k_indices/top_k_weights [T, K], keep_mask [T, K] bool or undefined,
/// w_gate_up [E, H, 2F], w_down [E, F, H] -> [T, H].
at::Tensor swiglu_experts_loop_oracle(const at::Tensor& hidden, const at::Tensor& top_k_indices,
                                      const at::Tensor& top_k_weights, const at::Tensor& keep_mask,
                                      const at::Tensor& w_gate_up, const at::Tensor& w_down);

/// The local experts of one rank as a module.
class GroupedExpertsImpl : public torch::nn::Module {
 public:
  /// num_local_experts SwiGLU experts of width ffn_hidden_size, normal(0, init_std) weights.
  GroupedExpertsImpl(int64_t num_local_experts, int64_t hidden_size, int64_t ffn_hidden_size,
                     double init_std);

  /// rows [R, H] expert-contiguous -> [R, H].
  at::Tensor forward(const at::Tensor& rows, const std::vector<int64_t>& rows_per_expert);

  int64_t num_local_experts() const { return w_gate_up.size(0); }

  at::Tensor w_gate_up;  // [G, H, 2F]
  at::Tensor w_down;     // [G, F, H]
  // Lets grouped_mm use moescope_kernels' cuBLAS grouped GEMM (MoELayer sets it from
  // MoEConfig.use_fused_kernels).
  bool use_fused_kernels = false;
  // Recompute the activation in backward instead of saving it (MoELayer sets it from
  // MoEConfig.recompute_expert_activation).
  bool recompute_activation = false;
};
TORCH_MODULE(GroupedExperts);

}  // namespace moescope::runtime

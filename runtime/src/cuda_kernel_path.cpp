// The CUDA side of the fused kernel path (cuda_kernel_path.h): shape checks and one launcher
// per op, or, built without the kernels, queries that say no. The host side every build shares
// is kernel_path_host_side.cpp.
#include "cuda_kernel_path.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <exception>
#include <initializer_list>
#include <limits>

#include "moescope/kernels/launchers.h"  // the supports_* queries exist in every build

#if defined(MOESCOPE_RUNTIME_FUSED_KERNELS)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace moescope::runtime::kernel_path {

#if defined(MOESCOPE_RUNTIME_FUSED_KERNELS)
namespace {

constexpr int64_t kAnySize = -1;

bool is_kernel_dtype(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kBFloat16;
}

kernels::DType kernel_dtype(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32;
}

/// `tensor` must be a defined, contiguous CUDA tensor of `dtype` whose sizes match `sizes`
/// (kAnySize matches anything); the error names the op and the tensor.
void require(const at::Tensor& tensor, const char* op, const char* name, at::ScalarType dtype,
             std::initializer_list<int64_t> sizes) {
  TORCH_CHECK(tensor.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(tensor.is_cuda(), op, ": ", name, " must be a CUDA tensor, got ", tensor.device());
  TORCH_CHECK(tensor.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ",
              tensor.scalar_type());
  TORCH_CHECK(tensor.is_contiguous(), op, ": ", name, " must be contiguous");
  bool sizes_match = tensor.dim() == static_cast<int64_t>(sizes.size());
  int64_t dim = 0;
  for (const int64_t size : sizes) {
    if (!sizes_match) break;
    sizes_match = size == kAnySize || tensor.size(dim) == size;
    ++dim;
  }
  TORCH_CHECK(sizes_match, op, ": ", name, " has shape ", tensor.sizes(), ", expected ",
              at::IntArrayRef(sizes), " (-1 = any)");
}

void require_rows(const at::Tensor& tensor, const char* op, const char* name, at::ScalarType dtype,
                  int64_t rows, int64_t hidden) {
  TORCH_CHECK(is_kernel_dtype(dtype), op, ": ", name, " must be float32 or bfloat16, got ", dtype);
  require(tensor, op, name, dtype, {rows, hidden});
}

cudaStream_t current_stream(const at::Tensor& tensor) {
  return at::cuda::getCurrentCUDAStream(tensor.device().index()).stream();
}

/// Runs one launcher; its std::invalid_argument / std::runtime_error becomes a c10::Error.
template <typename Launch>
void run_launcher(const char* launcher, Launch&& launch) {
  try {
    launch();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "moescope fused kernel path: ", launcher, " failed: ", error.what());
  }
}

/// b [G, K, N] as the launcher reads it: contiguous, or the transpose of a contiguous
/// [G, N, K] (nn.Linear layout, b_is_n_by_k). False for any other stride pattern.
bool grouped_gemm_b_layout(const at::Tensor& b, bool* b_is_n_by_k) {
  if (b.is_contiguous()) {
    *b_is_n_by_k = false;
    return true;
  }
  if (b.transpose(1, 2).is_contiguous()) {
    *b_is_n_by_k = true;
    return true;
  }
  return false;
}

/// What both grouped GEMMs ask of a [M, K] and `other` (b [G, K, N] or d [M, N], of rank
/// `other_dim`): CUDA tensors on one device in one kernel dtype, `a` non-empty and contiguous
/// with rows an int32 offset reaches, and the launcher's limits on K, N and alignment.
bool grouped_gemm_operands_fit(const at::Tensor& a, const at::Tensor& other, int64_t other_dim) {
  if (!a.is_cuda() || !other.is_cuda() || a.device() != other.device() || a.dim() != 2 ||
      other.dim() != other_dim || a.scalar_type() != other.scalar_type() ||
      !is_kernel_dtype(a.scalar_type()) || a.size(0) == 0 ||
      a.size(0) > std::numeric_limits<int32_t>::max() || !a.is_contiguous()) {
    return false;
  }
  // The output is a fresh caching-allocator block (512-byte aligned): nullptr stands for it.
  return kernels::supports_grouped_gemm(kernel_dtype(a.scalar_type()), a.size(1), other.size(-1),
                                        a.data_ptr(), other.data_ptr(), nullptr);
}

std::vector<int32_t> host_group_offsets(const std::vector<int64_t>& rows_per_group,
                                        int64_t total_rows, const char* op) {
  std::vector<int32_t> offsets(rows_per_group.size() + 1, 0);
  int64_t running = 0;
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    running += rows_per_group[g];
    TORCH_CHECK(rows_per_group[g] >= 0 && running <= std::numeric_limits<int32_t>::max(), op,
                ": group sizes must be >= 0 and add up to < 2^31 rows");
    offsets[g + 1] = static_cast<int32_t>(running);
  }
  TORCH_CHECK(running == total_rows, op, ": group sizes add up to ", running, " but there are ",
              total_rows, " rows");
  return offsets;
}

}  // namespace

bool built() {
  return kernels::cuda_kernels_built();
}

bool enabled_for(bool use_fused_kernels, const at::Tensor& tensor) {
  return use_fused_kernels && built() && tensor.defined() && tensor.is_cuda();
}

// ---- router ------------------------------------------------------------------------------------

bool router_applies(const kernels::RouterConfig& config, const at::Tensor& logits) {
  return logits.is_cuda() && logits.scalar_type() == at::kFloat && logits.dim() == 2 &&
         logits.size(1) == config.num_experts && logits.size(0) > 0 &&
         logits.size(0) <= std::numeric_limits<int32_t>::max() && kernels::supports_router(config);
}

FusedRouterOutputs router_forward(const at::Tensor& logits, const at::Tensor& expert_bias,
                                  const kernels::RouterConfig& config) {
  constexpr const char* kOp = "kernel_path::router_forward";
  const int64_t num_experts = config.num_experts;
  require(logits, kOp, "logits", at::kFloat, {kAnySize, num_experts});
  if (expert_bias.defined()) require(expert_bias, kOp, "expert_bias", at::kFloat, {num_experts});
  const c10::cuda::CUDAGuard device_guard(logits.device());
  const int64_t num_tokens = logits.size(0);
  FusedRouterOutputs out;
  out.scores = at::empty({num_tokens, num_experts}, logits.options());
  out.top_k_ids = at::empty({num_tokens, config.top_k}, logits.options().dtype(at::kInt));
  out.top_k_weights = at::empty({num_tokens, config.top_k}, logits.options());
  out.selections_per_expert = at::empty({num_experts}, logits.options().dtype(at::kInt));
  run_launcher("launch_router_forward", [&] {
    kernels::launch_router_forward(
        logits.data_ptr<float>(), expert_bias.defined() ? expert_bias.data_ptr<float>() : nullptr,
        num_tokens, config, out.scores.data_ptr<float>(), out.top_k_ids.data_ptr<int32_t>(),
        out.top_k_weights.data_ptr<float>(), out.selections_per_expert.data_ptr<int32_t>(),
        current_stream(logits));
  });
  return out;
}

at::Tensor router_backward(const at::Tensor& scores, const at::Tensor& top_k_ids,
                           const at::Tensor& grad_top_k_weights, const at::Tensor& grad_scores,
                           const kernels::RouterConfig& config) {
  constexpr const char* kOp = "kernel_path::router_backward";
  const int64_t num_experts = config.num_experts;
  require(scores, kOp, "scores", at::kFloat, {kAnySize, num_experts});
  const int64_t num_tokens = scores.size(0);
  require(top_k_ids, kOp, "top_k_ids", at::kInt, {num_tokens, config.top_k});
  require(grad_top_k_weights, kOp, "grad_top_k_weights", at::kFloat, {num_tokens, config.top_k});
  if (grad_scores.defined()) {
    require(grad_scores, kOp, "grad_scores", at::kFloat, {num_tokens, num_experts});
  }
  const c10::cuda::CUDAGuard device_guard(scores.device());
  at::Tensor grad_logits = at::empty({num_tokens, num_experts}, scores.options());
  run_launcher("launch_router_backward", [&] {
    kernels::launch_router_backward(scores.data_ptr<float>(), top_k_ids.data_ptr<int32_t>(),
                                    grad_top_k_weights.data_ptr<float>(),
                                    grad_scores.defined() ? grad_scores.data_ptr<float>() : nullptr,
                                    num_tokens, config, grad_logits.data_ptr<float>(),
                                    current_stream(scores));
  });
  return grad_logits;
}

// ---- routing map -------------------------------------------------------------------------------

bool routing_map_applies(int64_t num_assignments, int64_t num_experts) {
  return num_assignments > 0 && num_experts <= std::numeric_limits<int>::max() &&
         kernels::supports_routing_map(num_assignments, static_cast<int>(num_experts),
                                       /*row_alignment=*/1);
}

FusedRoutingMap build_routing_map(const at::Tensor& expert_ids, int64_t num_experts) {
  constexpr const char* kOp = "kernel_path::build_routing_map";
  require(expert_ids, kOp, "expert_ids", at::kInt, {kAnySize});
  const int64_t num_assignments = expert_ids.size(0);
  TORCH_CHECK(routing_map_applies(num_assignments, num_experts), kOp, ": ", num_assignments,
              " assignments over ", num_experts, " experts are outside the kernel's limits");
  const c10::cuda::CUDAGuard device_guard(expert_ids.device());
  const auto int_options = expert_ids.options();
  const std::size_t workspace_bytes =
      kernels::routing_map_workspace_bytes(num_assignments, static_cast<int>(num_experts));
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(workspace_bytes)}, int_options.dtype(at::kByte));
  const at::Tensor group_offsets = at::empty({num_experts + 1}, int_options);
  FusedRoutingMap map;
  map.tokens_per_expert = at::empty({num_experts}, int_options);
  map.destination_rows = at::empty({num_assignments}, int_options);
  map.row_sources = at::empty({num_assignments}, int_options);  // capacity N with alignment 1
  run_launcher("launch_build_routing_map", [&] {
    kernels::launch_build_routing_map(
        expert_ids.data_ptr<int32_t>(), num_assignments, static_cast<int>(num_experts),
        /*row_alignment=*/1, workspace.data_ptr(), workspace_bytes,
        map.tokens_per_expert.data_ptr<int32_t>(), group_offsets.data_ptr<int32_t>(),
        map.destination_rows.data_ptr<int32_t>(), map.row_sources.data_ptr<int32_t>(),
        num_assignments, current_stream(expert_ids));
  });
  return map;
}

// ---- permute / unpermute + combine ------------------------------------------------------------

bool rows_apply(const at::Tensor& like) {
  if (!like.is_cuda() || like.dim() != 2 || !is_kernel_dtype(like.scalar_type())) return false;
  const kernels::DType dtype = kernel_dtype(like.scalar_type());
  const int64_t hidden = like.size(1);
  // Alignment only picks vectorised or element-wise copies; nullptr asks about the sizes.
  return kernels::supports_permute(dtype, hidden, nullptr, nullptr) &&
         kernels::supports_unpermute_combine(dtype, hidden, nullptr, nullptr);
}

at::Tensor permute_tokens(const at::Tensor& tokens, const at::Tensor& row_sources, int64_t top_k,
                          at::Tensor out) {
  constexpr const char* kOp = "kernel_path::permute_tokens";
  TORCH_CHECK(tokens.dim() == 2, kOp, ": tokens must be [T, H], got ", tokens.sizes());
  const int64_t num_tokens = tokens.size(0), hidden = tokens.size(1);
  require_rows(tokens, kOp, "tokens", tokens.scalar_type(), num_tokens, hidden);
  require(row_sources, kOp, "row_sources", at::kInt, {kAnySize});
  const int64_t num_rows = row_sources.size(0);
  const c10::cuda::CUDAGuard device_guard(tokens.device());
  if (out.defined()) {
    require_rows(out, kOp, "out", tokens.scalar_type(), num_rows, hidden);
  } else {
    out = at::empty({num_rows, hidden}, tokens.options());
  }
  run_launcher("launch_permute_tokens", [&] {
    kernels::launch_permute_tokens(tokens.data_ptr(), kernel_dtype(tokens.scalar_type()),
                                   num_tokens, hidden, static_cast<int>(top_k),
                                   row_sources.data_ptr<int32_t>(), num_rows, out.data_ptr(),
                                   current_stream(tokens));
  });
  return out;
}

at::Tensor permute_tokens_backward(const at::Tensor& grad_rows, const at::Tensor& destination_rows,
                                   int64_t num_tokens, int64_t top_k) {
  constexpr const char* kOp = "kernel_path::permute_tokens_backward";
  TORCH_CHECK(grad_rows.dim() == 2, kOp, ": grad_rows must be [R, H], got ", grad_rows.sizes());
  const int64_t hidden = grad_rows.size(1);
  require_rows(grad_rows, kOp, "grad_rows", grad_rows.scalar_type(), grad_rows.size(0), hidden);
  require(destination_rows, kOp, "destination_rows", at::kInt, {num_tokens * top_k});
  const c10::cuda::CUDAGuard device_guard(grad_rows.device());
  at::Tensor grad_tokens = at::empty({num_tokens, hidden}, grad_rows.options());
  run_launcher("launch_permute_tokens_backward", [&] {
    kernels::launch_permute_tokens_backward(
        grad_rows.data_ptr(), kernel_dtype(grad_rows.scalar_type()), num_tokens, hidden,
        static_cast<int>(top_k), destination_rows.data_ptr<int32_t>(), grad_tokens.data_ptr(),
        current_stream(grad_rows));
  });
  return grad_tokens;
}

at::Tensor unpermute_combine(const at::Tensor& rows, const at::Tensor& top_k_weights,
                             const at::Tensor& destination_rows) {
  constexpr const char* kOp = "kernel_path::unpermute_combine";
  TORCH_CHECK(rows.dim() == 2, kOp, ": rows must be [R, H], got ", rows.sizes());
  const int64_t hidden = rows.size(1);
  require_rows(rows, kOp, "rows", rows.scalar_type(), rows.size(0), hidden);
  require(top_k_weights, kOp, "top_k_weights", at::kFloat, {kAnySize, kAnySize});
  const int64_t num_tokens = top_k_weights.size(0), top_k = top_k_weights.size(1);
  require(destination_rows, kOp, "destination_rows", at::kInt, {num_tokens * top_k});
  const c10::cuda::CUDAGuard device_guard(rows.device());
  at::Tensor output = at::empty({num_tokens, hidden}, rows.options());
  run_launcher("launch_unpermute_combine", [&] {
    kernels::launch_unpermute_combine(
        rows.data_ptr(), kernel_dtype(rows.scalar_type()), top_k_weights.data_ptr<float>(),
        destination_rows.data_ptr<int32_t>(), num_tokens, hidden, static_cast<int>(top_k),
        output.data_ptr(), current_stream(rows));
  });
  return output;
}

std::pair<at::Tensor, at::Tensor> unpermute_combine_backward(
    const at::Tensor& grad_output, const at::Tensor& rows, const at::Tensor& top_k_weights,
    const at::Tensor& destination_rows, const at::Tensor& row_sources, bool need_weight_grad) {
  constexpr const char* kOp = "kernel_path::unpermute_combine_backward";
  TORCH_CHECK(rows.dim() == 2, kOp, ": rows must be [R, H], got ", rows.sizes());
  const int64_t num_rows = rows.size(0), hidden = rows.size(1);
  require_rows(rows, kOp, "rows", rows.scalar_type(), num_rows, hidden);
  require(top_k_weights, kOp, "top_k_weights", at::kFloat, {kAnySize, kAnySize});
  const int64_t num_tokens = top_k_weights.size(0), top_k = top_k_weights.size(1);
  require_rows(grad_output, kOp, "grad_output", rows.scalar_type(), num_tokens, hidden);
  require(destination_rows, kOp, "destination_rows", at::kInt, {num_tokens * top_k});
  require(row_sources, kOp, "row_sources", at::kInt, {num_rows});
  const c10::cuda::CUDAGuard device_guard(rows.device());
  at::Tensor grad_rows = at::empty({num_rows, hidden}, rows.options());
  at::Tensor grad_weights;
  if (need_weight_grad) grad_weights = at::empty({num_tokens, top_k}, top_k_weights.options());
  run_launcher("launch_unpermute_combine_backward", [&] {
    kernels::launch_unpermute_combine_backward(
        grad_output.data_ptr(), rows.data_ptr(), kernel_dtype(rows.scalar_type()),
        top_k_weights.data_ptr<float>(), destination_rows.data_ptr<int32_t>(),
        row_sources.data_ptr<int32_t>(), num_rows, num_tokens, hidden, static_cast<int>(top_k),
        grad_rows.data_ptr(), need_weight_grad ? grad_weights.data_ptr<float>() : nullptr,
        current_stream(rows));
  });
  return {grad_rows, grad_weights};
}

// ---- grouped GEMM (cuBLAS) ---------------------------------------------------------------------

bool grouped_gemm_applies(const at::Tensor& a, const at::Tensor& b) {
  bool b_is_n_by_k = false;
  return grouped_gemm_operands_fit(a, b, 3) && a.size(1) == b.size(1) &&
         b.size(0) <= std::numeric_limits<int>::max() && grouped_gemm_b_layout(b, &b_is_n_by_k);
}

at::Tensor grouped_gemm(const at::Tensor& a, const at::Tensor& b,
                        const std::vector<int64_t>& rows_per_group) {
  constexpr const char* kOp = "kernel_path::grouped_gemm";
  TORCH_CHECK(grouped_gemm_applies(a, b), kOp, ": operands a ", a.sizes(), " ", a.scalar_type(),
              " and b ", b.sizes(), " are outside the cuBLAS grouped GEMM's limits");
  bool b_is_n_by_k = false;
  grouped_gemm_b_layout(b, &b_is_n_by_k);
  const int num_groups = static_cast<int>(b.size(0));
  TORCH_CHECK(static_cast<int64_t>(rows_per_group.size()) == num_groups, kOp, ": ",
              rows_per_group.size(), " group sizes given for ", num_groups, " groups");
  const std::vector<int32_t> offsets = host_group_offsets(rows_per_group, a.size(0), kOp);
  const int64_t k = a.size(1), n = b.size(2);
  const c10::cuda::CUDAGuard device_guard(a.device());
  at::Tensor c = at::empty({a.size(0), n}, a.options());
  const kernels::DType dtype = kernel_dtype(a.scalar_type());
  TORCH_CHECK(kernels::supports_grouped_gemm(dtype, k, n, a.data_ptr(), b.data_ptr(), c.data_ptr()),
              kOp, ": the output is not 16-byte aligned");
  const std::size_t workspace_bytes = kernels::grouped_gemm_workspace_bytes(num_groups);
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
  run_launcher("launch_grouped_gemm_cublas", [&] {
    kernels::launch_grouped_gemm_cublas(at::cuda::getCurrentCUDABlasHandle(), a.data_ptr(),
                                        b.data_ptr(), c.data_ptr(), dtype, num_groups,
                                        offsets.data(), k, n, b_is_n_by_k, workspace.data_ptr(),
                                        workspace_bytes, current_stream(a));
  });
  return c;
}

bool grouped_gemm_weight_grad_applies(const at::Tensor& a, const at::Tensor& d) {
  return grouped_gemm_operands_fit(a, d, 2) && a.size(0) == d.size(0) && d.is_contiguous();
}

at::Tensor grouped_gemm_weight_grad(const at::Tensor& a, const at::Tensor& d,
                                    const std::vector<int64_t>& rows_per_group) {
  constexpr const char* kOp = "kernel_path::grouped_gemm_weight_grad";
  TORCH_CHECK(grouped_gemm_weight_grad_applies(a, d), kOp, ": operands a ", a.sizes(), " ",
              a.scalar_type(), " and d ", d.sizes(),
              " are outside the cuBLAS grouped GEMM's limits");
  TORCH_CHECK(!rows_per_group.empty() &&
                  rows_per_group.size() <= static_cast<size_t>(std::numeric_limits<int>::max()),
              kOp, ": needs at least one group");
  const int num_groups = static_cast<int>(rows_per_group.size());
  const std::vector<int32_t> offsets = host_group_offsets(rows_per_group, a.size(0), kOp);
  const int64_t k = a.size(1), n = d.size(1);
  const c10::cuda::CUDAGuard device_guard(a.device());
  at::Tensor grad_b = at::empty({num_groups, k, n}, a.options());
  const kernels::DType dtype = kernel_dtype(a.scalar_type());
  TORCH_CHECK(
      kernels::supports_grouped_gemm(dtype, k, n, a.data_ptr(), d.data_ptr(), grad_b.data_ptr()),
      kOp, ": the output is not 16-byte aligned");
  const std::size_t workspace_bytes = kernels::grouped_gemm_workspace_bytes(num_groups);
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(workspace_bytes)}, a.options().dtype(at::kByte));
  run_launcher("launch_grouped_gemm_weight_grad_cublas", [&] {
    kernels::launch_grouped_gemm_weight_grad_cublas(
        at::cuda::getCurrentCUDABlasHandle(), a.data_ptr(), d.data_ptr(), grad_b.data_ptr(), dtype,
        num_groups, offsets.data(), k, n, workspace.data_ptr(), workspace_bytes, current_stream(a));
  });
  return grad_b;
}

#else  // !MOESCOPE_RUNTIME_FUSED_KERNELS: no launchers in this build; every query says no.

namespace {
[[noreturn]] void fail_not_built(const char* op) {
  TORCH_CHECK(false, "kernel_path::", op,
              ": this moescope runtime was built without the CUDA kernels "
              "(moescope_kernels or LibTorch without CUDA)");
}
}  // namespace

bool built() {
  return false;
}
bool enabled_for(bool, const at::Tensor&) {
  return false;
}
bool router_applies(const kernels::RouterConfig&, const at::Tensor&) {
  return false;
}
FusedRouterOutputs router_forward(const at::Tensor&, const at::Tensor&,
                                  const kernels::RouterConfig&) {
  fail_not_built("router_forward");
}
at::Tensor router_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const at::Tensor&, const kernels::RouterConfig&) {
  fail_not_built("router_backward");
}
bool routing_map_applies(int64_t, int64_t) {
  return false;
}
FusedRoutingMap build_routing_map(const at::Tensor&, int64_t) {
  fail_not_built("build_routing_map");
}
bool rows_apply(const at::Tensor&) {
  return false;
}
at::Tensor permute_tokens(const at::Tensor&, const at::Tensor&, int64_t, at::Tensor) {
  fail_not_built("permute_tokens");
}
at::Tensor permute_tokens_backward(const at::Tensor&, const at::Tensor&, int64_t, int64_t) {
  fail_not_built("permute_tokens_backward");
}
at::Tensor unpermute_combine(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  fail_not_built("unpermute_combine");
}
std::pair<at::Tensor, at::Tensor> unpermute_combine_backward(const at::Tensor&, const at::Tensor&,
                                                             const at::Tensor&, const at::Tensor&,
                                                             const at::Tensor&, bool) {
  fail_not_built("unpermute_combine_backward");
}
bool grouped_gemm_applies(const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor grouped_gemm(const at::Tensor&, const at::Tensor&, const std::vector<int64_t>&) {
  fail_not_built("grouped_gemm");
}
bool grouped_gemm_weight_grad_applies(const at::Tensor&, const at::Tensor&) {
  return false;
}
at::Tensor grouped_gemm_weight_grad(const at::Tensor&, const at::Tensor&,
                                    const std::vector<int64_t>&) {
  fail_not_built("grouped_gemm_weight_grad");
}

#endif

}  // namespace moescope::runtime::kernel_path

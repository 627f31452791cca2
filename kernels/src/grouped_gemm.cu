// Grouped GEMM through cublasGemmGroupedBatchedEx (one problem per non-empty group). cuBLAS is
// column-major; a row-major [rows, cols] matrix is a column-major [cols, rows] one, so
//   forward      C_g[M,N] = A_g[M,K] B_g[K,N]  is  C^T[N,M] = B^T[N,K] A^T[K,M]
//   weight grad  dB_g[K,N] = A_g^T dC_g        is  dB^T[N,K] = dC^T[N,M] (A^T[K,M])^T
// m/n/k/ld arrays live in host memory (hence host_group_offsets); the pointer arrays must be
// in device memory and go through the caller's workspace with one async copy.
#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "argument_checks.h"
#include "cuda_checks.cuh"
#include "moescope/kernels/launchers.h"

namespace moescope::kernels {
namespace {

void check_cublas(cublasStatus_t status, const char* op, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(op) + ": " + what +
                             " failed: " + cublasGetStatusName(status) + " (" +
                             cublasGetStatusString(status) + ")");
  }
}

cudaDataType_t cuda_data_type(DType dtype) {
  return dtype == DType::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
}

/// One cuBLAS problem per group; arrays are host-side except the pointers.
struct GroupedProblems {
  std::vector<cublasOperation_t> transa, transb;
  std::vector<int> m, n, k, lda, ldb, ldc, group_size;
  std::vector<float> alpha, beta;
  // cuBLAS reads all three through device arrays; const is dropped only to pack them together.
  std::vector<void*> a_pointers, b_pointers, c_pointers;

  void add(cublasOperation_t op_a, cublasOperation_t op_b, int rows_m, int cols_n, int inner_k,
           const void* a, int a_ld, const void* b, int b_ld, void* c, int c_ld) {
    transa.push_back(op_a);
    transb.push_back(op_b);
    m.push_back(rows_m);
    n.push_back(cols_n);
    k.push_back(inner_k);
    lda.push_back(a_ld);
    ldb.push_back(b_ld);
    ldc.push_back(c_ld);
    group_size.push_back(1);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
    a_pointers.push_back(const_cast<void*>(a));
    b_pointers.push_back(const_cast<void*>(b));
    c_pointers.push_back(c);
  }

  void run(cublasHandle_t handle, DType dtype, void* workspace, std::size_t workspace_bytes,
           cudaStream_t stream, const char* op) {
    const int count = static_cast<int>(m.size());
    if (count == 0) return;
    if (workspace_bytes < grouped_gemm_workspace_bytes(count)) {
      detail::fail_argument(op, "workspace_bytes must be >= grouped_gemm_workspace_bytes(" +
                                    std::to_string(count) + ")");
    }
    std::vector<void*> pointers;
    pointers.reserve(3 * count);
    pointers.insert(pointers.end(), a_pointers.begin(), a_pointers.end());
    pointers.insert(pointers.end(), b_pointers.begin(), b_pointers.end());
    pointers.insert(pointers.end(), c_pointers.begin(), c_pointers.end());
    // Pageable source: cudaMemcpyAsync returns once the bytes are staged, so `pointers` may die.
    detail::check_cuda(cudaMemcpyAsync(workspace, pointers.data(), pointers.size() * sizeof(void*),
                                       cudaMemcpyHostToDevice, stream),
                       op, "cudaMemcpyAsync(pointer arrays)");
    auto* device_pointers = static_cast<void**>(workspace);
    check_cublas(cublasSetStream(handle, stream), op, "cublasSetStream");
    const cudaDataType_t type = cuda_data_type(dtype);
    check_cublas(cublasGemmGroupedBatchedEx(
                     handle, transa.data(), transb.data(), m.data(), n.data(), k.data(),
                     alpha.data(), device_pointers, type, lda.data(), device_pointers + count, type,
                     ldb.data(), beta.data(), device_pointers + 2 * count, type, ldc.data(), count,
                     group_size.data(), CUBLAS_COMPUTE_32F),
                 op, "cublasGemmGroupedBatchedEx");
  }
};

void check_grouped_arguments(const char* op, cublasContext* handle, DType dtype, int num_groups,
                             const std::int32_t* host_group_offsets, std::int64_t k,
                             std::int64_t n) {
  detail::require_pointer(op, handle, "handle");
  detail::require_dtype(op, dtype);
  detail::check_group_offsets(op, num_groups, host_group_offsets, k, n);
  if (k > INT32_MAX || n > INT32_MAX) detail::fail_argument(op, "k and n must fit in int32");
}

}  // namespace

void launch_grouped_gemm_cublas(cublasContext* handle, const void* a, const void* b, void* c,
                                DType dtype, int num_groups, const std::int32_t* host_group_offsets,
                                std::int64_t k, std::int64_t n, bool b_is_n_by_k, void* workspace,
                                std::size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "launch_grouped_gemm_cublas";
  check_grouped_arguments(kOp, handle, dtype, num_groups, host_group_offsets, k, n);
  if (host_group_offsets[num_groups] == 0) return;
  detail::require_pointer(kOp, a, "a");
  detail::require_pointer(kOp, b, "b");
  detail::require_pointer(kOp, c, "c");
  const std::size_t element = dtype_size(dtype);
  GroupedProblems problems;
  for (int g = 0; g < num_groups; ++g) {
    const int rows = host_group_offsets[g + 1] - host_group_offsets[g];
    if (rows == 0) continue;
    const auto* a_group = static_cast<const char*>(a) + host_group_offsets[g] * k * element;
    const auto* b_group =
        static_cast<const char*>(b) + static_cast<std::int64_t>(g) * k * n * element;
    auto* c_group = static_cast<char*>(c) + host_group_offsets[g] * n * element;
    // B [K,N] row-major = column-major [N,K] (ld N); B [N,K] row-major = column-major [K,N]
    // (ld K), transposed.
    problems.add(b_is_n_by_k ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), rows,
                 static_cast<int>(k), b_group, static_cast<int>(b_is_n_by_k ? k : n), a_group,
                 static_cast<int>(k), c_group, static_cast<int>(n));
  }
  problems.run(handle, dtype, workspace, workspace_bytes, stream, kOp);
}

void launch_grouped_gemm_weight_grad_cublas(cublasContext* handle, const void* a,
                                            const void* grad_c, void* grad_b, DType dtype,
                                            int num_groups, const std::int32_t* host_group_offsets,
                                            std::int64_t k, std::int64_t n, void* workspace,
                                            std::size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "launch_grouped_gemm_weight_grad_cublas";
  check_grouped_arguments(kOp, handle, dtype, num_groups, host_group_offsets, k, n);
  detail::require_pointer(kOp, grad_b, "grad_b");
  if (host_group_offsets[num_groups] > 0) {
    detail::require_pointer(kOp, a, "a");
    detail::require_pointer(kOp, grad_c, "grad_c");
  }
  const std::size_t element = dtype_size(dtype);
  const std::size_t group_bytes = static_cast<std::size_t>(k * n) * element;
  GroupedProblems problems;
  for (int g = 0; g < num_groups; ++g) {
    const int rows = host_group_offsets[g + 1] - host_group_offsets[g];
    auto* grad_b_group = static_cast<char*>(grad_b) + g * group_bytes;
    if (rows == 0) {  // no rows: the gradient is zero, and cuBLAS is not asked for k = 0
      detail::check_cuda(cudaMemsetAsync(grad_b_group, 0, group_bytes, stream), kOp,
                         "cudaMemsetAsync(grad_b group)");
      continue;
    }
    const auto* a_group = static_cast<const char*>(a) + host_group_offsets[g] * k * element;
    const auto* grad_c_group =
        static_cast<const char*>(grad_c) + host_group_offsets[g] * n * element;
    problems.add(CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(n), static_cast<int>(k), rows,
                 grad_c_group, static_cast<int>(n), a_group, static_cast<int>(k), grad_b_group,
                 static_cast<int>(n));
  }
  problems.run(handle, dtype, workspace, workspace_bytes, stream, kOp);
}

}  // namespace moescope::kernels

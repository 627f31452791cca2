// Routing map on the device, no host sync: three kernels on the caller's stream.
//   1. count_chunks:   per chunk of kRoutingMapAssignmentsPerChunk assignments, a shared-memory
//                      histogram -> workspace[chunk][expert].
//   2. scan_offsets:   one block; per expert, an exclusive running sum over chunks (turning the
//                      workspace into each chunk's start inside its expert group), the expert's
//                      total, then a padded exclusive scan over experts -> group_offsets.
//   3. place_assignments: per chunk, each assignment's rank among the same-expert assignments
//                      before it (warp __match_any_sync + per-warp counts), so the order inside
//                      a group is the assignment order: stable, deterministic, no sort.
#include <cstdint>

#include "argument_checks.h"
#include "cuda_checks.cuh"
#include "moescope/kernels/launchers.h"
#include "routing_map_chunks.h"

namespace moescope::kernels {
namespace {

using detail::kRoutingMapAssignmentsPerChunk;
constexpr int kPlaceThreads = 256;
constexpr int kPlaceWarps = kPlaceThreads / 32;
constexpr int kScanThreads = 1024;
static_assert(kRoutingMapAssignmentsPerChunk % kPlaceThreads == 0);

__device__ __forceinline__ int routed_expert(const std::int32_t* topk_ids, long long n,
                                             int num_experts) {
  const int expert = topk_ids[n];
  return (expert >= 0 && expert < num_experts) ? expert : -1;  // out of range = dropped
}

__global__ void count_chunks_kernel(const std::int32_t* __restrict__ topk_ids,
                                    long long num_assignments, int num_experts,
                                    std::int32_t* __restrict__ chunk_counts) {
  extern __shared__ int histogram[];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) histogram[e] = 0;
  __syncthreads();
  const long long begin = static_cast<long long>(blockIdx.x) * kRoutingMapAssignmentsPerChunk;
  const long long end = min(begin + kRoutingMapAssignmentsPerChunk, num_assignments);
  for (long long n = begin + threadIdx.x; n < end; n += blockDim.x) {
    const int expert = routed_expert(topk_ids, n, num_experts);
    if (expert >= 0) atomicAdd(&histogram[expert], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    chunk_counts[static_cast<long long>(blockIdx.x) * num_experts + e] = histogram[e];
  }
}

__global__ void scan_offsets_kernel(std::int32_t* __restrict__ chunk_counts, int num_chunks,
                                    int num_experts, int row_alignment,
                                    std::int32_t* __restrict__ tokens_per_expert,
                                    std::int32_t* __restrict__ group_offsets) {
  __shared__ int scan[kScanThreads];
  const int expert = threadIdx.x;
  int total = 0;
  if (expert < num_experts) {
#pragma unroll 8
    for (int chunk = 0; chunk < num_chunks; ++chunk) {
      const long long index = static_cast<long long>(chunk) * num_experts + expert;
      const int count = chunk_counts[index];
      chunk_counts[index] = total;
      total += count;
    }
    tokens_per_expert[expert] = total;
  }
  scan[expert] =
      expert < num_experts ? (total + row_alignment - 1) / row_alignment * row_alignment : 0;
  __syncthreads();
  for (int offset = 1; offset < kScanThreads; offset *= 2) {  // Hillis-Steele inclusive scan
    const int addend = expert >= offset ? scan[expert - offset] : 0;
    __syncthreads();
    scan[expert] += addend;
    __syncthreads();
  }
  if (expert == 0) group_offsets[0] = 0;
  if (expert < num_experts) group_offsets[expert + 1] = scan[expert];
}

__global__ void place_assignments_kernel(const std::int32_t* __restrict__ topk_ids,
                                         long long num_assignments, int num_experts,
                                         const std::int32_t* __restrict__ chunk_starts,
                                         const std::int32_t* __restrict__ group_offsets,
                                         std::int32_t* __restrict__ destination_rows,
                                         std::int32_t* __restrict__ row_sources) {
  extern __shared__ int shared[];
  int* next_row = shared;                   // [E]: next free row of each expert in this chunk
  int* warp_counts = shared + num_experts;  // [kPlaceWarps][E]
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const unsigned int lanes_before = (1u << lane) - 1u;
  for (int e = threadIdx.x; e < num_experts; e += kPlaceThreads) {
    next_row[e] =
        group_offsets[e] + chunk_starts[static_cast<long long>(blockIdx.x) * num_experts + e];
    for (int w = 0; w < kPlaceWarps; ++w) warp_counts[w * num_experts + e] = 0;
  }
  __syncthreads();
  const long long chunk_begin = static_cast<long long>(blockIdx.x) * kRoutingMapAssignmentsPerChunk;
  for (int tile = 0; tile < kRoutingMapAssignmentsPerChunk / kPlaceThreads; ++tile) {
    const long long n = chunk_begin + tile * kPlaceThreads + threadIdx.x;
    const bool in_range = n < num_assignments;
    const int expert = in_range ? routed_expert(topk_ids, n, num_experts) : -1;
    const unsigned int peers = __match_any_sync(0xffffffffu, expert);
    const int rank_in_warp = __popc(peers & lanes_before);
    if (expert >= 0 && rank_in_warp == 0) warp_counts[warp * num_experts + expert] = __popc(peers);
    __syncthreads();
    if (expert >= 0) {
      int row = next_row[expert] + rank_in_warp;
      for (int w = 0; w < warp; ++w) row += warp_counts[w * num_experts + expert];
      destination_rows[n] = row;
      row_sources[row] = static_cast<std::int32_t>(n);
    } else if (in_range) {
      destination_rows[n] = -1;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < num_experts; e += kPlaceThreads) {
      int tile_count = 0;
      for (int w = 0; w < kPlaceWarps; ++w) {
        tile_count += warp_counts[w * num_experts + e];
        warp_counts[w * num_experts + e] = 0;
      }
      next_row[e] += tile_count;
    }
    __syncthreads();
  }
}

}  // namespace

void launch_build_routing_map(const std::int32_t* topk_ids, std::int64_t num_assignments,
                              int num_experts, int row_alignment, void* workspace,
                              std::size_t workspace_bytes, std::int32_t* tokens_per_expert,
                              std::int32_t* group_offsets, std::int32_t* destination_rows,
                              std::int32_t* row_sources, std::int64_t row_capacity,
                              cudaStream_t stream) {
  constexpr const char* kOp = "launch_build_routing_map";
  detail::check_routing_map_sizes(kOp, num_assignments, num_experts, row_alignment, row_capacity);
  if (!supports_routing_map(num_assignments, num_experts, row_alignment)) {
    detail::fail_argument(kOp,
                          "sizes outside the CUDA routing map's limits (num_experts <= 1024, "
                          "row_alignment <= 1024): check supports_routing_map() first");
  }
  detail::require_pointer(kOp, tokens_per_expert, "tokens_per_expert");
  detail::require_pointer(kOp, group_offsets, "group_offsets");
  detail::require_pointer(kOp, row_sources, "row_sources");
  detail::require_pointer(kOp, workspace, "workspace");
  if (num_assignments > 0) {
    detail::require_pointer(kOp, topk_ids, "topk_ids");
    detail::require_pointer(kOp, destination_rows, "destination_rows");
  }
  const std::size_t needed = routing_map_workspace_bytes(num_assignments, num_experts);
  if (workspace_bytes < needed) {
    detail::fail_argument(
        kOp, "workspace_bytes must be >= routing_map_workspace_bytes()=" + std::to_string(needed) +
                 ", got " + std::to_string(workspace_bytes));
  }
  auto* chunk_counts = static_cast<std::int32_t*>(workspace);
  const int num_chunks = static_cast<int>((num_assignments + kRoutingMapAssignmentsPerChunk - 1) /
                                          kRoutingMapAssignmentsPerChunk);
  detail::check_cuda(
      cudaMemsetAsync(row_sources, 0xff, sizeof(std::int32_t) * row_capacity, stream), kOp,
      "cudaMemsetAsync(row_sources)");
  if (num_chunks > 0) {
    count_chunks_kernel<<<num_chunks, kPlaceThreads, num_experts * sizeof(int), stream>>>(
        topk_ids, num_assignments, num_experts, chunk_counts);
    detail::check_launch(kOp);
  }
  scan_offsets_kernel<<<1, kScanThreads, 0, stream>>>(
      chunk_counts, num_chunks, num_experts, row_alignment, tokens_per_expert, group_offsets);
  detail::check_launch(kOp);
  if (num_chunks > 0) {
    const std::size_t shared_bytes = (1 + kPlaceWarps) * num_experts * sizeof(int);
    place_assignments_kernel<<<num_chunks, kPlaceThreads, shared_bytes, stream>>>(
        topk_ids, num_assignments, num_experts, chunk_counts, group_offsets, destination_rows,
        row_sources);
    detail::check_launch(kOp);
  }
}

}  // namespace moescope::kernels

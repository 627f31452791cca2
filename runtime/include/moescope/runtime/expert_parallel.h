// Expert parallelism over a c10d Backend (ProcessGroupGloo on CPU, ProcessGroupNCCL on GPU).
//
// The E experts are split into ep_size contiguous blocks of E_local = E / ep_size; rank r owns
// experts [r * E_local, (r + 1) * E_local). A forward on every rank:
//   1. counts:   all-to-all of rows_per_expert [E] -> received_counts [ep_size, E_local]
//   2. dispatch: all-to-all of the expert-ordered rows with split sizes (alltoall_base)
//   3. reorder:  received rows are source-major; the experts need expert-major:
//        received: [ src 0: e0 e1 .. | src 1: e0 e1 .. | ... ]
//        experts:  [ e0: src0 src1 .. | e1: src0 src1 .. | ... ]
//   4. local grouped expert compute, reverse reorder
//   5. combine:  the reverse all-to-all, back to the rows' home ranks
// The all-to-alls are an autograd Function whose backward is the reverse all-to-all, so the
// gradients flow across ranks. Every rank must call forward together, with the same config.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <cstdint>
#include <vector>

#include "moescope/runtime/dispatch_buffer_pool.h"

namespace moescope::runtime {

/// The process group experts are spread over. A null backend means one process.
struct ExpertParallelGroup {
  c10::intrusive_ptr<c10d::Backend> backend;

  int64_t rank() const { return backend ? backend->getRank() : 0; }
  int64_t size() const { return backend ? backend->getSize() : 1; }
  bool is_distributed() const { return backend && backend->getSize() > 1; }
};

/// How rows move for one forward.
struct ExpertParallelPlan {
  std::vector<int64_t> send_splits;            // [ep_size] rows this rank sends to each rank
  std::vector<int64_t> recv_splits;            // [ep_size] rows it receives from each rank
  std::vector<int64_t> received_counts;        // [ep_size * E_local] source-major
  std::vector<int64_t> rows_per_local_expert;  // [E_local] rows each local expert computes
  at::Tensor source_to_expert_order;           // [R_recv] int64: expert_rows = received[this]
  at::Tensor expert_to_source_order;           // [R_recv] int64: its inverse permutation
};

/// Step 1 and the bookkeeping of step 3. `rows_per_expert` [E] are this rank's kept rows per
/// global expert. One small all-to-all of int64 counts on `device`.
ExpertParallelPlan plan_expert_parallel(const std::vector<int64_t>& rows_per_expert,
                                        const ExpertParallelGroup& group, const at::Device& device);

/// All-to-all of rows with autograd: input [sum(send_splits), H] -> [sum(recv_splits), H].
/// Backward sends the gradient back with the splits swapped. `trace_name` names the op in
/// traces ("a2a.dispatch", "a2a.combine"). With a `receive_pool` the forward receives into its
/// kDispatchReceive buffer (valid until that buffer's next use: only for rows nothing saves for
/// backward).
at::Tensor all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                           const std::vector<int64_t>& recv_splits,
                           const ExpertParallelGroup& group, const char* trace_name,
                           DispatchBufferPool* receive_pool = nullptr);

/// Sum of `tensor` over the group, in place and returned (no autograd). Recorded in the trace
/// as an all-reduce named `trace_name` (its bytes and time).
at::Tensor all_reduce_sum(at::Tensor tensor, const ExpertParallelGroup& group,
                          const char* trace_name = "ar.sum");

}  // namespace moescope::runtime

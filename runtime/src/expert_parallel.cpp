#include "moescope/runtime/expert_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <numeric>
#include <string>

#include "moescope/runtime/host_transfers.h"
#include "moescope/runtime/moe_instrumentation.h"

namespace moescope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

[[noreturn]] void fail_collective(const char* op, const char* trace_name,
                                  const c10d::Backend& backend, const std::string& cause) {
  TORCH_CHECK(false, "moescope expert parallelism: ", op, " '", trace_name, "' failed on rank ",
              backend.getRank(), " of ", backend.getSize(),
              " (a peer rank died or the process group timed out): ", cause);
  std::abort();  // unreachable: TORCH_CHECK(false, ...) throws
}

// Runs one alltoall_base and waits for it. A dead peer or the group timeout surfaces as an
// exception from wait(); it is rethrown as a c10::Error naming the exchange and the rank.
// `output`, when given, is the [recv rows, ...] tensor to receive into.
at::Tensor exchange_rows(const at::Tensor& input, std::vector<int64_t> send_splits,
                         std::vector<int64_t> recv_splits, c10d::Backend& backend,
                         const char* trace_name, at::Tensor output = {}) {
  const int64_t recv_rows = std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0});
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = recv_rows;
  if (!output.defined()) output = at::empty(shape, input.options());
  at::Tensor send = input.contiguous();
  const int64_t row_bytes = input.dim() > 1
                                ? input.stride(0) * static_cast<int64_t>(input.element_size())
                                : static_cast<int64_t>(input.element_size());
  CommunicationRecord record(trace_name, backend.getRank(), backend.getSize(), send_splits,
                             row_bytes, input);
  // Gloo reports a dead peer as a gloo::IoException (std::exception), timeouts as c10::Error.
  try {
    backend.alltoall_base(output, send, recv_splits, send_splits)->wait();
  } catch (const c10::Error& error) {
    fail_collective("all-to-all", trace_name, backend, error.what_without_backtrace());
  } catch (const std::exception& error) {
    fail_collective("all-to-all", trace_name, backend, error.what());
  }
  record.finish();
  return output;
}

struct AllToAllRowsFunction : public torch::autograd::Function<AllToAllRowsFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const std::vector<int64_t>& send_splits,
                            const std::vector<int64_t>& recv_splits,
                            const c10::intrusive_ptr<c10d::Backend>& backend,
                            const std::string& trace_name, DispatchBufferPool* pool) {
    ctx->saved_data["send_splits"] = send_splits;
    ctx->saved_data["recv_splits"] = recv_splits;
    ctx->saved_data["backend"] = c10::IValue::make_capsule(backend);
    ctx->saved_data["trace_name"] = trace_name + ".backward";
    at::Tensor output;
    if (pool != nullptr) {
      output = pool->acquire(DispatchBufferKind::kDispatchReceive,
                             std::accumulate(recv_splits.begin(), recv_splits.end(), int64_t{0}));
    }
    return exchange_rows(input, send_splits, recv_splits, *backend, trace_name.c_str(), output);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto backend =
        c10::static_intrusive_pointer_cast<c10d::Backend>(ctx->saved_data["backend"].toCapsule());
    const std::string trace_name = ctx->saved_data["trace_name"].toStringRef();
    // Gradients travel back: what we received we now send, and the other way round.
    at::Tensor grad_input =
        exchange_rows(grad_outputs[0], ctx->saved_data["recv_splits"].toIntVector(),
                      ctx->saved_data["send_splits"].toIntVector(), *backend, trace_name.c_str());
    return {grad_input, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ExpertParallelPlan plan_expert_parallel(const std::vector<int64_t>& rows_per_expert,
                                        const ExpertParallelGroup& group,
                                        const at::Device& device) {
  TORCH_CHECK(group.backend, "plan_expert_parallel: the expert-parallel group has no backend");
  const int64_t ep_size = group.size();
  const auto num_experts = static_cast<int64_t>(rows_per_expert.size());
  TORCH_CHECK(num_experts % ep_size == 0, "plan_expert_parallel: num_experts (", num_experts,
              ") is not divisible by the expert-parallel group size (", ep_size, ")");
  const int64_t local_experts = num_experts / ep_size;

  ExpertParallelPlan plan;
  plan.send_splits.assign(static_cast<size_t>(ep_size), 0);
  for (int64_t e = 0; e < num_experts; ++e) {
    plan.send_splits[static_cast<size_t>(e / local_experts)] += rows_per_expert[e];
  }
  // Counts travel as int64 on the data's device (NCCL needs device tensors).
  at::Tensor send_counts =
      at::tensor(rows_per_expert, at::TensorOptions().dtype(at::kLong)).to(device);
  std::vector<int64_t> equal_splits(static_cast<size_t>(ep_size), local_experts);
  plan.received_counts = copy_to_host_int64(
      exchange_rows(send_counts, equal_splits, equal_splits, *group.backend, "a2a.counts"));
  const int64_t* received = plan.received_counts.data();

  plan.recv_splits.assign(static_cast<size_t>(ep_size), 0);
  plan.rows_per_local_expert.assign(static_cast<size_t>(local_experts), 0);
  for (int64_t s = 0; s < ep_size; ++s) {
    for (int64_t e = 0; e < local_experts; ++e) {
      const int64_t count = received[s * local_experts + e];
      plan.recv_splits[static_cast<size_t>(s)] += count;
      plan.rows_per_local_expert[static_cast<size_t>(e)] += count;
    }
  }
  // source_to_expert_order lists received row positions expert-major: for expert e, the rows
  // from source 0, then source 1, ...
  const int64_t total =
      std::accumulate(plan.recv_splits.begin(), plan.recv_splits.end(), int64_t{0});
  std::vector<int64_t> source_block_start(static_cast<size_t>(ep_size * local_experts));
  int64_t running = 0;
  for (int64_t i = 0; i < ep_size * local_experts; ++i) {
    source_block_start[static_cast<size_t>(i)] = running;
    running += received[i];
  }
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(total));
  for (int64_t e = 0; e < local_experts; ++e) {
    for (int64_t s = 0; s < ep_size; ++s) {
      const int64_t block = s * local_experts + e;
      for (int64_t i = 0; i < received[block]; ++i) {
        order.push_back(source_block_start[static_cast<size_t>(block)] + i);
      }
    }
  }
  at::Tensor order_cpu = at::tensor(order, at::TensorOptions().dtype(at::kLong));
  at::Tensor inverse_cpu = at::empty_like(order_cpu);
  inverse_cpu.index_put_({order_cpu}, at::arange(total, order_cpu.options()));
  plan.source_to_expert_order = order_cpu.to(device);
  plan.expert_to_source_order = inverse_cpu.to(device);
  return plan;
}

at::Tensor all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& send_splits,
                           const std::vector<int64_t>& recv_splits,
                           const ExpertParallelGroup& group, const char* trace_name,
                           DispatchBufferPool* receive_pool) {
  TORCH_CHECK(group.backend, "all_to_all_rows: the expert-parallel group has no backend");
  TORCH_CHECK(receive_pool == nullptr ||
                  (input.dim() == 2 && input.size(1) == receive_pool->options().hidden_size &&
                   input.scalar_type() == receive_pool->options().dtype),
              "all_to_all_rows: rows ", input.sizes(), " ", input.scalar_type(),
              " do not fit the dispatch buffer pool's buffers");
  TORCH_CHECK(static_cast<int64_t>(send_splits.size()) == group.size() &&
                  static_cast<int64_t>(recv_splits.size()) == group.size(),
              "all_to_all_rows: send/recv splits need one entry per rank (", group.size(), ")");
  const int64_t send_rows = std::accumulate(send_splits.begin(), send_splits.end(), int64_t{0});
  TORCH_CHECK(input.size(0) == send_rows, "all_to_all_rows: input has ", input.size(0),
              " rows but the send splits add up to ", send_rows);
  return AllToAllRowsFunction::apply(input, send_splits, recv_splits, group.backend,
                                     std::string(trace_name), receive_pool);
}

at::Tensor all_reduce_sum(at::Tensor tensor, const ExpertParallelGroup& group,
                          const char* trace_name) {
  if (!group.is_distributed()) return tensor;
  std::vector<at::Tensor> tensors{tensor};
  CommunicationRecord record(trace_name, static_cast<int>(group.rank()),
                             static_cast<int>(group.size()), tensor);
  try {
    group.backend->allreduce(tensors)->wait();
    record.finish();
  } catch (const c10::Error& error) {
    fail_collective("all-reduce", "expert_load", *group.backend, error.what_without_backtrace());
  } catch (const std::exception& error) {
    fail_collective("all-reduce", "expert_load", *group.backend, error.what());
  }
  return tensor;
}

}  // namespace moescope::runtime

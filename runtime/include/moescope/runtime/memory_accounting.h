// Memory accounting by category: where the bytes of an MoE training step go, recorded as
// counters in the trace so the viewer's memory curves can say *what* grew, not only how much.
//
//   expert weights    routed-expert parameters and their gradients
//   optimizer state   optimizer state tensors resident on the device (offloaded state is
//                     reported apart, as host bytes)
//   dispatch buffers  the DispatchBufferPool's reservations
//   activations       what the caller measured (e.g. the autograd graph's saved tensors)
//   other             every other parameter, gradient and buffer of the model
//
// Tensors sharing one storage are counted once, by their storage's size.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace moescope::runtime {

class DispatchBufferPool;
class ExpertOptimizerOffload;
class HostTensorCache;

enum class MemoryCategory : int {
  kExpertWeights = 0,
  kOptimizerState = 1,
  kDispatchBuffers = 2,
  kActivations = 3,
  kOther = 4,
};
inline constexpr int kNumMemoryCategories = 5;
/// The counter name of a category: "memory.expert_weights", "memory.optimizer_state",
/// "memory.dispatch_buffers", "memory.activations", "memory.other".
const char* memory_counter_name(MemoryCategory category);

struct MemoryBreakdown {
  std::array<int64_t, kNumMemoryCategories> bytes{};  // indexed by MemoryCategory
  int64_t offloaded_optimizer_state_bytes = 0;        // host copies, not in total()
  // The experts' CPU blocks (HostTensorCache), in use or kept for the next step; not in total():
  // the blocks in use are activations the caller may have counted already.
  int64_t host_tensor_cache_bytes = 0;

  int64_t& operator[](MemoryCategory category) { return bytes[static_cast<size_t>(category)]; }
  int64_t operator[](MemoryCategory category) const { return bytes[static_cast<size_t>(category)]; }
  /// Sum of the five categories.
  int64_t total() const;
};

/// True for parameters whose fully qualified name has a path component "experts" (MoELayer's
/// routed experts: "...experts.w_gate_up"); "shared_experts" and the router are not experts.
bool is_routed_expert_parameter(const std::string& qualified_name);

/// What to measure; every source is optional.
struct MemorySources {
  const torch::nn::Module* model = nullptr;
  /// Which parameters count as expert weights (default is_routed_expert_parameter).
  std::function<bool(const std::string&)> is_expert_parameter;
  /// Optimizers whose state is counted (Adam, AdamW, SGD, Adagrad, RMSprop state types).
  std::vector<const torch::optim::Optimizer*> optimizers;
  /// Expert optimizers with offloaded state (e.g. one per MoE layer): their resident state counts
  /// as optimizer state, their host state as offloaded.
  std::vector<const ExpertOptimizerOffload*> expert_optimizers;
  std::vector<const DispatchBufferPool*> dispatch_buffers;  // e.g. one per MoE layer
  const HostTensorCache* host_tensor_cache = nullptr;       // e.g. &HostTensorCache::experts()
  int64_t activation_bytes = 0;
};

/// Measures bytes per category. Throws c10::Error naming the optimizer state type when an
/// optimizer holds state of a kind it cannot read.
MemoryBreakdown measure_memory(const MemorySources& sources);

/// Bytes of the state tensors one optimizer holds now (0 before its first step).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

/// Records every category as a counter (memory_counter_name), plus "memory.total",
/// "memory.optimizer_state_offloaded" and "memory.host_tensor_cache". No-op unless a recorder
/// is active.
void record_memory_breakdown(const MemoryBreakdown& breakdown);

}  // namespace moescope::runtime

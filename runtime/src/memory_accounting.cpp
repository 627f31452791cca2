#include "moescope/runtime/memory_accounting.h"

#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <iterator>
#include <unordered_set>

#include "moescope/recorder.h"
#include "moescope/runtime/dispatch_buffer_pool.h"
#include "moescope/runtime/expert_optimizer_offload.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/optimizer_state.h"

namespace moescope::runtime {
namespace {

/// Adds each storage's bytes once, however many tensors view it.
class StorageCounter {
 public:
  int64_t bytes_of(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return 0;
    const void* storage = tensor.storage().unsafeGetStorageImpl();
    if (!seen_.insert(storage).second) return 0;
    return static_cast<int64_t>(tensor.storage().nbytes());
  }

 private:
  std::unordered_set<const void*> seen_;
};

int64_t state_tensor_bytes(const torch::optim::OptimizerParamState& state,
                           StorageCounter& counter) {
  int64_t bytes = 0;
  for (const at::Tensor& tensor : optimizer_state_tensors(state)) bytes += counter.bytes_of(tensor);
  return bytes;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer, StorageCounter& counter) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) bytes += state_tensor_bytes(*entry.second, counter);
  return bytes;
}

}  // namespace

const char* memory_counter_name(MemoryCategory category) {
  static constexpr const char* kNames[] = {"memory.expert_weights", "memory.optimizer_state",
                                           "memory.dispatch_buffers", "memory.activations",
                                           "memory.other"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumMemoryCategories);
  const int index = static_cast<int>(category);
  return index >= 0 && index < kNumMemoryCategories ? kNames[index] : "memory.unknown";
}

int64_t MemoryBreakdown::total() const {
  int64_t sum = 0;
  for (const int64_t value : bytes) sum += value;
  return sum;
}

bool is_routed_expert_parameter(const std::string& qualified_name) {
  size_t begin = 0;
  while (begin <= qualified_name.size()) {
    size_t end = qualified_name.find('.', begin);
    if (end == std::string::npos) end = qualified_name.size();
    // A component followed by more path: "experts" as a module, not a leaf named "experts".
    if (end < qualified_name.size() && qualified_name.compare(begin, end - begin, "experts") == 0)
      return true;
    begin = end + 1;
  }
  return false;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  StorageCounter counter;
  return optimizer_state_bytes(optimizer, counter);
}

MemoryBreakdown measure_memory(const MemorySources& sources) {
  TORCH_CHECK(sources.activation_bytes >= 0, "measure_memory: activation_bytes must be >= 0, got ",
              sources.activation_bytes);
  MemoryBreakdown breakdown;
  StorageCounter counter;
  if (sources.model != nullptr) {
    const auto& is_expert =
        sources.is_expert_parameter
            ? sources.is_expert_parameter
            : std::function<bool(const std::string&)>(is_routed_expert_parameter);
    for (const auto& item : sources.model->named_parameters(/*recurse=*/true)) {
      const MemoryCategory category =
          is_expert(item.key()) ? MemoryCategory::kExpertWeights : MemoryCategory::kOther;
      breakdown[category] += counter.bytes_of(item.value()) + counter.bytes_of(item.value().grad());
    }
    for (const auto& item : sources.model->named_buffers(/*recurse=*/true)) {
      breakdown[MemoryCategory::kOther] += counter.bytes_of(item.value());
    }
  }
  for (const torch::optim::Optimizer* optimizer : sources.optimizers) {
    TORCH_CHECK(optimizer != nullptr, "measure_memory: optimizers holds a null pointer");
    breakdown[MemoryCategory::kOptimizerState] += optimizer_state_bytes(*optimizer, counter);
  }
  for (const ExpertOptimizerOffload* expert_optimizer : sources.expert_optimizers) {
    breakdown[MemoryCategory::kOptimizerState] += expert_optimizer->resident_state_bytes();
    breakdown.offloaded_optimizer_state_bytes += expert_optimizer->offloaded_state_bytes();
  }
  for (const DispatchBufferPool* pool : sources.dispatch_buffers) {
    if (pool != nullptr)
      breakdown[MemoryCategory::kDispatchBuffers] += pool->stats().bytes_reserved;
  }
  breakdown[MemoryCategory::kActivations] = sources.activation_bytes;
  if (sources.host_tensor_cache != nullptr) {
    breakdown.host_tensor_cache_bytes = sources.host_tensor_cache->stats().cached_bytes;
  }
  return breakdown;
}

void record_memory_breakdown(const MemoryBreakdown& breakdown) {
  if (!moescope_recording) return;
  // Interned per call: ids belong to one recording, and a recorder may restart (a forked child).
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    moescope_counter(moescope_intern(memory_counter_name(static_cast<MemoryCategory>(c))),
                     static_cast<double>(breakdown.bytes[static_cast<size_t>(c)]));
  }
  moescope_counter(moescope_intern("memory.total"), static_cast<double>(breakdown.total()));
  moescope_counter(moescope_intern("memory.optimizer_state_offloaded"),
                   static_cast<double>(breakdown.offloaded_optimizer_state_bytes));
  moescope_counter(moescope_intern("memory.host_tensor_cache"),
                   static_cast<double>(breakdown.host_tensor_cache_bytes));
}

}  // namespace moescope::runtime

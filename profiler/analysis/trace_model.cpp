// Names of the model's enums, for reports, exports and the viewer.
#include "moescope/analysis/trace_model.h"

#include <cstddef>
#include <iterator>

namespace moescope::analysis {
namespace {

// names[index], or `unknown` past the end: each enum's names are one array in value order.
template <size_t N>
const char* name_at(const char* const (&names)[N], size_t index, const char* unknown) {
  return index < N ? names[index] : unknown;
}

}  // namespace

const char* gpu_op_kind_name(GpuOpKind kind) {
  static const char* const kNames[] = {"kernel", "memcpy", "memset", "sync"};
  return name_at(kNames, static_cast<size_t>(kind), "?");
}

const char* memory_category_name(int category) {
  static const char* const kNames[] = {"other",           "expert_weights",
                                       "optimizer_state", "dispatch_buffers",
                                       "activations",     "cuda_driver"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumMemoryCategories);
  return category >= 0 && category < kNumMemoryCategories ? kNames[category] : "other";
}

const char* clock_alignment_method_name(ClockAlignmentMethod method) {
  static const char* const kNames[] = {"single host", "clock-sync points", "collective ends",
                                       "wall clock", "none"};
  return name_at(kNames, static_cast<size_t>(method), "?");
}

const char* step_source_name(StepSource source) {
  static const char* const kNames[] = {"none", "step markers", "repeating range",
                                       "ProfilerStep ranges", "optimizer steps"};
  return name_at(kNames, static_cast<size_t>(source), "?");
}

}  // namespace moescope::analysis

// Names of the model's enums, for reports, exports and the viewer.
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

const char* gpu_op_kind_name(GpuOpKind kind) {
  switch (kind) {
    case GpuOpKind::kKernel:
      return "kernel";
    case GpuOpKind::kMemcpy:
      return "memcpy";
    case GpuOpKind::kMemset:
      return "memset";
    case GpuOpKind::kSync:
      return "sync";
  }
  return "?";
}

const char* memory_category_name(int category) {
  static const char* const kNames[kNumMemoryCategories] = {"other",           "expert_weights",
                                                           "optimizer_state", "dispatch_buffers",
                                                           "activations",     "cuda_driver"};
  return category >= 0 && category < kNumMemoryCategories ? kNames[category] : "other";
}

const char* clock_alignment_method_name(ClockAlignmentMethod method) {
  switch (method) {
    case ClockAlignmentMethod::kSingleHost:
      return "single host";
    case ClockAlignmentMethod::kClockSync:
      return "clock-sync points";
    case ClockAlignmentMethod::kCollectiveEnds:
      return "collective ends";
    case ClockAlignmentMethod::kWallClock:
      return "wall clock";
    case ClockAlignmentMethod::kNone:
      return "none";
  }
  return "?";
}

const char* step_source_name(StepSource source) {
  switch (source) {
    case StepSource::kNone:
      return "none";
    case StepSource::kMarkers:
      return "step markers";
    case StepSource::kRepeatingRange:
      return "repeating range";
    case StepSource::kProfilerSteps:
      return "ProfilerStep ranges";
    case StepSource::kOptimizerSteps:
      return "optimizer steps";
  }
  return "?";
}

}  // namespace moescope::analysis

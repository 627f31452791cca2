#include <cstring>

#include "moescope/profiler/trace_format.h"

namespace moescope::trace {

const char* record_kind_name(uint8_t kind) {
  switch (static_cast<RecordKind>(kind)) {
    case RecordKind::kSpanBegin:
      return "span_begin";
    case RecordKind::kSpanEnd:
      return "span_end";
    case RecordKind::kSpanComplete:
      return "span_complete";
    case RecordKind::kRangeStart:
      return "range_start";
    case RecordKind::kRangeEnd:
      return "range_end";
    case RecordKind::kInstant:
      return "instant";
    case RecordKind::kCounter:
      return "counter";
    case RecordKind::kFlow:
      return "flow";
    case RecordKind::kApiCall:
      return "api_call";
    case RecordKind::kGpuKernel:
      return "gpu_kernel";
    case RecordKind::kGpuCopy:
      return "gpu_copy";
    case RecordKind::kMemory:
      return "memory";
    case RecordKind::kGpuSync:
      return "gpu_sync";
    case RecordKind::kCommOp:
      return "comm_op";
    case RecordKind::kExpertLoad:
      return "expert_load";
    case RecordKind::kExpertValues:
      return "expert_values";
    case RecordKind::kLayerStats:
      return "layer_stats";
    case RecordKind::kStep:
      return "step";
    case RecordKind::kRebalance:
      return "rebalance";
    case RecordKind::kThreadInfo:
      return "thread_info";
    case RecordKind::kString:
      return "string";
    case RecordKind::kClockSync:
      return "clock_sync";
    case RecordKind::kStats:
      return "stats";
  }
  return "unknown";
}

uint64_t declared_tail_bytes(const uint8_t* record) {
  auto field = [record](size_t offset) {
    uint32_t value;
    std::memcpy(&value, record + offset, sizeof(value));
    return uint64_t{value};
  };
  switch (static_cast<RecordKind>(record[0])) {
    case RecordKind::kString:
      return field(offsetof(StringRecord, length));
    case RecordKind::kExpertLoad:
      return field(offsetof(ExpertLoadRecord, num_experts)) * sizeof(uint32_t);
    case RecordKind::kExpertValues:
      return field(offsetof(ExpertValuesRecord, num_experts)) * sizeof(float);
    case RecordKind::kCommOp:
      return field(offsetof(CommOpRecord, num_splits)) * sizeof(uint64_t);
    default:
      return 0;
  }
}

}  // namespace moescope::trace

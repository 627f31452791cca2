// The record-kind table: one row per kind of trace_format.h, naming, sizing and describing it.
// docs/trace-format.md's records table is the same table in prose.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moescope/trace/trace_format.h"

namespace moescope::trace {

// One row per kind, in kind order: its name, fixed size, whether the field after the header is
// an end time (delta-coded against the start) and, for kinds with a variable tail, which u32
// field counts the tail's elements and their size. The writer's column coding, the reader's
// checks, delta coding, `moescope info` and tests/profiler's check of docs/trace-format.md all
// read this table. Adding a kind = its struct above, a row here, kMaxRecordKind, its encoder (the
// recorder / writer) and its decoder (profiler/analysis/moetrace_file_load.cpp).
struct RecordKindInfo {
  RecordKind kind;
  const char* name;
  uint16_t fixed_size;
  bool has_end_time;
  uint16_t tail_count_offset;   // offset of the u32 element count; 0 = fixed size
  uint16_t tail_element_bytes;  // bytes per tail element
  const char* description;
};

namespace record_kind_table {
template <typename Record>
constexpr RecordKindInfo fixed(RecordKind kind, const char* name, const char* description) {
  return {kind, name, sizeof(Record), false, 0, 0, description};
}
// Kinds whose first field after the header is `uint64_t end_time`.
template <typename Record>
constexpr RecordKindInfo with_end_time(RecordKind kind, const char* name, const char* description) {
  static_assert(offsetof(Record, end_time) == sizeof(RecordHeader));
  return {kind, name, sizeof(Record), true, 0, 0, description};
}
}  // namespace record_kind_table

inline constexpr RecordKindInfo kRecordKinds[] = {
    record_kind_table::fixed<SpanBeginRecord>(RecordKind::kSpanBegin, "span_begin",
                                              "a CPU span opens on this stream"),
    record_kind_table::fixed<SpanEndRecord>(RecordKind::kSpanEnd, "span_end",
                                            "the innermost open span of the stream closes"),
    record_kind_table::with_end_time<SpanCompleteRecord>(RecordKind::kSpanComplete, "span_complete",
                                                         "a CPU span written with both times"),
    record_kind_table::fixed<RangeStartRecord>(RecordKind::kRangeStart, "range_start",
                                               "a range that may end on another stream"),
    record_kind_table::fixed<RangeEndRecord>(RecordKind::kRangeEnd, "range_end",
                                             "the range with this id ends"),
    record_kind_table::fixed<InstantRecord>(RecordKind::kInstant, "instant", "a marker"),
    record_kind_table::fixed<CounterRecord>(RecordKind::kCounter, "counter",
                                            "one value of a named time series"),
    record_kind_table::fixed<FlowRecord>(RecordKind::kFlow, "flow",
                                         "one end of an arrow between two points"),
    record_kind_table::with_end_time<ApiCallRecord>(RecordKind::kApiCall, "api_call",
                                                    "a CUDA API call (the parent of its GPU work)"),
    record_kind_table::with_end_time<GpuKernelRecord>(RecordKind::kGpuKernel, "gpu_kernel",
                                                      "a kernel on a GPU stream"),
    record_kind_table::with_end_time<GpuCopyRecord>(RecordKind::kGpuCopy, "gpu_copy",
                                                    "a memcpy or memset on a GPU stream"),
    record_kind_table::fixed<MemoryRecord>(RecordKind::kMemory, "memory",
                                           "an allocation or a free"),
    record_kind_table::with_end_time<GpuSyncRecord>(RecordKind::kGpuSync, "gpu_sync",
                                                    "the host waits for the GPU"),
    {RecordKind::kCommOp, "comm_op", sizeof(CommOpRecord), true, offsetof(CommOpRecord, num_splits),
     sizeof(uint64_t), "a communication op; all-to-alls carry the bytes sent to each rank"},
    {RecordKind::kExpertLoad, "expert_load", sizeof(ExpertLoadRecord), false,
     offsetof(ExpertLoadRecord, num_experts), sizeof(uint32_t),
     "tokens per expert of one MoE layer in one step"},
    {RecordKind::kExpertValues, "expert_values", sizeof(ExpertValuesRecord), false,
     offsetof(ExpertValuesRecord, num_experts), sizeof(float),
     "one float per expert (predicted load, router bias, ...)"},
    record_kind_table::fixed<LayerStatsRecord>(RecordKind::kLayerStats, "layer_stats",
                                               "router statistics of one MoE layer in one step"),
    record_kind_table::fixed<StepRecord>(RecordKind::kStep, "step",
                                         "this rank starts a training step"),
    record_kind_table::fixed<RebalanceRecord>(RecordKind::kRebalance, "rebalance",
                                              "an expert rebalancing decision"),
    record_kind_table::fixed<ThreadInfoRecord>(RecordKind::kThreadInfo, "thread_info",
                                               "names the stream's thread"),
    {RecordKind::kString, "string", sizeof(StringRecord), false, offsetof(StringRecord, length), 1,
     "defines an interned string id"},
    record_kind_table::fixed<ClockSyncRecord>(RecordKind::kClockSync, "clock_sync",
                                              "all ranks pass this point together"),
    record_kind_table::fixed<StatsRecord>(RecordKind::kStats, "stats",
                                          "running totals of what was lost"),
    record_kind_table::fixed<TriggerRecord>(RecordKind::kTrigger, "trigger",
                                            "the flight recorder wrote its ring: why and when"),
};
static_assert(sizeof(kRecordKinds) / sizeof(kRecordKinds[0]) == kMaxRecordKind);
constexpr bool record_kinds_in_order() {
  for (uint8_t i = 0; i < kMaxRecordKind; ++i) {
    if (static_cast<uint8_t>(kRecordKinds[i].kind) != i + 1) return false;
    if (kRecordKinds[i].fixed_size % 8 != 0) return false;
  }
  return true;
}
static_assert(record_kinds_in_order(), "kRecordKinds lists kinds 1..kMaxRecordKind in order");

// True for the kinds kRecordKinds lists.
constexpr bool is_known_record_kind(uint8_t kind) {
  return kind >= 1 && kind <= kMaxRecordKind;
}

// The kind's row, or null for an unknown kind. (The constexpr queries below index the table
// instead of testing this pointer: GCC's UBSan makes a pointer test non-constant.)
constexpr const RecordKindInfo* record_kind_info(uint8_t kind) {
  return is_known_record_kind(kind) ? &kRecordKinds[kind - 1] : nullptr;
}

// Fixed size of each kind (0 = unknown kind). Variable-length kinds return their fixed part.
constexpr uint32_t fixed_record_size(uint8_t kind) {
  return is_known_record_kind(kind) ? kRecordKinds[kind - 1].fixed_size : 0;
}

// True for kinds whose field after the header is an end time (delta-coded against the start).
constexpr bool has_end_time(uint8_t kind) {
  return is_known_record_kind(kind) && kRecordKinds[kind - 1].has_end_time;
}

// True for kinds followed by a tail whose length a field declares.
constexpr bool has_variable_tail(uint8_t kind) {
  return is_known_record_kind(kind) && kRecordKinds[kind - 1].tail_count_offset != 0;
}

// "span_begin", ...; "unknown" for an unknown kind.
constexpr const char* record_kind_name(uint8_t kind) {
  return is_known_record_kind(kind) ? kRecordKinds[kind - 1].name : "unknown";
}

// Bytes of variable tail that a record (of at least its kind's fixed size) declares it carries:
// a string's length, 4 per expert, 8 per split; 0 for the fixed-size kinds.
uint64_t declared_tail_bytes(const uint8_t* record);

}  // namespace moescope::trace

// The C ABI of moescope/recorder.h, on top of the process-wide Recorder.
// Every entry point is safe to call at any time: with no recording it returns at once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "moescope/recorder.h"
#include "moescope/trace/record_kinds.h"
#include "recorder.h"

using moescope::recorder::begin_record;
using moescope::recorder::read_ticks;
using moescope::recorder::Recorder;
using moescope::recorder::ThreadBuffer;
namespace trace = moescope::trace;

extern "C" {
MOESCOPE_API volatile int moescope_recording = 0;
}

namespace {

std::atomic<uint64_t> g_next_range_id{1};

// Largest variable tail that fits a record (sizes are 16-bit).
constexpr uint32_t kMaxRecordBytes = 0xFFF8;

// Inlined into every entry point: the hot path is one flag test, one TLS load and one compare.
__attribute__((always_inline)) inline ThreadBuffer* active_buffer() {
  if (!moescope_recording) return nullptr;
  return Recorder::instance().thread_buffer();
}

// Fast-path records carry raw CPU ticks; the flush thread converts them to ns.
template <typename Record>
Record* begin_now(ThreadBuffer* buffer, trace::RecordKind kind, uint32_t name,
                  uint32_t bytes = sizeof(Record)) {
  Record* record = begin_record<Record>(buffer, kind, name, bytes);
  if (record) {
    record->header.flags = trace::kRecordRawTicks;
    record->header.time = read_ticks();
  }
  return record;
}

// One layer's record with a 4-byte value per expert after it, stamped now: its position is set
// here, `fill(record, tail)` writes the kind's own fields and the tail from `values` (null only
// with no experts). Counted as dropped when the tail would not fit a record.
template <typename Record, typename Fill>
void record_per_expert(trace::RecordKind kind, int64_t step, uint32_t layer, int32_t rank,
                       const void* values, uint32_t num_experts, Fill fill) {
  ThreadBuffer* buffer = active_buffer();
  if (!buffer || (!values && num_experts)) return;
  if (num_experts > (kMaxRecordBytes - sizeof(Record)) / 4) {
    Recorder::instance().count_dropped(1);
    return;
  }
  const uint32_t bytes = trace::padded_to_8(sizeof(Record) + 4 * num_experts);
  Record* record = begin_now<Record>(buffer, kind, 0, bytes);
  if (!record) return;
  record->step = step;
  record->layer = layer;
  record->rank = rank;
  record->num_experts = num_experts;
  fill(*record, reinterpret_cast<uint8_t*>(record) + sizeof(Record));
  buffer->commit(bytes);
}

// A fixed-size record stamped with a time in ns the caller measured (GPU activity from CUPTI,
// host API calls, memory events, clock syncs): `fill(record)` writes the kind's own fields.
template <typename Record, typename Fill>
void record_at(trace::RecordKind kind, uint32_t name, uint64_t time_ns, Fill fill) {
  ThreadBuffer* buffer = active_buffer();
  if (!buffer) return;
  Record* record = begin_record<Record>(buffer, kind, name);
  if (!record) return;
  record->header.time = time_ns;
  fill(*record);
  buffer->commit(sizeof(Record));
}

// General path of record_now(): registers the thread, takes a new block, or drops the record.
template <typename Record, typename Fill>
__attribute__((noinline)) void record_now_slow(trace::RecordKind kind, uint32_t name, Fill fill) {
  ThreadBuffer* buffer = active_buffer();
  if (!buffer) return;
  Record* record = begin_now<Record>(buffer, kind, name);
  if (!record) return;
  fill(*record);
  buffer->commit(sizeof(Record));
}

// The hot path of fixed-size records stamped with the CPU clock (spans, instants, counters).
// When the thread's buffer has room it is a leaf: no call, so no registers to save, one TLS
// load, the record's words stored once, then the release store of `committed`.
// Anything else tail-calls record_now_slow().
template <typename Record, typename Fill>
__attribute__((always_inline)) inline void record_now(trace::RecordKind kind, uint32_t name,
                                                      Fill fill) {
  if (!moescope_recording) return;
  ThreadBuffer* buffer = Recorder::registered_thread_buffer();
  ThreadBuffer::Reservation slot;
  if (__builtin_expect(!buffer || !buffer->try_reserve(sizeof(Record), slot), 0)) {
    return record_now_slow<Record>(kind, name, fill);
  }
  // Stored field by field straight into the buffer: building the record on the stack and
  // copying it would read back bytes just stored (a store-forwarding stall).
  uint64_t first_word = static_cast<uint64_t>(kind) | uint64_t{trace::kRecordRawTicks} << 8 |
                        uint64_t{sizeof(Record)} << 16 | uint64_t{name} << 32;
  std::memcpy(slot.data, &first_word, sizeof(first_word));
  uint64_t ticks = read_ticks();
  std::memcpy(slot.data + offsetof(trace::RecordHeader, time), &ticks, sizeof(ticks));
  if constexpr (sizeof(Record) > sizeof(trace::RecordHeader)) {
    std::memset(slot.data + sizeof(trace::RecordHeader), 0,
                sizeof(Record) - sizeof(trace::RecordHeader));  // reserved fields stay 0
  }
  fill(*reinterpret_cast<Record*>(slot.data));
  buffer->commit(slot);
}

}  // namespace

extern "C" {

int moescope_recorder_start(const char* path, const char* metadata_json) {
  return Recorder::instance().start(path, metadata_json) ? 0 : -1;
}

void moescope_recorder_stop(void) {
  Recorder::instance().stop();
}

void moescope_recorder_flush(void) {
  Recorder::instance().flush();
}

const char* moescope_recorder_path(void) {
  Recorder& recorder = Recorder::instance();
  return recorder.active() ? recorder.path().c_str() : nullptr;
}

moescope_name_t moescope_intern(const char* str) {
  if (!str) return 0;
  return moescope_intern_n(str, std::strlen(str));
}

moescope_name_t moescope_intern_n(const char* str, size_t length) {
  if (!str) return 0;
  Recorder& recorder = Recorder::instance();
  // Through the thread's cache when it has a buffer: repeated NVTX messages skip the lock.
  if (ThreadBuffer* buffer = active_buffer()) {
    return buffer->string_cache().intern(recorder.strings(), std::string_view(str, length));
  }
  return recorder.strings().intern(std::string_view(str, length));
}

uint64_t moescope_now_ns(void) {
  return moescope::recorder::monotonic_ns();
}

void moescope_thread_name(const char* name) {
  if (moescope_recording) Recorder::instance().rename_current_thread(name);
}

void moescope_span_begin_impl(moescope_name_t domain, moescope_name_t name) {
  record_now<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, name,
                                     [domain](trace::SpanBeginRecord& r) { r.domain = domain; });
}

void moescope_span_end_impl(void) {
  record_now<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 0, [](trace::SpanEndRecord&) {});
}

void moescope_span_complete(moescope_name_t domain, moescope_name_t name, uint64_t begin_ns,
                            uint64_t end_ns) {
  record_at<trace::SpanCompleteRecord>(trace::RecordKind::kSpanComplete, name, begin_ns,
                                       [&](trace::SpanCompleteRecord& r) {
                                         r.end_time = std::max(begin_ns, end_ns);
                                         r.domain = domain;
                                       });
}

uint64_t moescope_range_start(moescope_name_t domain, moescope_name_t name) {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  record_now<trace::RangeStartRecord>(trace::RecordKind::kRangeStart, name,
                                      [id, domain](trace::RangeStartRecord& r) {
                                        r.range_id = id;
                                        r.domain = domain;
                                      });
  return id;
}

void moescope_range_end(uint64_t range_id) {
  record_now<trace::RangeEndRecord>(
      trace::RecordKind::kRangeEnd, 0,
      [range_id](trace::RangeEndRecord& r) { r.range_id = range_id; });
}

void moescope_instant(moescope_name_t domain, moescope_name_t name) {
  record_now<trace::InstantRecord>(trace::RecordKind::kInstant, name,
                                   [domain](trace::InstantRecord& r) { r.domain = domain; });
}

void moescope_counter(moescope_name_t name, double value) {
  record_now<trace::CounterRecord>(trace::RecordKind::kCounter, name,
                                   [value](trace::CounterRecord& r) { r.value = value; });
}

void moescope_flow(uint64_t flow_id, int phase) {
  record_now<trace::FlowRecord>(trace::RecordKind::kFlow, 0,
                                [flow_id, phase](trace::FlowRecord& r) {
                                  r.flow_id = flow_id;
                                  r.phase = phase ? 1 : 0;
                                });
}

void moescope_step(int64_t step) {
  record_now<trace::StepRecord>(trace::RecordKind::kStep, 0,
                                [step](trace::StepRecord& r) { r.step = step; });
}

void moescope_step_end(int64_t step) {
  if (!moescope_recording) return;
  record_now<trace::StepRecord>(trace::RecordKind::kStep, moescope_intern("end"),
                                [step](trace::StepRecord& r) { r.step = step; });
}

void moescope_clock_sync(uint64_t sync_id) {
  if (!moescope_recording) return;
  // In ns, precise, not in ticks: the clock alignment pairs it with the other ranks'.
  record_at<trace::ClockSyncRecord>(trace::RecordKind::kClockSync, 0,
                                    moescope::recorder::monotonic_ns(),
                                    [sync_id](trace::ClockSyncRecord& r) { r.sync_id = sync_id; });
}

void moescope_expert_load(int64_t step, uint32_t layer, int32_t rank, uint32_t scope,
                          const int64_t* tokens_per_expert, uint32_t num_experts,
                          uint64_t dropped_tokens) {
  record_per_expert<trace::ExpertLoadRecord>(
      trace::RecordKind::kExpertLoad, step, layer, rank, tokens_per_expert, num_experts,
      [&](trace::ExpertLoadRecord& record, uint8_t* counts) {
        record.scope = scope;
        record.dropped_tokens = dropped_tokens;
        for (uint32_t e = 0; e < num_experts; ++e) {
          int64_t tokens = tokens_per_expert[e];
          uint32_t clamped =
              tokens < 0 ? 0u : static_cast<uint32_t>(std::min<int64_t>(tokens, UINT32_MAX));
          std::memcpy(counts + 4 * e, &clamped, 4);
        }
      });
}

void moescope_expert_values(int64_t step, uint32_t layer, int32_t rank, uint32_t quantity,
                            const float* values, uint32_t num_experts) {
  record_per_expert<trace::ExpertValuesRecord>(
      trace::RecordKind::kExpertValues, step, layer, rank, values, num_experts,
      [&](trace::ExpertValuesRecord& record, uint8_t* tail) {
        record.quantity = quantity;
        std::memcpy(tail, values, 4 * size_t{num_experts});
      });
}

void moescope_layer_stats_record(const moescope_layer_stats* stats) {
  if (!stats) return;
  record_now<trace::LayerStatsRecord>(
      trace::RecordKind::kLayerStats, 0, [stats](trace::LayerStatsRecord& r) {
        MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_LAYER_STATS, r, *stats);
      });
}

void moescope_rebalance(const moescope_rebalance_info* info) {
  moescope_rebalance_decision(info, nullptr);
}

void moescope_rebalance_decision(const moescope_rebalance_info* info,
                                 const moescope_rebalance_costs* costs) {
  ThreadBuffer* buffer = active_buffer();
  if (!buffer || !info) return;
  const uint32_t num_costs = costs ? 1 : 0;
  const uint32_t bytes = trace::padded_to_8(static_cast<uint32_t>(
      sizeof(trace::RebalanceRecord) + num_costs * sizeof(trace::RebalanceCosts)));
  auto* record = begin_now<trace::RebalanceRecord>(buffer, trace::RecordKind::kRebalance, 0, bytes);
  if (!record) return;
  MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_REBALANCE, *record, *info);
  record->applied = info->applied;
  record->num_costs = num_costs;
  if (costs) {
    trace::RebalanceCosts tail{};
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_REBALANCE_COSTS, tail, *costs);
    uint8_t* tail_bytes = reinterpret_cast<uint8_t*>(record) + sizeof(trace::RebalanceRecord);
    std::memset(tail_bytes, 0, bytes - sizeof(trace::RebalanceRecord));  // the padding too
    std::memcpy(tail_bytes, &tail, sizeof(tail));
  }
  buffer->commit(bytes);
}

void moescope_comm_op(const moescope_comm_op_info* op) {
  ThreadBuffer* buffer = active_buffer();
  if (!buffer || !op) return;
  moescope::recorder::collective_completed(op);
  uint32_t splits = op->split_bytes ? op->num_splits : 0;
  if (splits > (kMaxRecordBytes - sizeof(trace::CommOpRecord)) / 8) splits = 0;
  uint32_t bytes = sizeof(trace::CommOpRecord) + 8 * splits;
  auto* record =
      begin_record<trace::CommOpRecord>(buffer, trace::RecordKind::kCommOp, op->name, bytes);
  if (!record) return;
  record->header.time = op->enqueue_ns;
  record->end_time = op->end_ns;
  record->start_time = op->start_ns;
  record->count = op->count;
  record->bytes = op->bytes;
  record->comm_id = op->comm_id;
  record->group_id = op->group_id;
  record->kind = op->kind;
  record->dtype = op->dtype;
  MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_COMM_PLACE, *record, *op);
  record->num_splits = splits;
  if (splits) {
    std::memcpy(reinterpret_cast<uint8_t*>(record) + sizeof(trace::CommOpRecord), op->split_bytes,
                8 * size_t{splits});
  }
  buffer->commit(bytes);
}

void moescope_memory_event_at(uint64_t time_ns, uint64_t address, uint64_t bytes, int32_t device,
                              uint32_t category, int is_free) {
  record_at<trace::MemoryRecord>(trace::RecordKind::kMemory, 0, time_ns,
                                 [&](trace::MemoryRecord& r) {
                                   r.address = address;
                                   r.bytes = bytes;
                                   r.device = device;
                                   r.category = static_cast<uint16_t>(category);
                                   r.is_free = is_free ? 1 : 0;
                                 });
}

void moescope_memory_event(uint64_t address, uint64_t bytes, int32_t device, uint32_t category,
                           int is_free) {
  if (!moescope_recording) return;
  moescope_memory_event_at(moescope::recorder::monotonic_ns(), address, bytes, device, category,
                           is_free);
}

void moescope_gpu_kernel(const moescope_gpu_kernel_info* kernel) {
  if (!kernel) return;
  record_at<trace::GpuKernelRecord>(trace::RecordKind::kGpuKernel, kernel->name, kernel->start_ns,
                                    [kernel](trace::GpuKernelRecord& r) {
                                      r.end_time = kernel->end_ns;
                                      MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_GPU_KERNEL, r, *kernel);
                                    });
}

void moescope_gpu_copy(const moescope_gpu_copy_info* copy) {
  if (!copy) return;
  record_at<trace::GpuCopyRecord>(trace::RecordKind::kGpuCopy, 0, copy->start_ns,
                                  [copy](trace::GpuCopyRecord& r) {
                                    r.end_time = copy->end_ns;
                                    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_GPU_COPY, r, *copy);
                                    r.copy_kind = static_cast<uint8_t>(copy->copy_kind);
                                    r.is_memset = copy->is_memset ? 1 : 0;
                                    r.value = copy->value;
                                  });
}

void moescope_api_call(moescope_name_t name, uint64_t start_ns, uint64_t end_ns,
                       uint32_t correlation_id) {
  record_at<trace::ApiCallRecord>(trace::RecordKind::kApiCall, name, start_ns,
                                  [&](trace::ApiCallRecord& r) {
                                    r.end_time = end_ns;
                                    r.correlation_id = correlation_id;
                                  });
}

void moescope_gpu_sync(uint32_t sync_kind, uint64_t start_ns, uint64_t end_ns, uint32_t device,
                       uint32_t stream, uint32_t correlation_id) {
  record_at<trace::GpuSyncRecord>(trace::RecordKind::kGpuSync, 0, start_ns,
                                  [&](trace::GpuSyncRecord& r) {
                                    r.end_time = end_ns;
                                    r.sync_kind = sync_kind;
                                    r.correlation_id = correlation_id;
                                    r.device = device;
                                    r.stream = stream;
                                  });
}

void moescope_trigger(const moescope_trigger_info* trigger) {
  if (!trigger) return;
  if (moescope::recorder::flight_recorder_takes(trigger)) return;
  if (!moescope_recording) return;
  const uint64_t time_ns = trigger->time_ns ? trigger->time_ns : moescope::recorder::monotonic_ns();
  record_at<trace::TriggerRecord>(trace::RecordKind::kTrigger, trigger->detail, time_ns,
                                  [trigger](trace::TriggerRecord& r) {
                                    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_TRIGGER, r, *trigger);
                                  });
}

void moescope_count_dropped(uint64_t records) {
  Recorder::instance().count_dropped(records);
}

}  // extern "C"

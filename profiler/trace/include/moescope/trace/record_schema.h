/* moescope/trace/record_schema.h — every .moetrace record kind, declared once.
 *
 * This file is the schema of the trace: the list of kinds (number, name, size, coding, docs
 * line) and, per kind, the fields that follow the 16-byte record header. Everything else is
 * generated from it:
 *   - the packed on-disk structs and `RecordKind` (trace_format.h), their sizes static_asserted;
 *   - the kind table `kRecordKinds` with each kind's field list (record_kinds.h), which column
 *     coding, the reader's checks, `moescope info` and the docs check read;
 *   - `dispatch_record` (record_kinds.h): one named handler per kind, so a decoder is one
 *     overload per record struct and a switch nobody writes by hand;
 *   - the C ABI structs of moescope/recorder.h and the trace model's structs, where they share
 *     a field list (the `MOESCOPE_FIELDS_*` lists below), and the recorder's encoders and the
 *     loader's decoders that copy those lists field by field.
 * docs/trace-format.md's records table is checked against it (tests/profiler).
 *
 * It is C-compatible (macros only, no includes beyond <stdint.h>), because the C header
 * moescope/recorder.h builds its structs from the same lists.
 *
 * A field is F(type, name, dims, init, doc): `dims` is empty or an array extent like [3],
 * `init` is the value a model struct starts with (`{}` = zero), `doc` says what it holds.
 *
 * Adding a kind: its row in MOESCOPE_RECORD_KINDS with the next number (kMaxRecordKind follows),
 * its field list here, its encoder (moescope/recorder.h + recorder_api.cpp), its decoder (one
 * `on(const XRecord&, ...)` in profiler/analysis/moetrace_file_load.cpp), its model struct in
 * trace_model.h, its row in docs/trace-format.md.
 */
#ifndef MOESCOPE_TRACE_RECORD_SCHEMA_H
#define MOESCOPE_TRACE_RECORD_SCHEMA_H

#include <stdint.h>

/* ---- field lists shared by the C ABI, the on-disk record and the model ---------------------- */

/* The fields of one MoE layer's statistics in one step (also its training coordinates). */
#define MOESCOPE_FIELDS_LAYER_POSITION(F)     \
  F(int64_t, step, , {}, "training step")     \
  F(uint32_t, layer, , {}, "MoE layer index") \
  F(int32_t, rank, , {}, "the rank that recorded it")

#define MOESCOPE_FIELDS_LAYER_STATS(F)                                                   \
  MOESCOPE_FIELDS_LAYER_POSITION(F)                                                      \
  F(float, aux_loss, , {}, "load-balancing loss; NaN when not computed")                 \
  F(float, z_loss, , {}, "router z-loss; NaN when not computed")                         \
  F(float, router_entropy, , {}, "mean entropy of the routing distribution, nats")       \
  F(float, max_over_mean, , {}, "max/mean tokens per expert (global scope)")             \
  F(uint32_t, nonfinite_logits, , {}, "router logits that were NaN/Inf (> 0: an event)") \
  F(uint32_t, nonfinite_outputs, , {}, "layer outputs that were NaN/Inf (> 0: an event)")

/* A rebalancing decision, up to `applied` (an int32 on disk and in C, a bool in the model). */
#define MOESCOPE_FIELDS_REBALANCE(F)                                                          \
  MOESCOPE_FIELDS_LAYER_POSITION(F)                                                           \
  F(float, imbalance_before, , {}, "predicted max/mean per-rank load with the old placement") \
  F(float, imbalance_after, , {}, "predicted max/mean per-rank load with the new placement")  \
  F(uint64_t, bytes_moved, , {}, "expert weights moved")                                      \
  F(uint64_t, duration_ns, , {}, "time the move took")

/* The numbers a rebalancing decision was taken on (the rebalance record's tail, version 3; the
 * C ABI's moescope_rebalance_costs; the model's RebalanceDecision). Times in ms; "net" is
 * gain - replica_sync - migration / window, > 0 when the step gets faster. */
#define MOESCOPE_FIELDS_REBALANCE_COSTS(F)                                      \
  F(float, busiest_rows_before, , {},                                           \
    "predicted rows per step of the busiest rank, old placement")               \
  F(float, busiest_rows_after, , {}, "the same with the planned placement")     \
  F(float, gain_ms, , {}, "predicted step time saved per step")                 \
  F(float, replica_sync_ms, , {}, "replica gradient all-reduce added per step") \
  F(float, migration_ms, , {}, "one-off cost of the move")                      \
  F(float, window_steps, , {}, "steps the placement is expected to be kept")    \
  F(float, net_ms, , {}, "gain - replica sync - migration / window, per step")  \
  F(float, net_stderr_ms, , {}, "standard error of the net")                    \
  F(uint32_t, reason, , {}, "moescope_rebalance_reason")

#define MOESCOPE_FIELDS_EXPERT_LOAD(F)                               \
  MOESCOPE_FIELDS_LAYER_POSITION(F)                                  \
  F(uint32_t, scope, , {}, "moescope_expert_scope")                  \
  F(uint32_t, num_experts, , {}, "elements of the tail: u32 tokens") \
  F(uint64_t, dropped_tokens, , {}, "tokens over capacity")

#define MOESCOPE_FIELDS_EXPERT_VALUES(F)                  \
  MOESCOPE_FIELDS_LAYER_POSITION(F)                       \
  F(uint32_t, quantity, , {}, "moescope_expert_quantity") \
  F(uint32_t, num_experts, , {}, "elements of the tail: f32 values")

/* A kernel's launch: C ABI, on disk (after end_time) and the model's KernelDetail. */
#define MOESCOPE_FIELDS_KERNEL_LAUNCH(F)                                   \
  F(                                                                       \
      uint32_t, grid, [3], {}, "grid size x, y, z")                        \
  F(                                                                       \
      uint32_t, block, [3], {}, "block size x, y, z")                      \
  F(uint32_t, shared_memory_bytes, , {}, "static + dynamic shared memory") \
  F(uint32_t, registers_per_thread, , {}, "registers per thread")

#define MOESCOPE_FIELDS_GPU_KERNEL(F)                                   \
  F(uint32_t, correlation_id, , {}, "links the kernel to its API call") \
  F(uint32_t, device, , {}, "CUDA device")                              \
  F(uint32_t, context, , {}, "CUDA context id")                         \
  F(uint32_t, stream, , {}, "CUDA stream id")                           \
  MOESCOPE_FIELDS_KERNEL_LAUNCH(F)

/* A copy or memset, after its end time (C ABI and on disk). */
#define MOESCOPE_FIELDS_GPU_COPY(F)                                   \
  F(uint64_t, bytes, , {}, "bytes copied or set")                     \
  F(uint32_t, correlation_id, , {}, "links the copy to its API call") \
  F(uint32_t, device, , {}, "CUDA device")                            \
  F(uint32_t, stream, , {}, "CUDA stream id")

/* Where a communication op ran: C ABI, on disk and the model's CommOp. */
#define MOESCOPE_FIELDS_COMM_PLACE(F)                           \
  F(int32_t, rank, , -1, "this rank inside the communicator")   \
  F(int32_t, num_ranks, , {}, "ranks of the communicator")      \
  F(int32_t, peer, , -1, "send/recv peer, -1 otherwise")        \
  F(int32_t, root, , -1, "broadcast/reduce root, -1 otherwise") \
  F(int32_t, device, , -1, "CUDA device, -1 for CPU (Gloo)")    \
  F(uint32_t, stream, , {}, "CUDA stream id, 0 for CPU")        \
  F(uint32_t, sequence, , {}, "per-communicator sequence number")

/* Why the flight recorder wrote its ring (C ABI, on disk and the model's TriggerEvent). */
#define MOESCOPE_FIELDS_TRIGGER(F)                                                               \
  F(uint32_t, reason, , {}, "moescope_trigger_reason")                                           \
  F(int32_t, origin_rank, , -1, "the rank whose trigger started the job-wide dump (-1 unknown)") \
  F(int32_t, code, , {}, "signal number (crash/signal), exit status (exit), else 0")

/* A collective this rank entered and had not completed a second later (on disk and the model's
 * CollectiveOpen): what a hung job waits in, since a collective is written once it completed. */
#define MOESCOPE_FIELDS_COLLECTIVE_OPEN(F)                        \
  F(uint64_t, comm_id, , {}, "communicator identity")             \
  F(uint64_t, bytes, , {}, "bytes this rank sends")               \
  F(uint32_t, kind, , {}, "moescope_comm_kind")                   \
  F(uint32_t, sequence, , {}, "per-communicator sequence number") \
  F(int32_t, rank, , -1, "this rank inside the communicator")     \
  F(int32_t, num_ranks, , {}, "ranks of the communicator")

/* ---- on-disk records: the fields after the header, in order --------------------------------- */

#define MOESCOPE_RECORD_SPAN_BEGIN(F)                       \
  F(uint32_t, domain, , {}, "name id of the span's domain") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_SPAN_END(F)
#define MOESCOPE_RECORD_SPAN_COMPLETE(F)                    \
  F(uint64_t, end_time, , {}, "ns")                         \
  F(uint32_t, domain, , {}, "name id of the span's domain") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_RANGE_START(F)                       \
  F(uint64_t, range_id, , {}, "matches the range_end")       \
  F(uint32_t, domain, , {}, "name id of the range's domain") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_RANGE_END(F) F(uint64_t, range_id, , {}, "the range that ends")
#define MOESCOPE_RECORD_INSTANT(F)                            \
  F(uint32_t, domain, , {}, "name id of the marker's domain") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_COUNTER(F) F(double, value, , {}, "the counter's value")
#define MOESCOPE_RECORD_FLOW(F)                    \
  F(uint64_t, flow_id, , {}, "both ends share it") \
  F(uint32_t, phase, , {}, "0 start, 1 end")       \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_API_CALL(F)                                       \
  F(uint64_t, end_time, , {}, "ns")                                       \
  F(uint32_t, correlation_id, , {}, "GPU work with this id is its child") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_GPU_KERNEL(F) \
  F(uint64_t, end_time, , {}, "ns")   \
  MOESCOPE_FIELDS_GPU_KERNEL(F)
#define MOESCOPE_RECORD_GPU_COPY(F)                 \
  F(uint64_t, end_time, , {}, "ns")                 \
  MOESCOPE_FIELDS_GPU_COPY(F)                       \
  F(uint8_t, copy_kind, , {}, "moescope_copy_kind") \
  F(uint8_t, is_memset, , {}, "1 for a memset")     \
  F(uint16_t, reserved, , {}, "0")                  \
  F(uint32_t, value, , {}, "memset value")          \
  F(uint32_t, reserved2, , {}, "0")
#define MOESCOPE_RECORD_MEMORY(F)                         \
  F(uint64_t, address, , {}, "the block's address")       \
  F(uint64_t, bytes, , {}, "its size")                    \
  F(int32_t, device, , {}, "CUDA device, -1 host")        \
  F(uint16_t, category, , {}, "moescope_memory_category") \
  F(uint8_t, is_free, , {}, "1 for a release")            \
  F(uint8_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_GPU_SYNC(F)                    \
  F(uint64_t, end_time, , {}, "ns")                    \
  F(uint32_t, sync_kind, , {}, "moescope_sync_kind")   \
  F(uint32_t, correlation_id, , {}, "of the API call") \
  F(uint32_t, device, , {}, "CUDA device")             \
  F(uint32_t, stream, , {}, "the stream waited for")
#define MOESCOPE_RECORD_COMM_OP(F)                                        \
  F(uint64_t, end_time, , {}, "completion, ns; 0 = unknown")              \
  F(uint64_t, start_time, , {}, "transfer start, ns")                     \
  F(uint64_t, count, , {}, "elements")                                    \
  F(uint64_t, bytes, , {}, "bytes this rank sends")                       \
  F(uint64_t, comm_id, , {}, "communicator identity")                     \
  F(uint64_t, group_id, , {}, "ops of one group start/end share it")      \
  F(uint32_t, kind, , {}, "moescope_comm_kind")                           \
  F(uint32_t, dtype, , {}, "ncclDataType_t, or a torch ScalarType + 100") \
  MOESCOPE_FIELDS_COMM_PLACE(F)                                           \
  F(uint32_t, num_splits, , {}, "elements of the tail: u64 split_bytes")
#define MOESCOPE_RECORD_EXPERT_LOAD(F) MOESCOPE_FIELDS_EXPERT_LOAD(F)
#define MOESCOPE_RECORD_EXPERT_VALUES(F) MOESCOPE_FIELDS_EXPERT_VALUES(F)
#define MOESCOPE_RECORD_LAYER_STATS(F) MOESCOPE_FIELDS_LAYER_STATS(F)
#define MOESCOPE_RECORD_STEP(F) F(int64_t, step, , {}, "the training step")
#define MOESCOPE_RECORD_REBALANCE(F)                        \
  MOESCOPE_FIELDS_REBALANCE(F)                              \
  F(int32_t, applied, , {}, "0 when the plan was rejected") \
  F(uint32_t, num_costs, , {}, "elements of the tail: 0 or 1 rebalance costs (36 bytes)")
#define MOESCOPE_RECORD_THREAD_INFO(F)                \
  F(uint32_t, os_thread_id, , {}, "the thread's tid") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_STRING(F)                                       \
  F(uint32_t, length, , {}, "bytes of the tail (UTF-8, no terminator)") \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_CLOCK_SYNC(F) \
  F(uint64_t, sync_id, , {}, "all ranks pass this point together")
#define MOESCOPE_RECORD_STATS(F)                                                \
  F(uint64_t, dropped_events, , {}, "records lost: buffers full")               \
  F(uint64_t, dropped_gpu_records, , {}, "reported by CUPTI or another source") \
  F(uint64_t, failed_writes, , {}, "chunks that could not be written")
#define MOESCOPE_RECORD_TRIGGER(F) \
  MOESCOPE_FIELDS_TRIGGER(F)       \
  F(uint32_t, reserved, , {}, "0")
#define MOESCOPE_RECORD_COLLECTIVE_OPEN(F) MOESCOPE_FIELDS_COLLECTIVE_OPEN(F)

/* ---- the kinds ----------------------------------------------------------------------------
 * X(Enum, number, Struct, FIELDS, "name", size, end_time, tail_count, tail_bytes, "description")
 *   end_time: true when the first field is `uint64_t end_time`, delta-coded against the start;
 *   tail_count, tail_bytes: the u32 field that counts the variable tail's elements and the
 *   bytes of one element (`header, 0`: a fixed-size kind). */
#define MOESCOPE_RECORD_KINDS(X)                                                                   \
  X(kSpanBegin, 1, SpanBeginRecord, MOESCOPE_RECORD_SPAN_BEGIN, "span_begin", 24, false, header,   \
    0, "a CPU span opens on this stream")                                                          \
  X(kSpanEnd, 2, SpanEndRecord, MOESCOPE_RECORD_SPAN_END, "span_end", 16, false, header, 0,        \
    "the innermost open span of the stream closes")                                                \
  X(kSpanComplete, 3, SpanCompleteRecord, MOESCOPE_RECORD_SPAN_COMPLETE, "span_complete", 32,      \
    true, header, 0, "a CPU span written with both times")                                         \
  X(kRangeStart, 4, RangeStartRecord, MOESCOPE_RECORD_RANGE_START, "range_start", 32, false,       \
    header, 0, "a range that may end on another stream")                                           \
  X(kRangeEnd, 5, RangeEndRecord, MOESCOPE_RECORD_RANGE_END, "range_end", 24, false, header, 0,    \
    "the range with this id ends")                                                                 \
  X(kInstant, 6, InstantRecord, MOESCOPE_RECORD_INSTANT, "instant", 24, false, header, 0,          \
    "a marker")                                                                                    \
  X(kCounter, 7, CounterRecord, MOESCOPE_RECORD_COUNTER, "counter", 24, false, header, 0,          \
    "one value of a named time series")                                                            \
  X(kFlow, 8, FlowRecord, MOESCOPE_RECORD_FLOW, "flow", 32, false, header, 0,                      \
    "one end of an arrow between two points")                                                      \
  X(kApiCall, 9, ApiCallRecord, MOESCOPE_RECORD_API_CALL, "api_call", 32, true, header, 0,         \
    "a CUDA API call (the parent of its GPU work)")                                                \
  X(kGpuKernel, 10, GpuKernelRecord, MOESCOPE_RECORD_GPU_KERNEL, "gpu_kernel", 72, true, header,   \
    0, "a kernel on a GPU stream")                                                                 \
  X(kGpuCopy, 11, GpuCopyRecord, MOESCOPE_RECORD_GPU_COPY, "gpu_copy", 56, true, header, 0,        \
    "a memcpy or memset on a GPU stream")                                                          \
  X(kMemory, 12, MemoryRecord, MOESCOPE_RECORD_MEMORY, "memory", 40, false, header, 0,             \
    "an allocation or a free")                                                                     \
  X(kGpuSync, 13, GpuSyncRecord, MOESCOPE_RECORD_GPU_SYNC, "gpu_sync", 40, true, header, 0,        \
    "the host waits for the GPU")                                                                  \
  X(kCommOp, 14, CommOpRecord, MOESCOPE_RECORD_COMM_OP, "comm_op", 104, true, num_splits, 8,       \
    "a communication op; all-to-alls carry the bytes sent to each rank")                           \
  X(kExpertLoad, 15, ExpertLoadRecord, MOESCOPE_RECORD_EXPERT_LOAD, "expert_load", 48, false,      \
    num_experts, 4, "tokens per expert of one MoE layer in one step")                              \
  X(kExpertValues, 16, ExpertValuesRecord, MOESCOPE_RECORD_EXPERT_VALUES, "expert_values", 40,     \
    false, num_experts, 4, "one float per expert (predicted load, router bias, ...)")              \
  X(kLayerStats, 17, LayerStatsRecord, MOESCOPE_RECORD_LAYER_STATS, "layer_stats", 56, false,      \
    header, 0, "router statistics of one MoE layer in one step")                                   \
  X(kStep, 18, StepRecord, MOESCOPE_RECORD_STEP, "step", 24, false, header, 0,                     \
    "this rank starts a training step")                                                            \
  X(kRebalance, 19, RebalanceRecord, MOESCOPE_RECORD_REBALANCE, "rebalance", 64, false, num_costs, \
    36, "an expert rebalancing decision, with the numbers it was taken on")                        \
  X(kThreadInfo, 20, ThreadInfoRecord, MOESCOPE_RECORD_THREAD_INFO, "thread_info", 24, false,      \
    header, 0, "names the stream's thread")                                                        \
  X(kString, 21, StringRecord, MOESCOPE_RECORD_STRING, "string", 24, false, length, 1,             \
    "defines an interned string id")                                                               \
  X(kClockSync, 22, ClockSyncRecord, MOESCOPE_RECORD_CLOCK_SYNC, "clock_sync", 24, false, header,  \
    0, "all ranks pass this point together")                                                       \
  X(kStats, 23, StatsRecord, MOESCOPE_RECORD_STATS, "stats", 40, false, header, 0,                 \
    "running totals of what was lost")                                                             \
  X(kTrigger, 24, TriggerRecord, MOESCOPE_RECORD_TRIGGER, "trigger", 32, false, header, 0,         \
    "the flight recorder wrote its ring: why and when")                                            \
  X(kCollectiveOpen, 25, CollectiveOpenRecord, MOESCOPE_RECORD_COLLECTIVE_OPEN, "collective_open", \
    48, false, header, 0, "a collective entered and still not completed a second later")

#endif /* MOESCOPE_TRACE_RECORD_SCHEMA_H */

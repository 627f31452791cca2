// The trace model: every rank's trace merged into plain, time-sorted arrays that the viewer,
// `moescope report`, `moescope export` and `moescope info` read. Data only: loading lives in
// trace_loader.h, the analyses in their own headers.
//
//   TraceModel
//   ├── strings                    one table; id 0 = ""
//   ├── processes[]                one per rank, sorted by rank
//   │   ├── threads[]              CPU threads: nested spans (+ per-depth index), instants,
//   │   │                          API calls that launched GPU work
//   │   ├── gpu_streams[]          per (device, stream): kernels, copies, memsets, syncs
//   │   ├── communicators[]        per comm_id: communication ops (+ all-to-all split rows)
//   │   ├── counters[]             time series by name
//   │   ├── memory_events          allocations/frees, + usage per category over time
//   │   └── steps[]                step intervals of this rank
//   ├── expert_loads, expert_values, layer_stats, rebalances   (all ranks, load order)
//   ├── flows[]                    explicit flow arrows (launch -> GPU work: GpuOp::launch_*)
//   └── errors[]                   what could not be read (file, offset, message)
//
// Times are int64 nanoseconds on one global clock (the first process's clock after alignment,
// see clock_alignment.h). Every event array of a track is sorted by start time, so a visible
// window is found with two binary searches (visible_range.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "moescope/analysis/model_string_table.h"
#include "moescope/trace/record_schema.h"
#include "moescope/trace/trigger_reason.h"

namespace moescope::analysis {

// A model struct's fields from a field list of record_schema.h (the list the recorder's C ABI
// and the on-disk record share; the loader copies it with MOESCOPE_COPY_FIELDS).
#define MOESCOPE_MODEL_FIELD(type, name, dims, init, doc) type name dims = init;

using TimeNs = int64_t;

struct LoadError {
  std::string file;
  uint64_t offset = 0;  // byte offset in the file; 0 when the problem is not at one place
  std::string message;
  // The whole file was refused (not a trace, or not combinable with the others): commands
  // that analyse the inputs together fail instead of reporting without it.
  bool refused = false;
  std::string to_string() const { return file + ":" + std::to_string(offset) + ": " + message; }
};

enum SpanFlags : uint16_t {
  kSpanUnclosed = 1u << 0,   // no end record: closed at the thread's last time
  kSpanFromRange = 1u << 1,  // a start/end range (may have started or ended on another thread)
  kSpanComplete = 1u << 2,   // written with both times (moescope_span_complete)
};

// A CPU span (NVTX push/pop, runtime phase, Kineto cpu_op). 32 bytes.
struct Span {
  TimeNs start = 0;
  TimeNs end = 0;
  StringId name = 0;
  StringId domain = 0;
  int32_t parent = -1;  // index in the same track's spans, -1 at top level
  uint16_t depth = 0;
  uint16_t flags = 0;  // SpanFlags
  TimeNs duration() const { return end - start; }
};
static_assert(sizeof(Span) == 32);

struct Instant {
  TimeNs time = 0;
  StringId name = 0;
  StringId domain = 0;
};

// A host API call that launched GPU work (cudaLaunchKernel, cudaMemcpyAsync, ...).
struct ApiCall {
  TimeNs start = 0;
  TimeNs end = 0;
  StringId name = 0;
  uint32_t correlation_id = 0;
};

struct CpuThreadTrack {
  uint32_t stream = 0;        // recorder stream id within the file (Kineto: tid)
  uint32_t os_thread_id = 0;  // 0 when unknown
  StringId name = 0;
  std::vector<Span> spans;  // sorted by (start, depth); parents come before children
  // spans_by_depth[d]: indices of the spans at depth d, sorted by start. Spans of one depth do
  // not overlap, so their ends are sorted too and one depth is searched like a stream.
  std::vector<std::vector<uint32_t>> spans_by_depth;
  std::vector<Instant> instants;   // sorted by time
  std::vector<ApiCall> api_calls;  // sorted by start
  TimeNs last_time = 0;            // latest time seen on this thread
};

enum class GpuOpKind : uint8_t {
  kKernel = 0,
  kMemcpy = 1,
  kMemset = 2,
  kSync = 3,  // the host waited from start to end (on the device's kAllStreams track)
};
const char* gpu_op_kind_name(GpuOpKind kind);

inline constexpr uint32_t kNoIndex = ~0u;

// A kernel, copy, memset or synchronization on one stream. 48 bytes.
struct GpuOp {
  TimeNs start = 0;
  TimeNs end = 0;
  StringId name = 0;  // kernel name; "Memcpy DtoH" style for copies
  uint32_t correlation_id = 0;
  uint64_t bytes = 0;                 // copies and memsets
  uint32_t launch_thread = kNoIndex;  // index in process.threads of the launching API call
  uint32_t launch_call = kNoIndex;    // index in that thread's api_calls
  GpuOpKind kind = GpuOpKind::kKernel;
  uint8_t copy_kind = 0;  // moescope_copy_kind for copies; moescope_sync_kind for syncs
  uint16_t reserved = 0;
  // Kernels: index in GpuStreamTrack::kernel_details; syncs: the stream waited for
  // (kAllStreams for a device-wide synchronization).
  uint32_t detail = kNoIndex;
  TimeNs duration() const { return end - start; }
};
static_assert(sizeof(GpuOp) == 48);

struct KernelDetail {
  MOESCOPE_FIELDS_KERNEL_LAUNCH(MOESCOPE_MODEL_FIELD)
  uint32_t context = 0;
  bool operator==(const KernelDetail&) const = default;
};

// Stream id of a device's synchronization track: every host wait on that device.
inline constexpr uint32_t kAllStreams = ~0u;

struct GpuStreamTrack {
  uint32_t device = 0;
  uint32_t stream = 0;          // kAllStreams for device-wide syncs
  std::vector<GpuOp> ops;       // sorted by start
  std::vector<TimeNs> max_end;  // max_end[i] = max(ops[0..i].end): ops may overlap
  // Launch configurations; kernels with the same one may share an entry.
  std::vector<KernelDetail> kernel_details;
};

enum CommOpFlags : uint16_t {
  kCommEndUnknown = 1u << 0,  // no completion time recorded; end = start
};

// CommOp::kind of an all-to-all (moescope_comm_kind).
inline constexpr uint32_t kCommKindAllToAll = 6;

struct CommOp {
  TimeNs enqueue = 0;  // when the host issued it
  TimeNs start = 0;    // transfer start (GPU time when known)
  TimeNs end = 0;      // completion
  StringId name = 0;
  uint32_t kind = 0;  // moescope_comm_kind
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint64_t group_id = 0;
  MOESCOPE_FIELDS_COMM_PLACE(MOESCOPE_MODEL_FIELD)  // rank, num_ranks, peer, root, device, ...
  uint32_t dtype = 0;
  uint32_t split_offset = 0;  // first entry in CommunicatorTrack::split_bytes
  uint32_t num_splits = 0;
  uint16_t flags = 0;  // CommOpFlags
  TimeNs duration() const { return end - start; }
};

struct CommunicatorTrack {
  uint64_t comm_id = 0;
  int32_t num_ranks = 0;
  std::vector<CommOp> ops;            // sorted by start
  std::vector<TimeNs> max_end;        // as GpuStreamTrack::max_end
  std::vector<uint64_t> split_bytes;  // all-to-all rows: bytes this rank sent to each rank
  std::span<const uint64_t> splits(const CommOp& op) const {
    return {split_bytes.data() + op.split_offset, op.num_splits};
  }
};

struct CounterTrack {
  StringId name = 0;
  std::vector<TimeNs> times;  // sorted
  std::vector<double> values;
};

inline constexpr int kNumMemoryCategories = 6;  // moescope_memory_category
const char* memory_category_name(int category);

struct MemoryEvent {
  TimeNs time = 0;
  uint64_t address = 0;
  int64_t bytes = 0;  // > 0 allocation, < 0 release (size taken from the allocation)
  int32_t device = -1;
  uint16_t category = 0;
  uint8_t is_free = 0;
  uint8_t unmatched = 0;  // a free of an address with no known allocation
};

// Bytes in use after each memory event, per category and in total (same length as events).
struct MemoryUsage {
  std::vector<TimeNs> times;
  std::vector<int64_t> total;
  std::vector<int64_t> by_category[kNumMemoryCategories];
};

struct StepInterval {
  int64_t step = 0;
  TimeNs start = 0;
  TimeNs end = 0;
  TimeNs duration() const { return end - start; }
};

// Where the steps came from, in the order step detection tries them (step_detection.h).
enum class StepSource : uint8_t {
  kNone = 0,
  kMarkers = 1,         // moescope_step / moescope_step_end (runtime, annotations, autocapture)
  kRepeatingRange = 2,  // the top-level range that repeats and covers the most time (a guess)
  kProfilerSteps = 3,   // torch.profiler's ProfilerStep#N ranges
  kOptimizerSteps = 4,  // PyTorch's Optimizer.step#<Class>.step ranges: a step ends with each
};
const char* step_source_name(StepSource source);

struct StepMarker {  // moescope_step(step) (or moescope_step_end) was called at `time`
  int64_t step = 0;
  TimeNs time = 0;
  bool is_end = false;
};

struct ClockSyncPoint {  // moescope_clock_sync(sync_id) was passed at `time`
  uint64_t sync_id = 0;
  TimeNs time = 0;
};

// The flight recorder's ring was written because of this (a `trigger` record).
struct TriggerEvent {
  TimeNs time = 0;
  MOESCOPE_FIELDS_TRIGGER(MOESCOPE_MODEL_FIELD)  // reason, origin_rank (-1 unknown), code
  StringId detail = 0;
};
// TriggerEvent::reason's name: trace::trigger_reason_name (trace/trigger_reason.h).
using trace::trigger_reason_name;

// A collective this rank entered (at `time`) and had not completed a second later (a
// `collective_open` record). Whether it completed after all is told by the communicator's ops:
// one with the same sequence (collective_mismatch.h).
struct CollectiveOpen {
  TimeNs time = 0;
  MOESCOPE_FIELDS_COLLECTIVE_OPEN(MOESCOPE_MODEL_FIELD)  // comm_id, bytes, kind, sequence, ...
  StringId name = 0;                                     // the op's name
};

struct ProcessTrack {
  int32_t rank = 0;  // from metadata, else the file's position
  int32_t world_size = 0;
  int64_t pid = 0;
  std::string host;
  std::string file;
  std::string metadata_json;
  std::string source_format;  // "moetrace" or "kineto"
  TimeNs clock_offset = 0;    // added to every time of this file to reach the global clock
  bool complete = false;      // the writer closed the file cleanly
  bool truncated = false;     // read only in part (LoadOptions::max_events_per_file)
  uint64_t dropped_events = 0;
  uint64_t events = 0;  // records read (strings and statistics excluded)
  // Records per trace::RecordKind value (moetrace files), for `moescope info`.
  std::array<uint64_t, 32> events_per_kind{};
  uint64_t chunks = 0;   // intact chunks read
  uint32_t streams = 0;  // distinct recorder streams (Kineto: threads + GPU streams)

  std::vector<CpuThreadTrack> threads;
  std::vector<GpuStreamTrack> gpu_streams;  // sorted by (device, stream)
  std::vector<CommunicatorTrack> communicators;
  std::vector<CounterTrack> counters;
  std::vector<MemoryEvent> memory_events;  // sorted by time
  MemoryUsage memory_usage;
  std::vector<StepInterval> steps;  // sorted by start (step_detection.h)
  std::vector<StepMarker> step_markers;
  std::vector<ClockSyncPoint> clock_sync_points;
  std::vector<TriggerEvent> triggers;            // sorted by time
  std::vector<CollectiveOpen> collectives_open;  // sorted by time
  TimeNs begin = 0, end = 0;                     // this process's time range
  // The latest statistics record's time: the recorder still ran then, even with no event since
  // (it writes its last one when the recording stops: how long a hung rank waited). 0: none.
  TimeNs recorder_running_until = 0;

  // Counts of what the loader repaired: span ends with no open span, spans never closed,
  // range ends with no start.
  uint64_t unmatched_span_ends = 0;
  uint64_t unclosed_spans = 0;
  uint64_t unmatched_range_ends = 0;
};

// ExpertLoadSample::scope values (moescope_expert_scope in moescope/recorder.h).
enum ExpertScope : uint32_t {
  kExpertsLocal = 0,     // tokens this rank's router sent to each expert
  kExpertsGlobal = 1,    // summed over the expert-parallel group (every rank records a copy)
  kExpertsReceived = 2,  // tokens each of this rank's local experts received
};
// ExpertValuesSample::quantity value of the balancer's forecast (moescope_expert_quantity).
inline constexpr uint32_t kQuantityPredictedLoad = 0;

// One expert-load sample: tokens per expert for one (step, layer, rank, scope).
struct ExpertLoadSample {
  TimeNs time = 0;
  MOESCOPE_FIELDS_EXPERT_LOAD(MOESCOPE_MODEL_FIELD)  // step, layer, rank, scope, num_experts, ...
  uint32_t process = 0;                              // index in TraceModel::processes
  uint32_t offset = 0;                               // first entry in TraceModel::expert_tokens
};

struct ExpertValuesSample {
  TimeNs time = 0;
  MOESCOPE_FIELDS_EXPERT_VALUES(MOESCOPE_MODEL_FIELD)  // step, layer, rank, quantity, num_experts
  uint32_t process = 0;
  uint32_t offset = 0;  // first entry in TraceModel::expert_value_data
};

struct LayerStatsSample {
  TimeNs time = 0;
  MOESCOPE_FIELDS_LAYER_STATS(MOESCOPE_MODEL_FIELD)  // step, layer, rank, aux_loss, ...
  uint32_t process = 0;
};

struct RebalanceDecision {
  TimeNs time = 0;
  MOESCOPE_FIELDS_REBALANCE(MOESCOPE_MODEL_FIELD)  // step, layer, rank, imbalance_before, ...
  bool applied = false;
  uint32_t process = 0;
  bool has_costs = false;  // the numbers below were recorded (traces since format version 3)
  MOESCOPE_FIELDS_REBALANCE_COSTS(MOESCOPE_MODEL_FIELD)  // gain_ms, replica_sync_ms, ...
};

enum class TrackKind : uint8_t { kThread = 0, kGpuStream = 1, kCommunicator = 2 };

struct TrackRef {
  uint32_t process = 0;
  TrackKind kind = TrackKind::kThread;
  uint32_t track = 0;  // index in the process's threads / gpu_streams / communicators
};

// An arrow between two points recorded with moescope_flow (start -> end with the same id).
// Launch -> GPU work arrows are not listed here: GpuOp::launch_thread/launch_call hold them.
struct FlowArrow {
  TrackRef from;
  TimeNs from_time = 0;
  TrackRef to;
  TimeNs to_time = 0;
  uint64_t id = 0;  // correlation id or flow id
};

enum class ClockAlignmentMethod : uint8_t {
  kSingleHost = 0,      // every process on one host: one clock, nothing to do
  kClockSync = 1,       // moescope_clock_sync points
  kCollectiveEnds = 2,  // ends of collectives that all ranks complete together
  kWallClock = 3,       // the metadata's start_unix_ns (least precise)
  kNone = 4,            // several hosts and nothing to align with
};
const char* clock_alignment_method_name(ClockAlignmentMethod method);

// One host's clock against the first process's host (several hosts only). Collectives bound the
// true offset by causality: no rank leaves a collective before every rank has entered it, so for
// each collective both hosts ran, offset <= (reference's end - this host's entry) and
// offset >= (reference's entry - this host's end). The error bound is the farthest end of that
// interval from the offset applied; -1 when no collective bounds it, or when the bounds
// contradict each other (an end recorded before completion).
struct HostClock {
  std::string host;
  TimeNs offset = 0;         // added to this host's times
  TimeNs error_bound = -1;   // |offset applied - true offset| <= error_bound; -1: unknown
  TimeNs lowest_offset = 0;  // the causality interval (when error_bound >= 0)
  TimeNs highest_offset = 0;
  uint64_t bounding_collectives = 0;  // collectives both hosts ran that set the interval
};

// The model-wide sample arrays: records of every rank that belong to no track, in load order
// (`process` says whose). One file's arrays (FileLoad) and the merged model's have these same
// members; kSampleArrays below lists them for the stages that walk them all.
struct ModelSampleArrays {
  std::vector<ExpertLoadSample> expert_loads;
  std::vector<uint32_t> expert_tokens;  // tails of expert_loads
  std::vector<ExpertValuesSample> expert_values;
  std::vector<float> expert_value_data;  // tails of expert_values
  std::vector<LayerStatsSample> layer_stats;
  std::vector<RebalanceDecision> rebalances;
};

struct TraceModel : ModelSampleArrays {
  StringTable strings;
  std::vector<ProcessTrack> processes;  // sorted by rank
  std::vector<FlowArrow> flows;
  std::vector<LoadError> errors;
  TimeNs begin = 0, end = 0;  // global time range of every event
  ClockAlignmentMethod clock_alignment = ClockAlignmentMethod::kSingleHost;
  std::vector<HostClock> host_clocks;  // several hosts: each host but the first
  StepSource step_source = StepSource::kNone;
  uint64_t total_events = 0;

  std::span<const uint32_t> tokens(const ExpertLoadSample& sample) const {
    return {expert_tokens.data() + sample.offset, sample.num_experts};
  }
  std::span<const float> values(const ExpertValuesSample& sample) const {
    return {expert_value_data.data() + sample.offset, sample.num_experts};
  }
  const std::string& name(StringId id) const { return strings[id]; }
  // Index of the process with `rank`, or -1.
  int process_of_rank(int32_t rank) const {
    for (size_t i = 0; i < processes.size(); ++i) {
      if (processes[i].rank == rank) return static_cast<int>(i);
    }
    return -1;
  }
};

// ---- the registry of sample arrays ------------------------------------------------------------
// Every time-stamped array that is not a track, with what each loading stage does with it:
// the checks of decoded times (record_validation.cpp: items outside +-2^62 ns dropped), merge
// (trace_loader.cpp: appended per file, `process` set, tail offsets moved), clock shift
// (clock_alignment.cpp / process_finalize.cpp), step numbering (step_detection.cpp), the
// loader's reservation ahead (track_appender.cpp) and the time range (process_finalize.cpp).
// The stages iterate these lists; where a stage skips an array, the flag below says why.

struct NoTail {};  // a sample array without a variable-length tail

// A model-wide array (ModelSampleArrays) of samples with `time`, `step` and `process`.
template <typename Sample, typename TailElement = NoTail>
struct SampleArray {
  using Tail = TailElement;
  static constexpr bool kHasTail = !std::is_same_v<TailElement, NoTail>;
  std::vector<Sample> ModelSampleArrays::*samples;
  std::vector<TailElement> ModelSampleArrays::*tail;  // the elements Sample::offset points into
  const char* name;
  // Step renumbered from the process's step intervals (detect_steps). Off where the recorded
  // step is not a training step of the timeline (see the row).
  bool numbered_by_time;
  // Counted in the process's time range. Off where an array has never been: the time range of
  // an existing trace must not change.
  bool in_time_range;
};

inline constexpr std::tuple kSampleArrays{
    SampleArray<ExpertLoadSample, uint32_t>{&ModelSampleArrays::expert_loads,
                                            &ModelSampleArrays::expert_tokens, "expert_loads", true,
                                            true},
    // Never counted in the time range: forecasts and biases are written right after the loads
    // of the same step, which count already.
    SampleArray<ExpertValuesSample, float>{&ModelSampleArrays::expert_values,
                                           &ModelSampleArrays::expert_value_data, "expert_values",
                                           true, false},
    SampleArray<LayerStatsSample>{&ModelSampleArrays::layer_stats, nullptr, "layer_stats", true,
                                  true},
    // Kept as the runtime recorded them: the analyses only total the decisions, nothing reads
    // their step against the timeline's steps. Never counted in the time range (a decision is
    // taken at a step boundary, among events that count already).
    SampleArray<RebalanceDecision>{&ModelSampleArrays::rebalances, nullptr, "rebalances", false,
                                   false},
};

// Calls visit(array) for every row of kSampleArrays (array: a SampleArray<...>).
template <typename Visit>
void for_each_sample_array(Visit&& visit) {
  std::apply([&](const auto&... array) { (visit(array), ...); }, kSampleArrays);
}

// Reserves each of `to`'s sample arrays for what it holds and what `parts` add, so that the
// merge fills them in place (each page touched once, no doubling).
void reserve_sample_arrays(ModelSampleArrays& to,
                           const std::vector<const ModelSampleArrays*>& parts);

// Appends `from`'s samples to `to` as process `process`, their offsets moved past `to`'s tails.
void append_sample_arrays(ModelSampleArrays& to, const ModelSampleArrays& from, uint32_t process);

// A per-process array of events with a `time` (ProcessTrack): shifted with the process's clock,
// reserved ahead by the loader, and where the row says so sorted, counted in the time range and
// with a name (a string id the merge maps to the model's strings).
template <typename Event>
struct ProcessEventArray {
  std::vector<Event> ProcessTrack::*events;
  const char* name;
  // Kept sorted by time by finalize_process; and then counted in the time range.
  bool sorted_in_time_range;
  StringId Event::*name_id = nullptr;  // the event's string, if it has one
};

inline constexpr std::tuple kProcessEventArrays{
    ProcessEventArray<MemoryEvent>{&ProcessTrack::memory_events, "memory_events", true},
    ProcessEventArray<StepMarker>{&ProcessTrack::step_markers, "step_markers", true},
    // Matched by sync_id across ranks, in record order; each lies among the process's other
    // events, so it never widened a time range.
    ProcessEventArray<ClockSyncPoint>{&ProcessTrack::clock_sync_points, "clock_sync_points", false},
    ProcessEventArray<TriggerEvent>{&ProcessTrack::triggers, "triggers", true,
                                    &TriggerEvent::detail},
    ProcessEventArray<CollectiveOpen>{&ProcessTrack::collectives_open, "collectives_open", true,
                                      &CollectiveOpen::name},
};

// Calls visit(array) for every row of kProcessEventArrays.
template <typename Visit>
void for_each_process_event_array(Visit&& visit) {
  std::apply([&](const auto&... array) { (visit(array), ...); }, kProcessEventArrays);
}

}  // namespace moescope::analysis

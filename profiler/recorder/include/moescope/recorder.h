/* moescope/recorder.h — the C ABI of the in-process trace recorder.
 *
 * Any code can call these functions: the MoE runtime, the injected shim (NVTX, CUPTI, NCCL),
 * Python through ctypes, a user's own C/C++ program. The same symbols are exported by
 * libmoescope_recorder.so and by the LD_PRELOAD shim libmoescope_inject.so; when the shim is
 * preloaded its copy wins, so one process always has exactly one recorder.
 *
 * Cost: when no recorder is active each inline wrapper below is one predictable branch on
 * `moescope_recording`. When active, events go to a per-thread buffer without locks or
 * allocation; a background thread compresses them into chunks and appends them to the trace.
 *
 * Timestamps passed in are nanoseconds from moescope_now_ns() (CLOCK_MONOTONIC). Names are
 * interned strings: intern once (moescope_intern) and reuse the id on hot paths.
 * Nothing here throws, aborts or blocks the caller; failures are counted and reported once.
 */
#ifndef MOESCOPE_RECORDER_H
#define MOESCOPE_RECORDER_H

#include <stddef.h>
#include <stdint.h>

/* The field lists the structs below share with the trace's records (moescope_trace). */
#include "moescope/trace/record_schema.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MOESCOPE_API __attribute__((visibility("default")))
#define MOESCOPE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define MOESCOPE_API
#define MOESCOPE_UNLIKELY(x) (x)
#endif

/* A struct field from a field list of moescope/trace/record_schema.h (which documents each). */
#define MOESCOPE_C_FIELD(type, name, dims, init, doc) type name dims;

/* Interned string id. 0 means "no name". */
typedef uint32_t moescope_name_t;

/* Non-zero while a recorder is writing a trace. Read by the inline wrappers. */
extern MOESCOPE_API volatile int moescope_recording;

/* ---- lifecycle ---------------------------------------------------------------------------- */

/* Starts recording into `path` (placeholders: %r rank, %p pid, %h host, %% percent).
 * `metadata_json` is an optional JSON object merged into the file header's metadata (may be
 * NULL). Returns 0 on success, -1 if the file cannot be created (a warning is printed once). */
MOESCOPE_API int moescope_recorder_start(const char* path, const char* metadata_json);
/* Drains every thread's buffer, writes the closing chunk and closes the file. Idempotent. */
MOESCOPE_API void moescope_recorder_stop(void);
/* Writes everything recorded so far as complete chunks (used before exit paths and by tests). */
MOESCOPE_API void moescope_recorder_flush(void);
/* Path of the trace being written, or NULL when not recording. */
MOESCOPE_API const char* moescope_recorder_path(void);

/* ---- names and time ----------------------------------------------------------------------- */

MOESCOPE_API moescope_name_t moescope_intern(const char* str);
MOESCOPE_API moescope_name_t moescope_intern_n(const char* str, size_t length);
MOESCOPE_API uint64_t moescope_now_ns(void);
/* Names the calling thread's track (like nvtxNameOsThread). */
MOESCOPE_API void moescope_thread_name(const char* name);

/* ---- CPU spans, instants, counters -------------------------------------------------------- */

/* Nested span on the calling thread. `domain` groups spans (0 = default, "NCCL", "moescope"). */
MOESCOPE_API void moescope_span_begin_impl(moescope_name_t domain, moescope_name_t name);
MOESCOPE_API void moescope_span_end_impl(void);
/* A span whose times the caller measured (nanoseconds, moescope_now_ns clock). */
MOESCOPE_API void moescope_span_complete(moescope_name_t domain, moescope_name_t name,
                                         uint64_t begin_ns, uint64_t end_ns);
/* Start/end range that may end on another thread (nvtxRangeStart/End). Returns its id. */
MOESCOPE_API uint64_t moescope_range_start(moescope_name_t domain, moescope_name_t name);
MOESCOPE_API void moescope_range_end(uint64_t range_id);
MOESCOPE_API void moescope_instant(moescope_name_t domain, moescope_name_t name);
MOESCOPE_API void moescope_counter(moescope_name_t name, double value);
/* Flow arrow between two points in time on possibly different tracks; phase 0 start, 1 end. */
MOESCOPE_API void moescope_flow(uint64_t flow_id, int phase);

static inline void moescope_span_begin(moescope_name_t domain, moescope_name_t name) {
  if (MOESCOPE_UNLIKELY(moescope_recording)) moescope_span_begin_impl(domain, name);
}
static inline void moescope_span_end(void) {
  if (MOESCOPE_UNLIKELY(moescope_recording)) moescope_span_end_impl();
}

/* ---- training structure ------------------------------------------------------------------- */

/* Marks the start of training step `step` on this rank (step detection in the analysis). */
MOESCOPE_API void moescope_step(int64_t step);
/* Marks the end of training step `step` (optional: without it a step lasts until the next one
 * starts, and the last one until the process's last event). */
MOESCOPE_API void moescope_step_end(int64_t step);
/* A point all ranks pass together (e.g. after a barrier), used to align clocks across hosts. */
MOESCOPE_API void moescope_clock_sync(uint64_t sync_id);

/* ---- MoE events --------------------------------------------------------------------------- */

enum moescope_expert_scope {
  MOESCOPE_EXPERTS_LOCAL = 0,    /* tokens this rank's router sent to each expert */
  MOESCOPE_EXPERTS_GLOBAL = 1,   /* summed over the expert-parallel group */
  MOESCOPE_EXPERTS_RECEIVED = 2, /* tokens each of this rank's local experts received */
};

/* Tokens per expert for one layer and step. tokens_per_expert: [num_experts]. */
MOESCOPE_API void moescope_expert_load(int64_t step, uint32_t layer, int32_t rank, uint32_t scope,
                                       const int64_t* tokens_per_expert, uint32_t num_experts,
                                       uint64_t dropped_tokens);

enum moescope_expert_quantity {
  MOESCOPE_QUANTITY_PREDICTED_LOAD = 0, /* the balancer's predicted tokens per expert */
  MOESCOPE_QUANTITY_ROUTER_BIAS = 1,    /* aux-loss-free selection bias per expert */
  MOESCOPE_QUANTITY_MEAN_PROB = 2,      /* mean router probability per expert */
  MOESCOPE_QUANTITY_REPLICAS = 3,       /* physical replicas per logical expert */
};

/* A float vector over experts for one layer and step. values: [num_experts]. */
MOESCOPE_API void moescope_expert_values(int64_t step, uint32_t layer, int32_t rank,
                                         uint32_t quantity, const float* values,
                                         uint32_t num_experts);

/* Per layer and step router statistics. Non-finite counts > 0 mark a NaN/Inf event. */
typedef struct moescope_layer_stats {
  /* int64 step, u32 layer, i32 rank, f32 aux_loss (NaN when not computed), z_loss (NaN when not
   * computed), router_entropy (nats), max_over_mean, u32 nonfinite_logits, nonfinite_outputs */
  MOESCOPE_FIELDS_LAYER_STATS(MOESCOPE_C_FIELD)
} moescope_layer_stats;
MOESCOPE_API void moescope_layer_stats_record(const moescope_layer_stats* stats);

/* A load-balancer decision: predicted imbalance before/after, what moving cost. */
typedef struct moescope_rebalance_info {
  /* int64 step, u32 layer, i32 rank, f32 imbalance_before, imbalance_after (predicted max/mean
   * per-rank load with the old / new placement), u64 bytes_moved, duration_ns */
  MOESCOPE_FIELDS_REBALANCE(MOESCOPE_C_FIELD)
  int32_t applied; /* 0 when the plan was rejected (gain below migration cost) */
} moescope_rebalance_info;
MOESCOPE_API void moescope_rebalance(const moescope_rebalance_info* info);

/* Why a rebalancing decision went the way it did (moescope_rebalance_costs.reason). */
enum moescope_rebalance_reason {
  MOESCOPE_REBALANCE_REASON_UNKNOWN = 0,         /* not recorded (older traces) */
  MOESCOPE_REBALANCE_PAYS = 1,                   /* applied: the net gain's lower bound > 0 */
  MOESCOPE_REBALANCE_COSTS_EXCEED_GAIN = 2,      /* kept: replica sync + migration >= gain */
  MOESCOPE_REBALANCE_WITHIN_UNCERTAINTY = 3,     /* kept: net gain > 0, its interval reaches 0 */
  MOESCOPE_REBALANCE_BALANCED = 4,               /* kept: forecast imbalance under threshold */
  MOESCOPE_REBALANCE_NO_MOVE = 5,                /* kept: the plan is the current placement */
  MOESCOPE_REBALANCE_IMBALANCE_RULE_APPLIED = 6, /* the old rule: imbalance gain > bytes/bw */
  MOESCOPE_REBALANCE_IMBALANCE_RULE_KEPT = 7,
};

/* The numbers a decision was taken on: f32 busiest_rows_before, busiest_rows_after (predicted
 * rows per step of the busiest rank), gain_ms, replica_sync_ms (per step), migration_ms (once),
 * window_steps, net_ms (gain - replica sync - migration / window), net_stderr_ms, u32 reason
 * (moescope_rebalance_reason). */
typedef struct moescope_rebalance_costs {
  MOESCOPE_FIELDS_REBALANCE_COSTS(MOESCOPE_C_FIELD)
} moescope_rebalance_costs;
/* A decision with its numbers (costs may be NULL: moescope_rebalance). */
MOESCOPE_API void moescope_rebalance_decision(const moescope_rebalance_info* info,
                                              const moescope_rebalance_costs* costs);

/* ---- communication ------------------------------------------------------------------------ */

enum moescope_comm_kind {
  MOESCOPE_COMM_ALL_REDUCE = 1,
  MOESCOPE_COMM_ALL_GATHER = 2,
  MOESCOPE_COMM_REDUCE_SCATTER = 3,
  MOESCOPE_COMM_BROADCAST = 4,
  MOESCOPE_COMM_REDUCE = 5,
  MOESCOPE_COMM_ALL_TO_ALL = 6,
  MOESCOPE_COMM_SEND = 7,
  MOESCOPE_COMM_RECV = 8,
  MOESCOPE_COMM_BARRIER = 9,
  MOESCOPE_COMM_INIT = 10,
  MOESCOPE_COMM_DESTROY = 11,
  MOESCOPE_COMM_GATHER = 12,
  MOESCOPE_COMM_SCATTER = 13,
};

typedef struct moescope_comm_op_info {
  uint32_t kind;     /* moescope_comm_kind */
  uint32_t dtype;    /* ncclDataType_t value, or a torch ScalarType + 100 */
  uint64_t count;    /* elements */
  uint64_t bytes;    /* bytes this rank sends (for all-to-all: the sum of split_bytes) */
  uint64_t comm_id;  /* communicator identity (hash of the unique id or pointer) */
  uint64_t group_id; /* ops issued inside one group start/end share it; 0 = none */
  /* i32 rank (inside the communicator), num_ranks, peer (send/recv, else -1), root (broadcast/
   * reduce, else -1), device (-1 for CPU), u32 stream (0 for CPU), sequence (per communicator) */
  MOESCOPE_FIELDS_COMM_PLACE(MOESCOPE_C_FIELD)
  uint64_t enqueue_ns;         /* when the call was issued on the host */
  uint64_t start_ns;           /* when the transfer started (GPU time when known, else enqueue) */
  uint64_t end_ns;             /* when it completed (GPU time when known); 0 = unknown */
  const uint64_t* split_bytes; /* all-to-all: bytes sent to each rank, [num_splits]; may be NULL */
  uint32_t num_splits;
  moescope_name_t name; /* e.g. "ncclAllReduce", "a2a.dispatch" */
} moescope_comm_op_info;
MOESCOPE_API void moescope_comm_op(const moescope_comm_op_info* op);
/* A collective was issued (called before it runs; moescope_comm_op reports it once done). One
   still open a second later gets a collective_open record, and a flight-recorder dump lists the
   open ones: that is how a hang's rank and collective are named. */
MOESCOPE_API void moescope_comm_op_enter(const moescope_comm_op_info* op);

/* ---- memory ------------------------------------------------------------------------------- */

enum moescope_memory_category {
  MOESCOPE_MEM_OTHER = 0,
  MOESCOPE_MEM_EXPERT_WEIGHTS = 1,
  MOESCOPE_MEM_OPTIMIZER_STATE = 2,
  MOESCOPE_MEM_DISPATCH_BUFFERS = 3,
  MOESCOPE_MEM_ACTIVATIONS = 4,
  MOESCOPE_MEM_CUDA_DRIVER = 5, /* seen by CUPTI, category unknown */
};

/* An allocation (is_free = 0) or release (is_free = 1). device -1 = host memory. */
MOESCOPE_API void moescope_memory_event(uint64_t address, uint64_t bytes, int32_t device,
                                        uint32_t category, int is_free);
/* The same, at a time the caller measured (e.g. a CUPTI record delivered later). */
MOESCOPE_API void moescope_memory_event_at(uint64_t time_ns, uint64_t address, uint64_t bytes,
                                           int32_t device, uint32_t category, int is_free);

/* ---- GPU activity (written by the shim's CUPTI translation; usable by anyone) ----------- */

typedef struct moescope_gpu_kernel_info {
  moescope_name_t name;
  uint64_t start_ns, end_ns;
  /* u32 correlation_id, device, context, stream, grid[3], block[3], shared_memory_bytes,
   * registers_per_thread */
  MOESCOPE_FIELDS_GPU_KERNEL(MOESCOPE_C_FIELD)
} moescope_gpu_kernel_info;
MOESCOPE_API void moescope_gpu_kernel(const moescope_gpu_kernel_info* kernel);

enum moescope_copy_kind {
  MOESCOPE_COPY_UNKNOWN = 0,
  MOESCOPE_COPY_HTOD = 1,
  MOESCOPE_COPY_DTOH = 2,
  MOESCOPE_COPY_DTOD = 3,
  MOESCOPE_COPY_HTOH = 4,
  MOESCOPE_COPY_PTOP = 5,
};

typedef struct moescope_gpu_copy_info {
  uint64_t start_ns, end_ns;
  MOESCOPE_FIELDS_GPU_COPY(MOESCOPE_C_FIELD) /* u64 bytes, u32 correlation_id, device, stream */
  uint32_t copy_kind;                        /* moescope_copy_kind; ignored for memset */
  uint32_t value;                            /* memset value; ignored for memcpy */
  int is_memset;
} moescope_gpu_copy_info;
MOESCOPE_API void moescope_gpu_copy(const moescope_gpu_copy_info* copy);

/* A host API call that launched GPU work (cudaLaunchKernel, ...), linked by correlation id. */
MOESCOPE_API void moescope_api_call(moescope_name_t name, uint64_t start_ns, uint64_t end_ns,
                                    uint32_t correlation_id);

enum moescope_sync_kind {
  MOESCOPE_SYNC_DEVICE = 1,
  MOESCOPE_SYNC_STREAM = 2,
  MOESCOPE_SYNC_EVENT = 3,
  MOESCOPE_SYNC_STREAM_WAIT_EVENT = 4,
};
/* The host waited for the GPU from start_ns to end_ns. */
MOESCOPE_API void moescope_gpu_sync(uint32_t sync_kind, uint64_t start_ns, uint64_t end_ns,
                                    uint32_t device, uint32_t stream, uint32_t correlation_id);

/* ---- flight recorder ---------------------------------------------------------------------- */

enum moescope_trigger_reason {
  MOESCOPE_TRIGGER_SIGNAL = 1,    /* SIGUSR1 / `moescope dump` */
  MOESCOPE_TRIGGER_HANG = 2,      /* watchdog: no step end and no collective progress */
  MOESCOPE_TRIGGER_CRASH = 3,     /* fatal signal (code = signal number) */
  MOESCOPE_TRIGGER_EXCEPTION = 4, /* uncaught Python exception (detail = "Type: message") */
  MOESCOPE_TRIGGER_EXIT = 5,      /* non-zero exit (code = status) */
  MOESCOPE_TRIGGER_COLLECTIVE_TIMEOUT = 6, /* reported by c10d */
  MOESCOPE_TRIGGER_SLOW_STEP = 7,          /* step > k x rolling median */
  MOESCOPE_TRIGGER_PEER = 8,               /* another rank of the job triggered (origin_rank) */
};

/* Why the flight recorder wrote its ring: what fired, when and where. */
typedef struct moescope_trigger_info {
  uint64_t time_ns; /* 0 = now */
  /* u32 reason (moescope_trigger_reason), i32 origin_rank (the rank whose trigger started the
   * job-wide dump, -1 unknown), i32 code (signal number or exit status, else 0) */
  MOESCOPE_FIELDS_TRIGGER(MOESCOPE_C_FIELD)
  moescope_name_t detail; /* interned text, 0 = none */
} moescope_trigger_info;
MOESCOPE_API void moescope_trigger(const moescope_trigger_info* trigger);

/* Records lost before they reached the recorder (e.g. CUPTI buffer overflow). */
MOESCOPE_API void moescope_count_dropped(uint64_t records);

#ifdef __cplusplus
}
#endif

#endif /* MOESCOPE_RECORDER_H */

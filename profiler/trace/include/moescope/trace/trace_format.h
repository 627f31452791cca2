// The .moetrace on-disk format: file header, chunk header and the packed event records.
// docs/trace-format.md is the specification; this header is its single source of truth in code,
// with record_kinds.h, the table that names, sizes and describes every kind.
//
//   file  := FileHeader metadata_json[metadata_bytes] Chunk*
//   Chunk := ChunkHeader payload[payload_bytes]          (payload compressed with zstd)
//   raw payload := Record*                                (records of one stream, in order)
//                  stored as a column image (kChunkColumns) since version 2
//   Record := RecordHeader kind-specific-fields [variable tail], size a multiple of 8
//
// All integers are little-endian. Timestamps are nanoseconds of CLOCK_MONOTONIC of the host
// that wrote the file (documented in the metadata's "clock").
#pragma once

#include <cstddef>
#include <cstdint>

namespace moescope::trace {

inline constexpr char kFileMagic[8] = {'M', 'O', 'E', 'T', 'R', 'A', 'C', 'E'};
// Version 2 added column-coded chunks (kChunkColumns); readers still read version 1 files.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kChunkMagic = 0x4b48434d;  // "MCHK"
// Limits that tell a corrupt length from a real one.
inline constexpr uint32_t kMaxChunkBytes = 64u << 20;
inline constexpr uint32_t kMaxMetadataBytes = 16u << 20;

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t metadata_bytes;  // JSON object follows the header
};
static_assert(sizeof(FileHeader) == 16);

enum class ChunkType : uint16_t {
  kEvents = 1,  // records of one stream (a recorder thread)
  kEnd = 2,     // last chunk of a cleanly closed file; payload: records (a Stats record)
};

enum ChunkFlags : uint16_t {
  kChunkZstd = 1u << 0,       // payload is one zstd frame (else stored raw)
  kChunkDeltaTime = 1u << 1,  // record timestamps are delta-coded (see trace-format.md)
  kChunkColumns = 1u << 2,    // the (decompressed) payload is a column image of the records
};

struct ChunkHeader {
  uint32_t magic;          // kChunkMagic
  uint16_t type;           // ChunkType
  uint16_t flags;          // ChunkFlags
  uint32_t stream;         // recorder thread index (1-based); a track of the process
  uint32_t payload_bytes;  // bytes stored after this header
  uint32_t raw_bytes;      // record bytes after decompression (and column decoding)
  uint32_t crc32;          // zlib crc32 of the first 20 header bytes then the stored payload
};
static_assert(sizeof(ChunkHeader) == 24);

enum class RecordKind : uint8_t {
  kSpanBegin = 1,
  kSpanEnd = 2,
  kSpanComplete = 3,
  kRangeStart = 4,
  kRangeEnd = 5,
  kInstant = 6,
  kCounter = 7,
  kFlow = 8,
  kApiCall = 9,
  kGpuKernel = 10,
  kGpuCopy = 11,
  kMemory = 12,
  kGpuSync = 13,
  kCommOp = 14,
  kExpertLoad = 15,
  kExpertValues = 16,
  kLayerStats = 17,
  kStep = 18,
  kRebalance = 19,
  kThreadInfo = 20,
  kString = 21,
  kClockSync = 22,
  kStats = 23,
  kTrigger = 24,
};
inline constexpr uint8_t kMaxRecordKind = 24;

enum RecordFlags : uint8_t {
  kRecordRawTicks = 1u << 0,  // in-memory only: header.time is in CPU ticks, not yet ns
};

// Every record starts with this. `size` counts the whole record including the header.
struct RecordHeader {
  uint8_t kind;   // RecordKind
  uint8_t flags;  // RecordFlags (always 0 on disk)
  uint16_t size;  // multiple of 8
  uint32_t name;  // interned string id, 0 = none (the meaning per kind is below)
  uint64_t time;  // ns; the start for records with a duration
};
static_assert(sizeof(RecordHeader) == 16);

// name: span name.
struct SpanBeginRecord {
  RecordHeader header;
  uint32_t domain;
  uint32_t reserved;
};
static_assert(sizeof(SpanBeginRecord) == 24);

// Closes the innermost open span of the stream.
struct SpanEndRecord {
  RecordHeader header;
};
static_assert(sizeof(SpanEndRecord) == 16);

// Records that carry a duration keep `end_time` right after the header (delta coding uses it).
struct SpanCompleteRecord {
  RecordHeader header;
  uint64_t end_time;
  uint32_t domain;
  uint32_t reserved;
};
static_assert(sizeof(SpanCompleteRecord) == 32);

struct RangeStartRecord {
  RecordHeader header;
  uint64_t range_id;
  uint32_t domain;
  uint32_t reserved;
};
static_assert(sizeof(RangeStartRecord) == 32);

struct RangeEndRecord {
  RecordHeader header;
  uint64_t range_id;
};
static_assert(sizeof(RangeEndRecord) == 24);

struct InstantRecord {
  RecordHeader header;
  uint32_t domain;
  uint32_t reserved;
};
static_assert(sizeof(InstantRecord) == 24);

// name: counter name.
struct CounterRecord {
  RecordHeader header;
  double value;
};
static_assert(sizeof(CounterRecord) == 24);

struct FlowRecord {
  RecordHeader header;
  uint64_t flow_id;
  uint32_t phase;  // 0 start, 1 end
  uint32_t reserved;
};
static_assert(sizeof(FlowRecord) == 32);

// name: API function (cudaLaunchKernel ...). GPU work with the same correlation id is its child.
struct ApiCallRecord {
  RecordHeader header;
  uint64_t end_time;
  uint32_t correlation_id;
  uint32_t reserved;
};
static_assert(sizeof(ApiCallRecord) == 32);

// name: kernel name.
struct GpuKernelRecord {
  RecordHeader header;
  uint64_t end_time;
  uint32_t correlation_id;
  uint32_t device;
  uint32_t context;
  uint32_t stream;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_memory_bytes;
  uint32_t registers_per_thread;
};
static_assert(sizeof(GpuKernelRecord) == 72);

// Memcpy or memset.
struct GpuCopyRecord {
  RecordHeader header;
  uint64_t end_time;
  uint64_t bytes;
  uint32_t correlation_id;
  uint32_t device;
  uint32_t stream;
  uint8_t copy_kind;  // moescope_copy_kind
  uint8_t is_memset;
  uint16_t reserved;
  uint32_t value;  // memset value
  uint32_t reserved2;
};
static_assert(sizeof(GpuCopyRecord) == 56);

struct MemoryRecord {
  RecordHeader header;
  uint64_t address;
  uint64_t bytes;
  int32_t device;     // -1 host
  uint16_t category;  // moescope_memory_category
  uint8_t is_free;
  uint8_t reserved;
};
static_assert(sizeof(MemoryRecord) == 40);

struct GpuSyncRecord {
  RecordHeader header;
  uint64_t end_time;
  uint32_t sync_kind;  // moescope_sync_kind
  uint32_t correlation_id;
  uint32_t device;
  uint32_t stream;
};
static_assert(sizeof(GpuSyncRecord) == 40);

// header.time is the enqueue time; name: the op's name. Followed by num_splits uint64 bytes.
struct CommOpRecord {
  RecordHeader header;
  uint64_t end_time;  // 0 = unknown
  uint64_t start_time;
  uint64_t count;
  uint64_t bytes;
  uint64_t comm_id;
  uint64_t group_id;
  uint32_t kind;  // moescope_comm_kind
  uint32_t dtype;
  int32_t rank;
  int32_t num_ranks;
  int32_t peer;
  int32_t root;
  int32_t device;
  uint32_t stream;
  uint32_t sequence;
  uint32_t num_splits;
};
static_assert(sizeof(CommOpRecord) == 104);
static_assert(offsetof(CommOpRecord, end_time) == sizeof(RecordHeader));

// Followed by num_experts uint32 token counts (padded to 8 bytes).
struct ExpertLoadRecord {
  RecordHeader header;
  int64_t step;
  uint32_t layer;
  int32_t rank;
  uint32_t scope;  // moescope_expert_scope
  uint32_t num_experts;
  uint64_t dropped_tokens;
};
static_assert(sizeof(ExpertLoadRecord) == 48);

// Followed by num_experts floats (padded to 8 bytes).
struct ExpertValuesRecord {
  RecordHeader header;
  int64_t step;
  uint32_t layer;
  int32_t rank;
  uint32_t quantity;  // moescope_expert_quantity
  uint32_t num_experts;
};
static_assert(sizeof(ExpertValuesRecord) == 40);

struct LayerStatsRecord {
  RecordHeader header;
  int64_t step;
  uint32_t layer;
  int32_t rank;
  float aux_loss;
  float z_loss;
  float router_entropy;
  float max_over_mean;
  uint32_t nonfinite_logits;
  uint32_t nonfinite_outputs;
};
static_assert(sizeof(LayerStatsRecord) == 56);

// name: 0 = this rank starts training step `step`; non-zero (the interned "end") = it ends it.
// Without an end, a step lasts until the next one starts.
struct StepRecord {
  RecordHeader header;
  int64_t step;
};
static_assert(sizeof(StepRecord) == 24);

struct RebalanceRecord {
  RecordHeader header;
  int64_t step;
  uint32_t layer;
  int32_t rank;
  float imbalance_before;
  float imbalance_after;
  uint64_t bytes_moved;
  uint64_t duration_ns;
  int32_t applied;
  uint32_t reserved;
};
static_assert(sizeof(RebalanceRecord) == 64);

// name: the thread's name (may be renamed later); one per stream at least.
struct ThreadInfoRecord {
  RecordHeader header;
  uint32_t os_thread_id;
  uint32_t reserved;
};
static_assert(sizeof(ThreadInfoRecord) == 24);

// Defines string id header.name. Followed by `length` bytes (no terminator), padded to 8.
struct StringRecord {
  RecordHeader header;
  uint32_t length;
  uint32_t reserved;
};
static_assert(sizeof(StringRecord) == 24);

struct ClockSyncRecord {
  RecordHeader header;
  uint64_t sync_id;
};
static_assert(sizeof(ClockSyncRecord) == 24);

// Totals written in the kEnd chunk and periodically: what was lost and why.
struct StatsRecord {
  RecordHeader header;
  uint64_t dropped_events;       // buffers full
  uint64_t dropped_gpu_records;  // reported by CUPTI or another source
  uint64_t failed_writes;        // chunks that could not be written (disk full)
};
static_assert(sizeof(StatsRecord) == 40);

// The flight recorder wrote its ring because of this. header.name: detail string id (0 = none);
// header.time: when it fired.
struct TriggerRecord {
  RecordHeader header;
  uint32_t reason;      // moescope_trigger_reason (moescope/recorder.h)
  int32_t origin_rank;  // the rank whose trigger started the job-wide dump (-1 unknown)
  int32_t code;         // signal number (crash/signal), exit status (exit), else 0
  uint32_t reserved;    // 0
};
static_assert(sizeof(TriggerRecord) == 32);
#pragma pack(pop)

constexpr uint32_t padded_to_8(uint32_t bytes) {
  return (bytes + 7u) & ~7u;
}

}  // namespace moescope::trace

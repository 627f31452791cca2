// The .moetrace on-disk format: file header, chunk header and the packed event records.
// docs/trace-format.md is the specification; record_schema.h declares every record kind once
// and this header generates the packed structs from it (record_kinds.h: the table of kinds).
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

#include "moescope/trace/record_schema.h"

namespace moescope::trace {

inline constexpr char kFileMagic[8] = {'M', 'O', 'E', 'T', 'R', 'A', 'C', 'E'};
// Version 2 added column-coded chunks (kChunkColumns); version 3 the rebalance record's tail
// (RebalanceCosts); version 4 the collective_wait kind. Readers still read versions 1 to 3.
inline constexpr uint32_t kFormatVersion = 4;
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

// 1 = kSpanBegin ... : one value per row of MOESCOPE_RECORD_KINDS (record_schema.h).
enum class RecordKind : uint8_t {
#define MOESCOPE_KIND_ENUMERATOR(Enum, number, ...) Enum = number,
  MOESCOPE_RECORD_KINDS(MOESCOPE_KIND_ENUMERATOR)
#undef MOESCOPE_KIND_ENUMERATOR
};
#define MOESCOPE_KIND_COUNT(...) +1
inline constexpr uint8_t kMaxRecordKind = 0 MOESCOPE_RECORD_KINDS(MOESCOPE_KIND_COUNT);
#undef MOESCOPE_KIND_COUNT

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

// The records: a RecordHeader then the kind's fields of record_schema.h, packed, each kind's
// size checked against the size its row declares. The `name` of the header means per kind what
// docs/trace-format.md's records table says.
#define MOESCOPE_DISK_FIELD(type, name, dims, init, doc) type name dims;
#define MOESCOPE_DISK_RECORD(Enum, number, Struct, FIELDS, name, size, ...) \
  struct Struct {                                                           \
    RecordHeader header;                                                    \
    FIELDS(MOESCOPE_DISK_FIELD)                                             \
  };                                                                        \
  static_assert(sizeof(Struct) == size, "the size of " name " in record_schema.h");
MOESCOPE_RECORD_KINDS(MOESCOPE_DISK_RECORD)
#undef MOESCOPE_DISK_RECORD

// The tail of a rebalance record (num_costs of them, 0 or 1): the numbers of its decision.
struct RebalanceCosts {
  MOESCOPE_FIELDS_REBALANCE_COSTS(MOESCOPE_DISK_FIELD)
};
static_assert(sizeof(RebalanceCosts) == 36, "the rebalance row's tail_bytes in record_schema.h");
#undef MOESCOPE_DISK_FIELD
#pragma pack(pop)

constexpr uint32_t padded_to_8(uint32_t bytes) {
  return (bytes + 7u) & ~7u;
}

}  // namespace moescope::trace

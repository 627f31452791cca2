// Column coding of a chunk's records (chunk flag kChunkColumns, format version 2).
//
// Records are rows of 32-bit lanes. Row by row, zstd sees a new short match for every record
// (the fields that repeat) with a few changed bytes in between, and spends ~30 ns per event.
// Stored as columns instead (one column per kind and lane, each split into its four byte
// planes), a field that never changes becomes one long run of zeros, the high bytes of small
// deltas become more zeros, and zstd spends a few ns per event on a smaller image:
//
//   u32 record_count n
//   u8  kinds[n]          kind, | 0x80 when the record's size is not the kind's fixed size
//   u16 sizes[m]          the size of each of those m records, in record order
//   columns               for kind 1..kMaxRecordKind, for lane 0..lanes(kind)-1:
//                         byte plane 0, 1, 2, 3 of the kind's values (count(kind) bytes each)
//   tails                 bytes past the fixed part of each record, in record order
//
// Lane values (lane l covers record bytes 4+4l .. 7+4l; the first word, kind/flags/size, is in
// kinds[] and sizes[]): lane 0 (name) as is; lanes 1-2 (time) zigzag(time - previous record's
// time); lanes 3-4 of kinds with an end time: end - start; every other lane: its value minus
// the same lane of the previous record of the same kind (0 for the first). Wrapping arithmetic
// makes decoding exact for any input.
#include <algorithm>
#include <cstring>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"
#include "unaligned_integers.h"

namespace moescope::trace {
namespace {

constexpr int kKinds = kMaxRecordKind + 1;
constexpr uint8_t kExplicitSize = 0x80;
// The decoder's column starts are padded by this many lanes so that columns of power-of-two
// lengths do not alias in the cache while a record's lanes are gathered from them.
constexpr size_t kColumnPadding = 16;

struct KindTable {
  uint16_t fixed_size[kKinds] = {};
  uint8_t lanes[kKinds] = {};
  bool end_time[kKinds] = {};
  bool variable[kKinds] = {};  // carries a tail whose length a field declares
  constexpr KindTable() {
    for (int kind = 1; kind < kKinds; ++kind) {
      fixed_size[kind] = static_cast<uint16_t>(fixed_record_size(static_cast<uint8_t>(kind)));
      lanes[kind] = static_cast<uint8_t>((fixed_size[kind] - 4) / 4);
      end_time[kind] = has_end_time(static_cast<uint8_t>(kind));
      variable[kind] = has_variable_tail(static_cast<uint8_t>(kind));
    }
  }
};
constexpr KindTable kTable;
constexpr size_t widest_fixed_part() {
  size_t widest = 0;
  for (const RecordKindInfo& info : kRecordKinds)
    widest = std::max<size_t>(widest, info.fixed_size);
  return widest;
}
constexpr size_t kMaxLanes = (widest_fixed_part() - 4) / 4;
// Stands in for "the previous record of this kind" before the first one.
constexpr uint8_t kZeroRecord[4 + 4 * kMaxLanes] = {};

uint64_t zigzag(uint64_t delta) {
  return (delta << 1) ^ static_cast<uint64_t>(static_cast<int64_t>(delta) >> 63);
}
uint64_t unzigzag(uint64_t value) {
  return (value >> 1) ^ (0 - (value & 1));
}

struct Census {
  uint32_t count[kKinds] = {};
  size_t explicit_sizes = 0;
  size_t fixed_bytes = 0;   // sum of the fixed parts
  size_t column_bytes = 0;  // 4 bytes per lane per record

  void add_up() {
    for (int kind = 1; kind < kKinds; ++kind) {
      fixed_bytes += size_t{count[kind]} * kTable.fixed_size[kind];
      column_bytes += size_t{count[kind]} * 4 * kTable.lanes[kind];
    }
  }
};

// Decoder column scratch: where each kind's lane-0 column starts; lane l is `l * stride(kind)`
// further.
size_t place_columns(const Census& census, size_t* base) {
  size_t at = 0;
  for (int kind = 1; kind < kKinds; ++kind) {
    base[kind] = at;
    if (census.count[kind]) at += (census.count[kind] + kColumnPadding) * kTable.lanes[kind];
  }
  return at;
}

}  // namespace

bool ColumnEncoder::encode(const uint8_t* records, size_t bytes, std::vector<uint8_t>& out) {
  // One walk over the records (each size is needed to find the next one, so the walk waits on
  // its loads) writes each record's lane values to its kind's rows; then the rows are cut
  // into byte planes, in blocks of rows that stay in L1.
  size_t used[kKinds] = {};
  kinds_.resize(bytes / sizeof(RecordHeader) + 1);
  sizes_.clear();
  tails_.clear();
  const uint8_t* previous[kKinds];
  for (int kind = 0; kind < kKinds; ++kind) previous[kind] = kZeroRecord;
  uint64_t previous_time = 0;
  size_t offset = 0;
  size_t count = 0;
  while (offset < bytes) {
    if (bytes - offset < sizeof(RecordHeader)) return false;
    const uint8_t* record = records + offset;
    uint8_t kind = record[0];
    uint16_t size;
    std::memcpy(&size, record + 2, sizeof(size));
    if (kind == 0 || kind > kMaxRecordKind || record[1] != 0) return false;
    uint16_t fixed = kTable.fixed_size[kind];
    if (size % 8 != 0 || size < fixed || size > bytes - offset) return false;
    kinds_[count] = kind;
    if (size != fixed) {
      kinds_[count] |= kExplicitSize;
      sizes_.insert(sizes_.end(), record + 2, record + 4);
      tails_.insert(tails_.end(), record + fixed, record + size);
    }
    ++count;
    const uint8_t* before = previous[kind];
    previous[kind] = record;
    uint32_t lanes = kTable.lanes[kind];
    std::vector<uint32_t>& rows = rows_[kind];
    if (used[kind] + lanes > rows.size()) {
      rows.resize(std::max(2 * rows.size(), used[kind] + lanes + 4096));
    }
    uint32_t* value = rows.data() + used[kind];
    used[kind] += lanes;
    value[0] = load_u32(record + 4);
    uint64_t time = load_u64(record + 8);
    uint64_t time_delta = zigzag(time - previous_time);
    previous_time = time;
    value[1] = static_cast<uint32_t>(time_delta);
    value[2] = static_cast<uint32_t>(time_delta >> 32);
    uint32_t lane = 3;
    if (kTable.end_time[kind]) {
      uint64_t duration = load_u64(record + 16) - time;
      value[3] = static_cast<uint32_t>(duration);
      value[4] = static_cast<uint32_t>(duration >> 32);
      lane = 5;
    }
    for (; lane < lanes; ++lane) {
      value[lane] = load_u32(record + 4 + 4 * lane) - load_u32(before + 4 + 4 * lane);
    }
    offset += size;
  }
  if (count > UINT32_MAX) return false;

  size_t column_bytes = 0;
  for (int kind = 1; kind < kKinds; ++kind) column_bytes += 4 * used[kind];
  size_t head = 4 + count + sizes_.size();
  out.resize(head + column_bytes + tails_.size());
  uint8_t* image = out.data();
  store_u32(image, static_cast<uint32_t>(count));
  std::memcpy(image + 4, kinds_.data(), count);
  if (!sizes_.empty()) std::memcpy(image + 4 + count, sizes_.data(), sizes_.size());
  uint8_t* plane = image + head;
  constexpr size_t kBlockRows = 64;
  for (int kind = 1; kind < kKinds; ++kind) {
    size_t lanes = kTable.lanes[kind];
    size_t rows = used[kind] / lanes;
    if (!rows) continue;
    const uint32_t* values = rows_[kind].data();
    for (size_t begin = 0; begin < rows; begin += kBlockRows) {
      size_t end = std::min(rows, begin + kBlockRows);
      for (size_t lane = 0; lane < lanes; ++lane) {
        uint8_t* byte0 = plane + 4 * rows * lane;
        for (size_t row = begin; row < end; ++row) {
          uint32_t v = values[row * lanes + lane];
          byte0[row] = static_cast<uint8_t>(v);
          byte0[rows + row] = static_cast<uint8_t>(v >> 8);
          byte0[2 * rows + row] = static_cast<uint8_t>(v >> 16);
          byte0[3 * rows + row] = static_cast<uint8_t>(v >> 24);
        }
      }
    }
    plane += 4 * rows * lanes;
  }
  if (!tails_.empty()) std::memcpy(plane, tails_.data(), tails_.size());
  return true;
}

bool ColumnDecoder::decode(const uint8_t* image, size_t image_bytes, uint8_t* records,
                           size_t raw_bytes, std::string& error) {
  if (image_bytes < 4) {
    error = "column image of " + std::to_string(image_bytes) + " bytes has no record count";
    return false;
  }
  size_t count = load_u32(image);
  if (count > raw_bytes / sizeof(RecordHeader) || count > image_bytes - 4) {
    error = "column image declares " + std::to_string(count) + " records, more than fit";
    return false;
  }
  const uint8_t* kinds = image + 4;
  // Histogram of the kind bytes, in four interleaved tables so that runs of one kind do not
  // wait on each other's increments.
  uint32_t histogram[4][256] = {};
  size_t index = 0;
  for (; index + 4 <= count; index += 4) {
    for (int way = 0; way < 4; ++way) ++histogram[way][kinds[index + way]];
  }
  for (; index < count; ++index) ++histogram[0][kinds[index]];
  Census census;
  for (int byte = 0; byte < 256; ++byte) {
    uint32_t seen =
        histogram[0][byte] + histogram[1][byte] + histogram[2][byte] + histogram[3][byte];
    if (!seen) continue;
    uint8_t kind = static_cast<uint8_t>(byte) & ~kExplicitSize;
    if (kind == 0 || kind > kMaxRecordKind) {
      error = "column image: unknown record kind " + std::to_string(kind);
      return false;
    }
    census.count[kind] += seen;
    if (byte & kExplicitSize) census.explicit_sizes += seen;
  }
  census.add_up();
  size_t head = 4 + count + 2 * census.explicit_sizes;
  if (census.fixed_bytes > raw_bytes ||
      image_bytes != head + census.column_bytes + (raw_bytes - census.fixed_bytes)) {
    error = "column image is " + std::to_string(image_bytes) + " bytes, its records need " +
            (census.fixed_bytes > raw_bytes
                 ? std::string("more raw bytes than the chunk holds")
                 : std::to_string(head + census.column_bytes + raw_bytes - census.fixed_bytes));
    return false;
  }

  size_t base[kKinds] = {};
  columns_.resize(place_columns(census, base));
  const uint8_t* plane = image + head;
  for (int kind = 1; kind < kKinds; ++kind) {
    size_t rows = census.count[kind];
    if (!rows) continue;
    size_t stride = rows + kColumnPadding;
    for (uint32_t lane = 0; lane < kTable.lanes[kind]; ++lane) {
      uint32_t* __restrict column = columns_.data() + base[kind] + lane * stride;
      const uint8_t* byte0 = plane;
      const uint8_t* byte1 = plane + rows;
      const uint8_t* byte2 = plane + 2 * rows;
      const uint8_t* byte3 = plane + 3 * rows;
      for (size_t row = 0; row < rows; ++row) {
        column[row] = uint32_t{byte0[row]} | uint32_t{byte1[row]} << 8 |
                      uint32_t{byte2[row]} << 16 | uint32_t{byte3[row]} << 24;
      }
      plane += 4 * rows;
    }
  }

  const uint8_t* sizes = kinds + count;
  const uint8_t* tails = plane;
  const uint32_t* next[kKinds];
  const uint8_t* previous[kKinds];
  for (int kind = 0; kind < kKinds; ++kind) {
    next[kind] = columns_.data() + base[kind];
    previous[kind] = kZeroRecord;
  }
  uint64_t previous_time = 0;
  size_t offset = 0;
  for (size_t index = 0; index < count; ++index) {
    uint8_t kind = kinds[index] & ~kExplicitSize;
    uint16_t fixed = kTable.fixed_size[kind];
    uint16_t size = fixed;
    if (kinds[index] & kExplicitSize) {
      std::memcpy(&size, sizes, sizeof(size));
      sizes += sizeof(size);
      if (size % 8 != 0 || size < fixed) {
        error = "column image: size " + std::to_string(size) + " of record " +
                std::to_string(index) + " is not valid for " + record_kind_name(kind);
        return false;
      }
    }
    // The totals were checked above, but a record can still claim more than is left of the
    // chunk or of the tails before the records after it are counted.
    if (size > raw_bytes - offset || size - fixed > image + image_bytes - tails) {
      error = "column image: record " + std::to_string(index) + " runs past the chunk end";
      return false;
    }
    uint8_t* record = records + offset;
    const uint8_t* before = previous[kind];
    previous[kind] = record;
    uint32_t lanes = kTable.lanes[kind];
    size_t stride = census.count[kind] + kColumnPadding;
    const uint32_t* value = next[kind]++;
    record[0] = kind;
    record[1] = 0;
    std::memcpy(record + 2, &size, sizeof(size));
    store_u32(record + 4, value[0]);
    uint64_t time = previous_time + unzigzag(value[stride] | uint64_t{value[2 * stride]} << 32);
    previous_time = time;
    store_u64(record + 8, time);
    uint32_t lane = 3;
    if (kTable.end_time[kind]) {
      store_u64(record + 16, time + (value[3 * stride] | uint64_t{value[4 * stride]} << 32));
      lane = 5;
    }
    for (; lane < lanes; ++lane) {
      store_u32(record + 4 + 4 * lane, value[lane * stride] + load_u32(before + 4 + 4 * lane));
    }
    if (size > fixed) {
      std::memcpy(record + fixed, tails, size - fixed);
      tails += size - fixed;
    }
    // What validate_records() checks beyond kinds and sizes, so that the reader can skip it.
    if (kTable.variable[kind] && declared_tail_bytes(record) > uint64_t{size} - fixed) {
      error = "invalid record at payload offset " + std::to_string(offset) + ": " +
              record_kind_name(kind) + " declares " + std::to_string(declared_tail_bytes(record)) +
              " tail bytes but has " + std::to_string(size - fixed);
      return false;
    }
    offset += size;
  }
  if (offset != raw_bytes) {
    error = "column image holds " + std::to_string(offset) + " record bytes, the chunk " +
            std::to_string(raw_bytes);
    return false;
  }
  return true;
}

}  // namespace moescope::trace

// Timestamp delta coding of a chunk's records, done before compression.
//
// Each record's header.time is replaced by its difference to the previous record's header.time
// in the chunk (the first keeps its absolute value), and an end time right after the header is
// replaced by (end - start). Records of one stream are nearly time-ordered, so the deltas are
// small and mostly-zero bytes compress several times better. Arithmetic wraps mod 2^64, so
// decoding is exact for any input, even out-of-order or garbage times.
#include <cstring>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_writer.h"
#include "unaligned_integers.h"

namespace moescope::trace {
namespace {

constexpr size_t kTimeOffset = offsetof(RecordHeader, time);
constexpr size_t kEndOffset = sizeof(RecordHeader);

template <bool kEncode>
void transform(uint8_t* records, size_t bytes) {
  uint64_t previous = 0;
  size_t offset = 0;
  while (offset + sizeof(RecordHeader) <= bytes) {
    uint8_t* record = records + offset;
    uint16_t size;
    std::memcpy(&size, record + 2, sizeof(size));
    if (size < sizeof(RecordHeader) || offset + size > bytes) return;  // validated elsewhere
    uint64_t stored = load_u64(record + kTimeOffset);
    uint64_t start = kEncode ? stored : stored + previous;
    store_u64(record + kTimeOffset, kEncode ? stored - previous : start);
    if (has_end_time(record[0]) && size >= kEndOffset + 8) {
      uint64_t end = load_u64(record + kEndOffset);
      store_u64(record + kEndOffset, kEncode ? end - start : end + start);
    }
    previous = start;
    offset += size;
  }
}

}  // namespace

void delta_encode_times(uint8_t* records, size_t bytes) {
  transform<true>(records, bytes);
}
void delta_decode_times(uint8_t* records, size_t bytes) {
  transform<false>(records, bytes);
}

}  // namespace moescope::trace

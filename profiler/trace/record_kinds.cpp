// The record-kind table's out-of-line part (the table is in trace_format.h).
#include <cstring>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_format.h"

namespace moescope::trace {

uint64_t declared_tail_bytes(const uint8_t* record) {
  const RecordKindInfo* info = record_kind_info(record[0]);
  if (!info || info->tail_count_offset == 0) return 0;
  uint32_t count;
  std::memcpy(&count, record + info->tail_count_offset, sizeof(count));
  return uint64_t{count} * info->tail_element_bytes;
}

}  // namespace moescope::trace

// libFuzzer target: structure-aware .moetrace files through load -> report -> export -> diff.
//
// fuzz_trace_reader flips bytes and exercises the chunk reader; here the input is not the file
// but a recipe for one: the bytes choose record kinds (from the record-kind table, so every kind
// is generated), field values from a palette of hostile ones (INT64_MIN/MAX, 2^62, a layer of
// 2^31, step numbers going backwards, a comm op whose splits do not match its ranks, times that
// end before they begin) and the writer's options, and the project's TraceWriter writes valid
// chunks. The reader accepts them, so the hostile values reach the analyses and exporters.
// One or two files (two ranks) are written per input, so cross-rank analyses run too.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_pipeline.h"
#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_writer.h"

namespace {

using namespace moescope::trace;

uint64_t hostile_64(FuzzedDataProvider& input, uint64_t near) {
  switch (input.ConsumeIntegralInRange<int>(0, 15)) {
    case 0:
      return uint64_t(std::numeric_limits<int64_t>::min());
    case 1:
      return uint64_t(std::numeric_limits<int64_t>::max());
    case 2:
      return uint64_t{1} << 62;
    case 3:
      return ~uint64_t{0};  // -1
    case 4:
      return 0;
    case 5:
      return near - input.ConsumeIntegralInRange<uint64_t>(0, 1000);  // backwards
    case 6:
      return input.ConsumeIntegral<uint64_t>();
    default:
      return near + input.ConsumeIntegralInRange<uint64_t>(0, 100000);
  }
}

uint32_t hostile_32(FuzzedDataProvider& input) {
  switch (input.ConsumeIntegralInRange<int>(0, 11)) {
    case 0:
      return uint32_t{1} << 31;  // a layer count of 2^31
    case 1:
      return ~uint32_t{0};
    case 2:
      return 0x7fffffff;
    case 3:
      return input.ConsumeIntegral<uint32_t>();
    default:
      return input.ConsumeIntegralInRange<uint32_t>(0, 8);
  }
}

// Names the analyses look for, so generated spans become layers, steps and phases.
const char* const kNames[] = {"moe.layer",    "moe.route", "moe.dispatch",   "moe.expert",
                              "moe.combine",  "end",       "ProfilerStep#1", "all_to_all",
                              "ncclAllToAll", "forward",   "backward",       "optimizer"};
constexpr uint32_t kNameCount = sizeof(kNames) / sizeof(kNames[0]);

// One record of a kind from the table; its fixed fields and tail filled with hostile values.
void append_record(FuzzedDataProvider& input, RecordBuffer& buffer, uint64_t& clock) {
  const RecordKindInfo& info =
      kRecordKinds[input.ConsumeIntegralInRange<size_t>(0, std::size(kRecordKinds) - 1)];
  if (info.kind == RecordKind::kString) return;  // strings are defined up front
  uint32_t tail_count = 0;
  if (info.tail_count_offset != 0) {
    tail_count = input.ConsumeBool() ? input.ConsumeIntegralInRange<uint32_t>(0, 16)
                                     : input.ConsumeIntegralInRange<uint32_t>(0, 512);
  }
  const uint32_t tail_bytes = tail_count * info.tail_element_bytes;
  const uint64_t time = hostile_64(input, clock);
  if (input.ConsumeIntegralInRange<int>(0, 7) != 0) clock = time;
  const uint32_t name = input.ConsumeIntegralInRange<uint32_t>(0, kNameCount + 1);
  // Raw space of the record's size; the header is set by append_sized on a stand-in layout.
  struct Bytes {
    RecordHeader header;
  };
  const uint32_t body = info.fixed_size - sizeof(RecordHeader);
  buffer.append_sized<Bytes>(info.kind, time, name, body + tail_bytes);
  uint8_t* fields = buffer.tail<Bytes>();
  // Fixed fields: 8-byte slots (times, steps, ids), the rest 4-byte slots.
  for (uint32_t offset = 0; offset + 4 <= body;) {
    if (offset % 8 == 0 && offset + 8 <= body && input.ConsumeBool()) {
      const uint64_t value = info.has_end_time && offset == 0
                                 ? hostile_64(input, time)  // the end: before or after begin
                                 : hostile_64(input, input.ConsumeIntegralInRange<uint64_t>(0, 64));
      std::memcpy(fields + offset, &value, 8);
      offset += 8;
    } else {
      const uint32_t value = hostile_32(input);
      std::memcpy(fields + offset, &value, 4);
      offset += 4;
    }
  }
  if (info.tail_count_offset != 0) {
    // The count matches the tail (so the chunk is valid); rarely it does not.
    uint32_t count = input.ConsumeIntegralInRange<int>(0, 31) == 0 ? hostile_32(input) : tail_count;
    std::memcpy(fields + (info.tail_count_offset - sizeof(RecordHeader)), &count, 4);
    uint8_t* tail = fields + body;
    for (uint32_t i = 0; i + 4 <= tail_bytes; i += 4) {
      uint32_t value =
          input.ConsumeBool() ? input.ConsumeIntegralInRange<uint32_t>(0, 1000) : hostile_32(input);
      if (info.tail_element_bytes == 4 && info.kind == RecordKind::kExpertValues &&
          input.ConsumeBool()) {
        const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(), -1e38f, 1.5f};
        std::memcpy(&value, &special[input.ConsumeIntegralInRange<int>(0, 3)], 4);
      }
      std::memcpy(tail + i, &value, 4);
    }
  }
}

bool write_trace(FuzzedDataProvider& input, const std::string& path, int rank) {
  WriterOptions options;
  options.compress = input.ConsumeBool();
  options.columns = input.ConsumeBool();
  options.delta_time = input.ConsumeBool();
  const int64_t ranks[] = {rank, -1, std::numeric_limits<int32_t>::max(), 1 << 20};
  const std::string metadata =
      "{\"rank\":" + std::to_string(ranks[input.ConsumeIntegralInRange<int>(0, 3)]) +
      ",\"world_size\":" +
      std::to_string(
          input.ConsumeIntegralInRange<int>(0, 3) == 0 ? std::numeric_limits<int32_t>::max() : 2) +
      ",\"start_ns\":" + std::to_string(int64_t(hostile_64(input, 0))) + "}";
  TraceWriter writer;
  if (!writer.open(path, metadata, options)) return false;
  RecordBuffer strings;
  for (uint32_t id = 1; id <= kNameCount; ++id) strings.define_string(id, kNames[id - 1]);
  writer.write_chunk(0, strings.bytes());
  uint64_t clock = 1000;
  const int chunks = input.ConsumeIntegralInRange<int>(1, 6);
  for (int c = 0; c < chunks && input.remaining_bytes() > 0; ++c) {
    const uint32_t stream = input.ConsumeIntegralInRange<uint32_t>(0, 3);
    RecordBuffer buffer;
    const int records = input.ConsumeIntegralInRange<int>(1, 64);
    for (int r = 0; r < records && input.remaining_bytes() > 0; ++r) {
      append_record(input, buffer, clock);
    }
    if (buffer.size() > 0) writer.write_chunk(stream, buffer.bytes());
  }
  if (input.ConsumeBool()) {  // a cleanly closed file ends with its kEnd chunk
    RecordBuffer end;
    end.append<StatsRecord>(RecordKind::kStats, clock);
    writer.write_chunk(0, end.bytes(), ChunkType::kEnd);
  }
  writer.close();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  static const std::string first = moescope::fuzz::scratch_path(".0.moetrace");
  static const std::string second = moescope::fuzz::scratch_path(".1.moetrace");
  std::vector<std::string> paths = {first};
  if (input.ConsumeBool()) paths.push_back(second);
  for (size_t rank = 0; rank < paths.size(); ++rank) {
    if (!write_trace(input, paths[rank], static_cast<int>(rank))) return 0;
  }
  moescope::fuzz::run_whole_pipeline(paths);
  return 0;
}

// libFuzzer target: any byte string given to the trace reader must be read without a crash,
// an out-of-bounds access or a hang; every decoded record must be inside its chunk.
//
// With MOESCOPE_FUZZ_WRITE_SEEDS=DIR set, writes a few valid traces into DIR first, so the
// corpus starts from real chunk structure instead of random bytes.
#include <cstdlib>
#include <string>

#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace {

using namespace moescope::trace;

void write_seeds(const std::string& dir) {
  for (int variant = 0; variant < 6; ++variant) {
    TraceWriter writer;
    WriterOptions options;
    options.compress = variant % 2 == 0;
    options.columns = variant < 2;     // column images (format version 2)
    options.delta_time = variant < 4;  // rows with and without delta-coded times
    if (!writer.open(dir + "/seed" + std::to_string(variant) + ".moetrace", R"({"rank":0})",
                     options)) {
      return;
    }
    RecordBuffer buffer;
    buffer.define_string(1, "name");
    buffer.append<SpanBeginRecord>(RecordKind::kSpanBegin, 10, 1);
    buffer.append<SpanEndRecord>(RecordKind::kSpanEnd, 20);
    auto& kernel = buffer.append<GpuKernelRecord>(RecordKind::kGpuKernel, 30, 1);
    kernel.end_time = 40;
    auto& load = buffer.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, 50, 0, 8);
    load.num_experts = 2;
    auto& comm = buffer.append_sized<CommOpRecord>(RecordKind::kCommOp, 60, 1, 16);
    comm.num_splits = 2;
    writer.write_chunk(1, buffer.bytes());
    RecordBuffer end;
    end.append<StatsRecord>(RecordKind::kStats, 70);
    writer.write_chunk(0, end.bytes(), ChunkType::kEnd);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MOESCOPE_FUZZ_WRITE_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  TraceReader reader;
  if (!reader.open_memory(data, size, "fuzz")) return 0;
  Chunk chunk;
  uint64_t checksum = 0;
  while (reader.next_chunk(chunk)) {
    for (RecordView record : chunk) {
      // Touch the whole record, as consumers do.
      checksum += record.header().time + record.data()[record.size() - 1];
      if (record.data() + record.size() > chunk.records.data() + chunk.records.size()) abort();
    }
  }
  return checksum == 42 ? 0 : 0;
}

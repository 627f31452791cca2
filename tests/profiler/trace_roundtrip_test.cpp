// Writer -> reader round trip of every record kind, with and without compression, column and
// delta coding.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::trace {
namespace {

std::string temp_file(const std::string& name) {
  // Per process: CTest runs the tests of this binary in parallel.
  return ::testing::TempDir() + "/roundtrip_" + name + "_" + std::to_string(getpid()) + ".moetrace";
}

// One record of every kind with values drawn from `rng`; returns the buffer.
RecordBuffer every_kind(std::mt19937_64& rng) {
  RecordBuffer buffer;
  auto t = [&] { return rng() % (1ull << 50); };
  auto u32 = [&] { return static_cast<uint32_t>(rng()); };
  buffer.define_string(7, "span \"name\" with \\ and \xc3\xa9");
  buffer.append<SpanBeginRecord>(RecordKind::kSpanBegin, t(), 7).domain = u32();
  buffer.append<SpanEndRecord>(RecordKind::kSpanEnd, t());
  {
    uint64_t start = t();
    auto& r = buffer.append<SpanCompleteRecord>(RecordKind::kSpanComplete, start, 7);
    r.end_time = start + 1234;
    r.domain = 3;
  }
  buffer.append<RangeStartRecord>(RecordKind::kRangeStart, t(), 7).range_id = rng();
  buffer.append<RangeEndRecord>(RecordKind::kRangeEnd, t()).range_id = rng();
  buffer.append<InstantRecord>(RecordKind::kInstant, t(), 7).domain = 2;
  buffer.append<CounterRecord>(RecordKind::kCounter, t(), 7).value = -3.25e9;
  {
    auto& r = buffer.append<FlowRecord>(RecordKind::kFlow, t());
    r.flow_id = rng();
    r.phase = 1;
  }
  {
    auto& r = buffer.append<ApiCallRecord>(RecordKind::kApiCall, t(), 7);
    r.end_time = rng();  // garbage end times must survive delta coding too
    r.correlation_id = u32();
  }
  {
    auto& r = buffer.append<GpuKernelRecord>(RecordKind::kGpuKernel, t(), 7);
    r.end_time = r.header.time + 5000;
    r.correlation_id = u32();
    r.device = 3;
    r.context = 1;
    r.stream = 7;
    r.grid[0] = 132, r.grid[1] = 2, r.grid[2] = 1;
    r.block[0] = 256, r.block[1] = 1, r.block[2] = 1;
    r.shared_memory_bytes = 49152;
    r.registers_per_thread = 168;
  }
  {
    auto& r = buffer.append<GpuCopyRecord>(RecordKind::kGpuCopy, t());
    r.end_time = r.header.time + 77;
    r.bytes = 1ull << 33;
    r.copy_kind = 2;
    r.is_memset = 0;
  }
  {
    auto& r = buffer.append<MemoryRecord>(RecordKind::kMemory, t());
    r.address = 0x7f0000001000ull;
    r.bytes = 1 << 20;
    r.device = -1;
    r.category = 3;
    r.is_free = 1;
  }
  {
    auto& r = buffer.append<GpuSyncRecord>(RecordKind::kGpuSync, t());
    r.end_time = r.header.time + 10;
    r.sync_kind = 2;
  }
  {
    auto& r = buffer.append_sized<CommOpRecord>(RecordKind::kCommOp, t(), 7, 4 * 8);
    r.end_time = 0;  // unknown completion
    r.kind = 6;
    r.num_splits = 4;
    r.peer = -1;
    r.rank = 1;
    r.num_ranks = 4;
    uint64_t splits[4] = {1, 0, 1ull << 40, 12345};
    std::memcpy(buffer.tail<CommOpRecord>(), splits, sizeof(splits));
  }
  {
    auto& r = buffer.append<TriggerRecord>(RecordKind::kTrigger, t(), 3);
    r.reason = 2;
    r.origin_rank = -1;
    r.code = -7;
  }
  {
    auto& r = buffer.append<CollectiveOpenRecord>(RecordKind::kCollectiveOpen, t(), 7);
    r.comm_id = ~0ull;
    r.bytes = 1ull << 40;
    r.kind = 1;
    r.sequence = 0xffffffffu;
    r.rank = -1;
    r.num_ranks = 1 << 30;
  }
  {
    auto& r = buffer.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, t(), 0, 5 * 4);
    r.step = -1;
    r.layer = 11;
    r.rank = 2;
    r.num_experts = 5;
    r.dropped_tokens = 9;
    uint32_t tokens[5] = {0, 1, 2, 4000000000u, 5};
    std::memcpy(buffer.tail<ExpertLoadRecord>(), tokens, sizeof(tokens));
  }
  {
    auto& r = buffer.append_sized<ExpertValuesRecord>(RecordKind::kExpertValues, t(), 0, 3 * 4);
    r.num_experts = 3;
    r.quantity = 1;
    float values[3] = {0.5f, -1.0f, 1e-30f};
    std::memcpy(buffer.tail<ExpertValuesRecord>(), values, sizeof(values));
  }
  {
    auto& r = buffer.append<LayerStatsRecord>(RecordKind::kLayerStats, t());
    r.aux_loss = 0.01f;
    r.router_entropy = 2.07f;
    r.nonfinite_logits = 3;
  }
  buffer.append<StepRecord>(RecordKind::kStep, t()).step = 42;
  {
    auto& r = buffer.append<RebalanceRecord>(RecordKind::kRebalance, t());
    r.imbalance_before = 2.5f;
    r.imbalance_after = 1.04f;
    r.bytes_moved = 1ull << 30;
    r.applied = 1;
  }
  {  // format 3: a decision with its numbers in the tail
    auto& r = buffer.append_sized<RebalanceRecord>(RecordKind::kRebalance, t(), 0,
                                                   padded_to_8(sizeof(RebalanceCosts)));
    r.num_costs = 1;
    RebalanceCosts costs{};
    costs.gain_ms = 1.25f;
    costs.net_ms = -0.5f;
    costs.reason = 2;
    std::memcpy(buffer.tail<RebalanceRecord>(), &costs, sizeof(costs));
  }
  buffer.append<ThreadInfoRecord>(RecordKind::kThreadInfo, t(), 7).os_thread_id = 4242;
  buffer.append<ClockSyncRecord>(RecordKind::kClockSync, t()).sync_id = 99;
  buffer.append<StatsRecord>(RecordKind::kStats, t()).dropped_events = 17;
  return buffer;
}

struct Options {
  bool compress;
  bool delta;
  bool columns;
};

class RoundTrip : public ::testing::TestWithParam<Options> {};

TEST_P(RoundTrip, EveryKindSurvivesBitExact) {
  std::mt19937_64 rng(std::random_device{}());
  RecordBuffer original = every_kind(rng);
  std::vector<uint8_t> expected = original.bytes();
  std::string path = temp_file("every_kind");
  {
    TraceWriter writer;
    WriterOptions options;
    options.compress = GetParam().compress;
    options.delta_time = GetParam().delta;
    options.columns = GetParam().columns;
    ASSERT_TRUE(writer.open(path, R"({"rank":3,"note":"x"})", options)) << writer.error();
    ASSERT_TRUE(writer.write_chunk(5, original.bytes()));
    RecordBuffer end;
    end.append<StatsRecord>(RecordKind::kStats, 1);
    ASSERT_TRUE(writer.write_chunk(0, end.bytes(), ChunkType::kEnd));
  }
  TraceReader reader;
  ASSERT_TRUE(reader.open(path));
  EXPECT_EQ(reader.metadata_json(), R"({"rank":3,"note":"x"})");
  Chunk chunk;
  ASSERT_TRUE(reader.next_chunk(chunk));
  EXPECT_EQ(chunk.stream, 5u);
  EXPECT_EQ(chunk.type, ChunkType::kEvents);
  EXPECT_EQ(chunk.records, expected);
  size_t kinds_seen = 0;
  for (RecordView record : chunk) {
    EXPECT_NE(fixed_record_size(record.header().kind), 0u);
    ++kinds_seen;
  }
  // One record of each kind, and a rebalance record with its numbers.
  EXPECT_EQ(kinds_seen, size_t{kMaxRecordKind} + 1);
  ASSERT_TRUE(reader.next_chunk(chunk));
  EXPECT_EQ(chunk.type, ChunkType::kEnd);
  EXPECT_FALSE(reader.next_chunk(chunk));
  EXPECT_TRUE(reader.saw_end());
  EXPECT_TRUE(reader.errors().empty());
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Codecs, RoundTrip,
                         ::testing::Values(Options{true, true, true}, Options{false, true, true},
                                           Options{true, true, false}, Options{true, false, false},
                                           Options{false, true, false},
                                           Options{false, false, false}));

TEST(DeltaCoding, InvertsOnArbitraryTimes) {
  std::mt19937_64 rng(std::random_device{}());
  RecordBuffer buffer;
  for (int i = 0; i < 1000; ++i) {
    auto& r = buffer.append<GpuKernelRecord>(RecordKind::kGpuKernel, rng(), 1);
    r.end_time = rng();
    buffer.append<SpanEndRecord>(RecordKind::kSpanEnd, rng());
  }
  std::vector<uint8_t> expected = buffer.bytes();
  delta_encode_times(buffer.bytes().data(), buffer.size());
  EXPECT_NE(buffer.bytes(), expected);
  delta_decode_times(buffer.bytes().data(), buffer.size());
  EXPECT_EQ(buffer.bytes(), expected);
}

TEST(Writer, ManyStreamsKeepOrderAndIdentity) {
  std::string path = temp_file("streams");
  TraceWriter writer;
  ASSERT_TRUE(writer.open(path, "{}"));
  for (uint32_t chunk = 0; chunk < 50; ++chunk) {
    RecordBuffer buffer;
    for (int i = 0; i < 100; ++i) {
      buffer.append<StepRecord>(RecordKind::kStep, 1000 * chunk + i).step = chunk * 100 + i;
    }
    ASSERT_TRUE(writer.write_chunk(chunk % 7 + 1, buffer.bytes()));
  }
  writer.close();
  TraceReader reader;
  ASSERT_TRUE(reader.open(path));
  Chunk chunk;
  int64_t expected_step = 0;
  uint32_t index = 0;
  while (reader.next_chunk(chunk)) {
    EXPECT_EQ(chunk.stream, index % 7 + 1);
    for (RecordView record : chunk) {
      auto step = record.as<StepRecord>();
      EXPECT_EQ(step.step, expected_step);
      EXPECT_EQ(step.header.time, 1000 * index + uint64_t(expected_step % 100));
      ++expected_step;
    }
    ++index;
  }
  EXPECT_EQ(expected_step, 5000);
  EXPECT_FALSE(reader.saw_end());  // no kEnd chunk was written
  std::remove(path.c_str());
}

TEST(Writer, UnwritablePathIsAClearError) {
  TraceWriter writer;
  EXPECT_FALSE(writer.open("/nonexistent-dir/x.moetrace", "{}"));
  EXPECT_NE(writer.error().find("/nonexistent-dir/x.moetrace"), std::string::npos);
  EXPECT_NE(writer.error().find("No such file"), std::string::npos);
}

TEST(Writer, FullDiskIsReportedAndEarlierChunksStayReadable) {
  TraceWriter full;
  EXPECT_FALSE(full.open("/dev/full", "{}"));  // every write to /dev/full fails with ENOSPC
  EXPECT_NE(full.error().find("No space"), std::string::npos) << full.error();

  // A file-size limit makes later chunk writes fail the way a full disk does.
  std::string path = temp_file("limited");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    TraceWriter writer;
    WriterOptions options;
    options.compress = false;
    options.columns = false;  // rows: chunk sizes are exactly the records' 24 KB
    if (!writer.open(path, "{}", options)) _exit(200);
    int written = 0;
    for (int chunk = 0; chunk < 100; ++chunk) {
      RecordBuffer buffer;
      for (int i = 0; i < 1000; ++i) buffer.append<StepRecord>(RecordKind::kStep, i).step = i;
      if (writer.write_chunk(1, buffer.bytes())) ++written;
      writer.flush();
    }
    bool ok = writer.failed_writes() > 0 && written > 0 && written < 100;
    _exit(ok ? written : 201);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  int written = WEXITSTATUS(status);
  ASSERT_GT(written, 0);
  EXPECT_EQ(written, 10);  // 24 KB chunks: 10 fit under 256 KB, the 11th is cut short
  TraceReader reader;
  ASSERT_TRUE(reader.open(path));
  Chunk chunk;
  int intact = 0;
  while (reader.next_chunk(chunk)) ++intact;
  EXPECT_EQ(intact, written);
  // The writer cut the partial 11th chunk off again: the file ends on a whole chunk, so later
  // chunks (once there is room) would follow the last good one.
  EXPECT_TRUE(reader.errors().empty()) << reader.errors()[0].message;
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_LT(info.st_size, 11 * 24 * 1024);
  std::remove(path.c_str());
}

// A program that closes every descriptor it did not open, then opens its own file (which gets
// the lowest number, maybe the trace's old one): the writer must not write into the program's
// file, must not close it, and must go on with the trace where it left off.
TEST(Writer, AProgramClosingAllDescriptorsKeepsItsFilesAndTheTraceGoesOn) {
  std::string path = temp_file("closed_under_us");
  std::string own = temp_file("program_own_file");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    TraceWriter writer;
    if (!writer.open(path, "{}")) _exit(200);
    RecordBuffer first;
    first.append<StepRecord>(RecordKind::kStep, 1).step = 1;
    if (!writer.write_chunk(1, first.bytes())) _exit(201);
    close_range(3, ~0U, 0);
    int program_fd = ::open(own.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    RecordBuffer second;
    second.append<StepRecord>(RecordKind::kStep, 2).step = 2;
    if (!writer.write_chunk(1, second.bytes())) _exit(202);
    writer.close();
    if (::write(program_fd, "hello", 5) != 5) _exit(203);  // still open: not closed by us
    _exit(::close(program_fd) == 0 ? 0 : 204);
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::ifstream own_file(own);
  std::string own_text((std::istreambuf_iterator<char>(own_file)), {});
  EXPECT_EQ(own_text, "hello");
  TraceReader reader;
  ASSERT_TRUE(reader.open(path));
  Chunk chunk;
  int chunks = 0;
  while (reader.next_chunk(chunk)) ++chunks;
  EXPECT_EQ(chunks, 2);
  EXPECT_TRUE(reader.errors().empty());
  std::remove(path.c_str());
  std::remove(own.c_str());
}

}  // namespace
}  // namespace moescope::trace

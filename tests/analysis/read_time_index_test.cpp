// The loader's read-time index (span nesting, order checks, running max ends, launch links,
// the process range; track_appender.h) must equal what finalize_process computes from scratch,
// on random traces with the awkward cases: equal and zero-length spans, complete spans, ranges
// ending on another thread, GPU work read before its launch, work and samples out of order,
// sparse correlation ids. Also: reading only a file's beginning, and string ids that differ
// between ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "file_load.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/trace_writer.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using trace::RecordKind;

struct RandomTraceShape {
  uint64_t seed = 1;
  bool zero_length_spans = false;  // forces the nesting fallback on the main thread
  bool kernels_out_of_order = false;
  bool counters_out_of_order = false;
  bool sparse_correlations = false;  // ids too sparse for the read-time table
  bool gpu_chunk_first = false;      // kernels read before their launches
};

// Writes a 3-stream trace: 1 = main thread (nested begin/end spans, launches, instants,
// counters), 2 = helper thread (complete spans, ranges that end on thread 1, syncs), 3 = GPU
// (kernels on two streams, unnamed copies, comm ops). Returns the path.
std::string write_random_trace(const std::string& path, const RandomTraceShape& shape) {
  std::mt19937_64 random(shape.seed);
  auto pick = [&](uint64_t below) { return random() % below; };
  trace::TraceWriter writer;
  EXPECT_TRUE(writer.open(path, "{\"rank\": 0, \"host\": \"h\"}"));
  trace::RecordBuffer main, helper, gpu, strings;
  const char* names[] = {
      "",     "step",  "forward",     "gemm", "a2a",         "loss",        "cudaLaunchKernel",
      "nvtx", "range", "helper-work", "main", "gemm_kernel", "copy_kernel", "ncclKernel"};
  for (uint32_t id = 1; id < sizeof(names) / sizeof(names[0]); ++id) {
    strings.define_string(id, names[id]);
  }
  main.append<trace::ThreadInfoRecord>(RecordKind::kThreadInfo, 0, 10).os_thread_id = 77;
  uint64_t now = 1'000'000;
  uint32_t correlation = shape.sparse_correlations ? 5 : 100;
  int depth = 0;
  std::vector<uint64_t> open_ranges;
  uint64_t next_range = 1;
  for (int i = 0; i < 3000; ++i) {
    const uint64_t action = pick(10);
    now += shape.zero_length_spans ? pick(3) : 1 + pick(50);
    if (action < 3 && depth < 6) {
      main.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, now, 1 + uint32_t(pick(5)))
          .domain = 7;
      ++depth;
    } else if (action < 6 && depth > 0) {
      main.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, now);
      --depth;
    } else if (action == 6) {
      correlation += shape.sparse_correlations ? 5'000'000 : 1 + uint32_t(pick(2));
      auto& call = main.append<trace::ApiCallRecord>(RecordKind::kApiCall, now, 6);
      call.end_time = now + 5;
      call.correlation_id = correlation;
      uint64_t start = now + 100 + (shape.kernels_out_of_order ? pick(400) : 0);
      if (pick(4) == 0) {
        auto& copy = gpu.append<trace::GpuCopyRecord>(RecordKind::kGpuCopy, start);
        copy.end_time = start + 30;
        copy.correlation_id = correlation;
        copy.copy_kind = uint8_t(pick(5));
        copy.bytes = 4096;
        copy.stream = 7;
      } else {
        auto& kernel = gpu.append<trace::GpuKernelRecord>(RecordKind::kGpuKernel, start, 11);
        kernel.end_time = start + 40 + pick(100);
        kernel.correlation_id = correlation;
        kernel.stream = 7 + uint32_t(pick(2));
        kernel.grid[0] = 1 + uint32_t(pick(3));
      }
    } else if (action == 7) {
      main.append<trace::InstantRecord>(RecordKind::kInstant, now, 5).domain = 7;
      uint64_t at = shape.counters_out_of_order && pick(3) == 0 ? now - 20 : now;
      main.append<trace::CounterRecord>(RecordKind::kCounter, at, 5).value = double(i);
    } else if (action == 8) {
      auto& complete = helper.append<trace::SpanCompleteRecord>(RecordKind::kSpanComplete, now, 9);
      complete.end_time = now + pick(30);
      if (pick(2)) {
        auto& range = helper.append<trace::RangeStartRecord>(RecordKind::kRangeStart, now, 8);
        range.range_id = next_range;
        open_ranges.push_back(next_range++);
      }
      auto& sync = helper.append<trace::GpuSyncRecord>(RecordKind::kGpuSync, now);
      sync.end_time = now + 7;
      sync.sync_kind = 1 + uint32_t(pick(4));
    } else {
      if (!open_ranges.empty()) {
        main.append<trace::RangeEndRecord>(RecordKind::kRangeEnd, now).range_id =
            open_ranges.back();
        open_ranges.pop_back();
      }
      auto& comm = gpu.append<trace::CommOpRecord>(RecordKind::kCommOp, now, 4);
      comm.start_time = now + (shape.kernels_out_of_order ? pick(300) : 10);
      comm.end_time = comm.start_time + 200;
      comm.comm_id = 3;
      comm.kind = 6;
      comm.num_ranks = 2;
    }
    if (i % 700 == 699) {  // several chunks per stream, GPU first when asked
      if (shape.gpu_chunk_first) writer.write_chunk(3, gpu.bytes()), gpu.clear();
      writer.write_chunk(1, main.bytes());
      writer.write_chunk(2, helper.bytes());
      main.clear();
      helper.clear();
    }
  }
  for (; depth > 0; --depth) main.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, ++now);
  writer.write_chunk(1, main.bytes());
  writer.write_chunk(2, helper.bytes());
  writer.write_chunk(3, gpu.bytes());
  writer.write_chunk(0, strings.bytes(), trace::ChunkType::kEnd);
  writer.close();
  return path;
}

// What finalize_process computes when the reader established nothing.
FileLoad without_read_time_index(FileLoad load) {
  load.read_index = ReadTimeIndex();
  for (auto& thread : load.process.threads) {
    thread.spans_by_depth.clear();
    for (Span& span : thread.spans) span.parent = -1, span.depth = 0;
  }
  for (auto& stream : load.process.gpu_streams) {
    stream.max_end.clear();
    for (GpuOp& op : stream.ops) op.launch_thread = op.launch_call = kNoIndex;
  }
  for (auto& comm : load.process.communicators) comm.max_end.clear();
  return load;
}

void expect_same_process(const ProcessTrack& fast, const ProcessTrack& slow) {
  EXPECT_EQ(fast.begin, slow.begin);
  EXPECT_EQ(fast.end, slow.end);
  ASSERT_EQ(fast.threads.size(), slow.threads.size());
  for (size_t t = 0; t < fast.threads.size(); ++t) {
    const auto& a = fast.threads[t];
    const auto& b = slow.threads[t];
    ASSERT_EQ(a.spans.size(), b.spans.size()) << "thread " << t;
    for (size_t i = 0; i < a.spans.size(); ++i) {
      EXPECT_EQ(a.spans[i].start, b.spans[i].start) << "thread " << t << " span " << i;
      EXPECT_EQ(a.spans[i].end, b.spans[i].end) << "thread " << t << " span " << i;
      EXPECT_EQ(a.spans[i].name, b.spans[i].name) << "thread " << t << " span " << i;
      EXPECT_EQ(a.spans[i].parent, b.spans[i].parent) << "thread " << t << " span " << i;
      EXPECT_EQ(a.spans[i].depth, b.spans[i].depth) << "thread " << t << " span " << i;
      EXPECT_EQ(a.spans[i].flags, b.spans[i].flags) << "thread " << t << " span " << i;
    }
    EXPECT_EQ(a.spans_by_depth, b.spans_by_depth) << "thread " << t;
    ASSERT_EQ(a.api_calls.size(), b.api_calls.size());
    for (size_t i = 0; i < a.api_calls.size(); ++i) {
      EXPECT_EQ(a.api_calls[i].start, b.api_calls[i].start);
      EXPECT_EQ(a.api_calls[i].correlation_id, b.api_calls[i].correlation_id);
    }
    ASSERT_EQ(a.instants.size(), b.instants.size());
    EXPECT_EQ(a.last_time, b.last_time);
  }
  ASSERT_EQ(fast.gpu_streams.size(), slow.gpu_streams.size());
  for (size_t s = 0; s < fast.gpu_streams.size(); ++s) {
    const auto& a = fast.gpu_streams[s];
    const auto& b = slow.gpu_streams[s];
    EXPECT_EQ(a.stream, b.stream);
    EXPECT_EQ(a.max_end, b.max_end) << "stream " << s;
    ASSERT_EQ(a.ops.size(), b.ops.size());
    for (size_t i = 0; i < a.ops.size(); ++i) {
      EXPECT_EQ(a.ops[i].start, b.ops[i].start) << "stream " << s << " op " << i;
      EXPECT_EQ(a.ops[i].correlation_id, b.ops[i].correlation_id);
      EXPECT_EQ(a.ops[i].launch_thread, b.ops[i].launch_thread) << "stream " << s << " op " << i;
      EXPECT_EQ(a.ops[i].launch_call, b.ops[i].launch_call) << "stream " << s << " op " << i;
      EXPECT_EQ(a.ops[i].name, b.ops[i].name);
    }
  }
  ASSERT_EQ(fast.communicators.size(), slow.communicators.size());
  for (size_t c = 0; c < fast.communicators.size(); ++c) {
    EXPECT_EQ(fast.communicators[c].max_end, slow.communicators[c].max_end);
    ASSERT_EQ(fast.communicators[c].ops.size(), slow.communicators[c].ops.size());
    for (size_t i = 0; i < fast.communicators[c].ops.size(); ++i) {
      EXPECT_EQ(fast.communicators[c].ops[i].start, slow.communicators[c].ops[i].start);
    }
  }
  ASSERT_EQ(fast.counters.size(), slow.counters.size());
  for (size_t c = 0; c < fast.counters.size(); ++c) {
    EXPECT_EQ(fast.counters[c].times, slow.counters[c].times);
    EXPECT_EQ(fast.counters[c].values, slow.counters[c].values);
  }
}

class ReadTimeIndexTest : public ::testing::TestWithParam<int> {};

TEST_P(ReadTimeIndexTest, EqualsFullFinalize) {
  const int variant = GetParam();
  RandomTraceShape shape;
  shape.seed = 11 + uint64_t(variant);
  shape.zero_length_spans = variant == 1;
  shape.kernels_out_of_order = variant == 2;
  shape.counters_out_of_order = variant == 2;
  shape.sparse_correlations = variant == 3;
  shape.gpu_chunk_first = variant == 4 || variant == 2;
  const std::string path = write_random_trace(
      testing::test_directory("read_time_index") + "/v" + std::to_string(variant) + ".moetrace",
      shape);
  FileLoad fast = read_moetrace_file(path, {}, {});
  ASSERT_TRUE(fast.opened);
  ASSERT_TRUE(fast.errors.empty()) << fast.errors[0].to_string();
  FileLoad slow = without_read_time_index(fast);
  const ReadTimeIndex known = fast.read_index;
  ASSERT_EQ(known.thread_ready.size(), 2u);
  // The fast paths are taken where they apply, so the comparison below tests them.
  EXPECT_EQ(known.thread_ready[0] != 0, variant != 1);  // main thread: begin/end pairs
  EXPECT_EQ(known.thread_ready[1], 0);                  // helper: complete spans and ranges
  EXPECT_EQ(known.launches_linked, variant != 3);
  const bool gpu_in_order = std::all_of(known.gpu_stream_ready.begin(),
                                        known.gpu_stream_ready.end(), [](uint8_t f) { return f; });
  EXPECT_EQ(gpu_in_order, variant != 2);
  EXPECT_TRUE(known.have_range);

  finalize_process(fast);
  finalize_process(slow);
  expect_same_process(fast.process, slow.process);
  // Every kernel and copy found its launch (the calls are all in the file).
  for (const auto& stream : fast.process.gpu_streams) {
    for (const GpuOp& op : stream.ops) {
      if (op.kind == GpuOpKind::kSync) continue;
      ASSERT_NE(op.launch_thread, kNoIndex);
      EXPECT_EQ(fast.process.threads[op.launch_thread].api_calls[op.launch_call].correlation_id,
                op.correlation_id);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ReadTimeIndexTest, ::testing::Range(0, 5));

TEST(ReadTimeIndex, RepeatedLaunchConfigurationsShareOneDetail) {
  RandomTraceShape shape;
  const std::string path =
      write_random_trace(testing::test_directory("read_time_index") + "/details.moetrace", shape);
  FileLoad load = load_moetrace_file(path, {}, {});
  size_t kernels = 0, details = 0;
  for (const auto& stream : load.process.gpu_streams) {
    details += stream.kernel_details.size();
    for (const GpuOp& op : stream.ops) {
      if (op.kind != GpuOpKind::kKernel) continue;
      ++kernels;
      ASSERT_LT(op.detail, stream.kernel_details.size());
    }
  }
  ASSERT_GT(kernels, 100u);
  EXPECT_LE(details, 6u);  // one kernel name, three grid sizes in random order, two streams
}

TEST(ReadTimeIndex, MaxEventsPerFileReadsTheBeginning) {
  const std::string dir = testing::test_directory("read_prefix");
  RandomTraceShape shape;
  const std::string path = write_random_trace(dir + "/prefix.moetrace", shape);
  TraceModel whole = load_traces({path});
  LoadOptions options;
  options.max_events_per_file = 500;
  TraceModel beginning = load_traces({path}, options);
  ASSERT_EQ(beginning.processes.size(), 1u);
  const ProcessTrack& part = beginning.processes[0];
  EXPECT_TRUE(part.truncated);
  EXPECT_FALSE(whole.processes[0].truncated);
  EXPECT_GE(part.events, 500u);
  EXPECT_LT(part.events, whole.processes[0].events);
  EXPECT_LT(part.end, whole.processes[0].end);
  // Same first spans as the whole load.
  ASSERT_FALSE(part.threads.empty());
  ASSERT_GT(part.threads[0].spans.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(part.threads[0].spans[i].start, whole.processes[0].threads[0].spans[i].start);
  }
  // A limit above the file's size reads it all and says so.
  options.max_events_per_file = whole.processes[0].events + 1000;
  EXPECT_FALSE(load_traces({path}, options).processes[0].truncated);
}

// Rank 1 names the same things with other ids, and one event uses an id it never defined:
// names must still come out right on both ranks.
TEST(ReadTimeIndex, RanksWithDifferentStringIds) {
  const std::string dir = testing::test_directory("string_ids");
  std::vector<std::string> paths;
  for (int rank = 0; rank < 2; ++rank) {
    trace::TraceWriter writer;
    paths.push_back(dir + "/r" + std::to_string(rank) + ".moetrace");
    ASSERT_TRUE(writer.open(paths.back(), "{\"rank\": " + std::to_string(rank) + "}"));
    trace::RecordBuffer records;
    const uint32_t forward = rank == 0 ? 1 : 2, backward = rank == 0 ? 2 : 1;
    records.define_string(forward, "forward");
    records.define_string(backward, "backward");
    records.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, 100, forward);
    records.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, 200);
    records.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, 300, backward);
    records.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, 400);
    records.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, 500, 9);  // never defined
    records.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, 600);
    auto& copy = records.append<trace::GpuCopyRecord>(RecordKind::kGpuCopy, 700);
    copy.end_time = 800;
    copy.copy_kind = 2;
    writer.write_chunk(1, records.bytes(), trace::ChunkType::kEnd);
    writer.close();
  }
  TraceModel model = load_traces(paths);
  ASSERT_EQ(model.processes.size(), 2u);
  for (const ProcessTrack& process : model.processes) {
    const auto& spans = process.threads.at(0).spans;
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(model.name(spans[0].name), "forward") << "rank " << process.rank;
    EXPECT_EQ(model.name(spans[1].name), "backward") << "rank " << process.rank;
    EXPECT_EQ(model.name(spans[2].name), "<unnamed 9>") << "rank " << process.rank;
    EXPECT_EQ(model.name(process.gpu_streams.at(0).ops.at(0).name), "Memcpy DtoH");
  }
}

// Id 0 means "no name" whatever else the file defines: none at all, or only a far-off id
// (too sparse for a direct table).
TEST(ReadTimeIndex, NoNameStaysEmpty) {
  const std::string dir = testing::test_directory("no_name");
  std::vector<std::string> paths;
  for (int variant = 0; variant < 2; ++variant) {
    trace::TraceWriter writer;
    paths.push_back(dir + "/v" + std::to_string(variant) + ".moetrace");
    ASSERT_TRUE(writer.open(paths.back(), "{\"rank\": " + std::to_string(variant) + "}"));
    trace::RecordBuffer records;
    if (variant == 1) records.define_string(1'000'000, "far");
    records.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, 100, 0);  // domain 0 too
    records.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, 200);
    records.append<trace::InstantRecord>(RecordKind::kInstant, 150, variant == 1 ? 1'000'000 : 0);
    writer.write_chunk(1, records.bytes(), trace::ChunkType::kEnd);
    writer.close();
  }
  TraceModel model = load_traces(paths);
  ASSERT_EQ(model.processes.size(), 2u);
  for (const ProcessTrack& process : model.processes) {
    const auto& thread = process.threads.at(0);
    ASSERT_EQ(thread.spans.size(), 1u);
    EXPECT_EQ(thread.spans[0].name, 0u) << "rank " << process.rank;
    EXPECT_EQ(thread.spans[0].domain, 0u) << "rank " << process.rank;
    EXPECT_EQ(thread.instants.at(0).domain, 0u);
    EXPECT_EQ(model.name(thread.instants.at(0).name), process.rank == 1 ? "far" : "");
  }
}

// The command-line progress line: quiet below the threshold, one updated line, a newline at
// the end.
TEST(LoadProgressLine, OneLineUpdatedInPlace) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  auto progress = line_progress(out, 1000);
  LoadProgress small;
  small.files_total = 1;
  small.bytes_total = 999;
  progress(small);  // below the threshold: nothing
  LoadProgress step;
  step.files_total = 2;
  step.bytes_total = 4000;
  step.bytes_done = 1000;
  progress(step);
  step.files_done = 1;
  step.bytes_done = 3000;
  progress(step);
  step.files_done = 2;
  step.bytes_done = 4000;
  progress(step);
  std::fclose(out);
  EXPECT_EQ(std::string(text, size),
            "\rloading 0/2 files, 25%\rloading 1/2 files, 75%\rloading 2/2 files, 100%\n");
  std::free(text);
}

}  // namespace
}  // namespace moescope::analysis

// Loading: ranks, nesting, matching, launch links, strings written after events, steps, clock
// alignment across hosts, damaged files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "file_load.h"
#include "moescope/analysis/collective_mismatch.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/visible_range.h"
#include "moescope/trace/trace_writer.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::kMs;
using testing::SyntheticOptions;

TEST(TraceLoader, MergesRanksAndBuildsTracks) {
  SyntheticOptions options;
  options.num_ranks = 3;
  options.num_steps = 4;
  auto paths = testing::write_synthetic_run(testing::test_directory("merge"), "run", options);
  std::reverse(paths.begin(), paths.end());  // ranks come from metadata, not argument order
  size_t progress_calls = 0;
  LoadOptions load_options;
  load_options.progress = [&](const LoadProgress& progress) {
    ++progress_calls;
    EXPECT_LE(progress.files_done, progress.files_total);
  };
  TraceModel model = load_traces(paths, load_options);
  ASSERT_TRUE(model.errors.empty()) << model.errors[0].to_string();
  ASSERT_EQ(model.processes.size(), 3u);
  EXPECT_GE(progress_calls, 3u);
  for (int r = 0; r < 3; ++r) {
    const ProcessTrack& process = model.processes[r];
    EXPECT_EQ(process.rank, r);
    EXPECT_TRUE(process.complete);
    ASSERT_EQ(process.threads.size(), 1u);
    const CpuThreadTrack& thread = process.threads[0];
    EXPECT_EQ(model.name(thread.name), "main");
    EXPECT_EQ(thread.os_thread_id, uint32_t(4242 + r));
    // train_step > moe.layer > phases: depth 0, 1, 2.
    ASSERT_EQ(thread.spans_by_depth.size(), 3u);
    EXPECT_EQ(thread.spans_by_depth[0].size(), 4u);
    EXPECT_EQ(thread.spans_by_depth[1].size(), 8u);
    EXPECT_EQ(thread.spans_by_depth[2].size(), 32u);
    for (size_t i = 0; i < thread.spans.size(); ++i) {
      const Span& span = thread.spans[i];
      EXPECT_EQ(span.flags & kSpanUnclosed, 0);
      if (span.parent >= 0) {
        const Span& parent = thread.spans[size_t(span.parent)];
        EXPECT_LE(parent.start, span.start);
        EXPECT_GE(parent.end, span.end);
        EXPECT_EQ(parent.depth + 1, span.depth);
        EXPECT_LT(size_t(span.parent), i);
      }
    }
    EXPECT_EQ(model.name(thread.spans[thread.spans_by_depth[1][0]].name), "moe.layer");
    EXPECT_EQ(model.name(thread.spans[thread.spans_by_depth[1][0]].domain), "moescope");
    // Streams 7 and 13 on device 0; every kernel linked to its launch.
    ASSERT_EQ(process.gpu_streams.size(), 2u);
    EXPECT_EQ(process.gpu_streams[0].stream, 7u);
    EXPECT_EQ(process.gpu_streams[1].stream, 13u);
    for (const auto& stream : process.gpu_streams) {
      for (const GpuOp& op : stream.ops) {
        ASSERT_NE(op.launch_thread, kNoIndex);
        const ApiCall& call = process.threads[op.launch_thread].api_calls[op.launch_call];
        EXPECT_EQ(call.correlation_id, op.correlation_id);
        EXPECT_EQ(model.name(call.name), "cudaLaunchKernel");
        EXPECT_LE(call.start, op.start);
      }
      EXPECT_TRUE(std::is_sorted(stream.ops.begin(), stream.ops.end(),
                                 [](const GpuOp& a, const GpuOp& b) { return a.start < b.start; }));
    }
    ASSERT_EQ(process.communicators.size(), 1u);
    const CommunicatorTrack& comm = process.communicators[0];
    EXPECT_EQ(comm.ops.size(), 4u * 2 * 2);
    EXPECT_EQ(comm.splits(comm.ops[0]).size(), 3u);
    EXPECT_EQ(process.steps.size(), 4u);
    EXPECT_EQ(process.memory_events.size(), 1u + 4 * 2);
  }
  EXPECT_EQ(model.step_source, StepSource::kMarkers);
  EXPECT_EQ(model.clock_alignment, ClockAlignmentMethod::kSingleHost);
  EXPECT_EQ(model.expert_loads.size(), 3u * 4 * 2);
  EXPECT_EQ(model.tokens(model.expert_loads[0]).size(), 8u);
  EXPECT_LT(model.begin, model.end);
}

TEST(TraceLoader, VisibleRangesFindExactlyTheOverlappingItems) {
  SyntheticOptions options;
  options.num_ranks = 1;
  auto paths = testing::write_synthetic_run(testing::test_directory("visible"), "run", options);
  TraceModel model = load_traces(paths);
  const ProcessTrack& process = model.processes.at(0);
  const TimeNs t0 = process.begin + 5 * kMs, t1 = t0 + 3 * kMs;
  const CpuThreadTrack& thread = process.threads[0];
  for (size_t depth = 0; depth < thread.spans_by_depth.size(); ++depth) {
    IndexRange range = visible_spans(thread, depth, t0, t1);
    size_t expected = 0;
    for (uint32_t index : thread.spans_by_depth[depth]) {
      const Span& span = thread.spans[index];
      expected += span.end > t0 && span.start < t1;
    }
    EXPECT_EQ(range.size(), expected) << "depth " << depth;
  }
  const GpuStreamTrack& stream = process.gpu_streams[0];
  IndexRange range = visible_range(stream, t0, t1);
  for (size_t i = 0; i < stream.ops.size(); ++i) {
    bool overlaps = stream.ops[i].end > t0 && stream.ops[i].start < t1;
    if (overlaps) {
      EXPECT_TRUE(i >= range.begin && i < range.end) << i;
    }
  }
}

TEST(TraceLoader, RepairsUnmatchedAndUnclosedSpans) {
  std::string path = testing::test_directory("unmatched") + "/broken.moetrace";
  trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(path, R"({"rank": 0, "host": "h"})"));
  trace::RecordBuffer records;
  records.define_string(1, "outer");
  records.define_string(2, "inner");
  records.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 50);  // nothing open
  records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 100, 1);
  records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 200, 2);
  records.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 300);
  records.append<trace::RangeStartRecord>(trace::RecordKind::kRangeStart, 250, 2).range_id = 9;
  records.append<trace::RangeEndRecord>(trace::RecordKind::kRangeEnd, 400).range_id = 9;
  records.append<trace::RangeEndRecord>(trace::RecordKind::kRangeEnd, 450).range_id = 10;
  records.append<trace::InstantRecord>(trace::RecordKind::kInstant, 900, 2);
  ASSERT_TRUE(writer.write_chunk(1, records.bytes()));
  writer.close();
  TraceModel model = load_traces({path});
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  EXPECT_EQ(process.unmatched_span_ends, 1u);
  EXPECT_EQ(process.unmatched_range_ends, 1u);
  EXPECT_EQ(process.unclosed_spans, 1u);
  const CpuThreadTrack& thread = process.threads.at(0);
  ASSERT_EQ(thread.spans.size(), 3u);
  EXPECT_EQ(model.name(thread.spans[0].name), "outer");
  EXPECT_EQ(thread.spans[0].end, 900);  // closed at the thread's last time
  EXPECT_TRUE(thread.spans[0].flags & kSpanUnclosed);
  EXPECT_EQ(thread.spans[1].end, 300);
  EXPECT_EQ(thread.spans[1].depth, 1);
  EXPECT_EQ(thread.spans[2].end, 400);  // the range
  EXPECT_TRUE(thread.spans[2].flags & kSpanFromRange);
}

TEST(TraceLoader, AlignsClocksAcrossHostsFromCollectives) {
  SyntheticOptions options;
  options.num_ranks = 4;
  options.ranks_per_host = 2;
  options.host_clock_skew_ns = 3'000'000'123;  // host 1 runs 3 s ahead
  auto skewed = testing::write_synthetic_run(testing::test_directory("skew"), "run", options);
  options.host_clock_skew_ns = 0;
  auto straight = testing::write_synthetic_run(testing::test_directory("noskew"), "run", options);
  TraceModel aligned = load_traces(skewed);
  TraceModel reference = load_traces(straight);
  EXPECT_EQ(aligned.clock_alignment, ClockAlignmentMethod::kCollectiveEnds);
  ASSERT_EQ(aligned.processes.size(), 4u);
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(aligned.processes[p].steps.at(2).start, reference.processes[p].steps.at(2).start);
    EXPECT_EQ(aligned.processes[p].clock_offset, p >= 2 ? -3'000'000'123 : 0);
  }
  // The second host's error bound: its causality interval holds the true offset.
  ASSERT_EQ(aligned.host_clocks.size(), 1u);
  const HostClock& clock = aligned.host_clocks[0];
  EXPECT_EQ(clock.host, aligned.processes[2].host);
  EXPECT_GT(clock.bounding_collectives, 0u);
  ASSERT_GE(clock.error_bound, 0);
  EXPECT_LE(clock.lowest_offset, -3'000'000'123);
  EXPECT_GE(clock.highest_offset, -3'000'000'123);
  EXPECT_LE(clock.error_bound, clock.highest_offset - clock.lowest_offset);
  options.host_clock_skew_ns = -7'000'000;
  options.clock_sync_points = true;
  auto synced = testing::write_synthetic_run(testing::test_directory("sync"), "run", options);
  TraceModel by_sync = load_traces(synced);
  EXPECT_EQ(by_sync.clock_alignment, ClockAlignmentMethod::kClockSync);
  EXPECT_EQ(by_sync.processes[3].clock_offset, 7'000'000);
  // Sync points set the offset; the collectives still bound its error.
  ASSERT_EQ(by_sync.host_clocks.size(), 1u);
  EXPECT_GE(by_sync.host_clocks[0].error_bound, 0);
  EXPECT_LE(by_sync.host_clocks[0].lowest_offset, 7'000'000);
  EXPECT_GE(by_sync.host_clocks[0].highest_offset, 7'000'000);
}

TEST(TraceLoader, DetectsStepsFromARepeatingRangeWithoutMarkers) {
  SyntheticOptions options;
  options.num_ranks = 2;
  options.num_steps = 5;
  options.write_step_markers = false;
  auto paths = testing::write_synthetic_run(testing::test_directory("nomarkers"), "run", options);
  TraceModel model = load_traces(paths);
  EXPECT_EQ(model.step_source, StepSource::kRepeatingRange);
  for (const auto& process : model.processes) {
    ASSERT_EQ(process.steps.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(process.steps[i].step, int64_t(i));
    EXPECT_EQ(step_at(process, process.steps[2].start + 1), 2);
  }
}

TEST(TraceLoader, DamagedFilesLoadPartiallyWithErrors) {
  SyntheticOptions options;
  options.num_ranks = 2;
  auto paths = testing::write_synthetic_run(testing::test_directory("damage"), "run", options);
  // Truncate rank 1 in the middle of its second chunk and flip a byte in rank 0's first chunk.
  auto size = std::filesystem::file_size(paths[1]);
  std::filesystem::resize_file(paths[1], size - 200);
  {
    std::fstream file(paths[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(400);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(400);
    byte = char(byte ^ 0x5a);
    file.write(&byte, 1);
  }
  paths.push_back(testing::test_directory("damage_missing") + "/missing.moetrace");
  TraceModel model = load_traces(paths);
  ASSERT_GE(model.errors.size(), 3u);
  bool named_missing = false, named_rank1 = false, named_rank0 = false;
  for (const LoadError& error : model.errors) {
    named_missing |= error.file == paths[2];
    named_rank1 |= error.file == paths[1];
    named_rank0 |= error.file == paths[0] && error.offset > 0;
  }
  EXPECT_TRUE(named_missing && named_rank1 && named_rank0);
  // Both damaged files still give a process with what was readable.
  ASSERT_EQ(model.processes.size(), 2u);
  EXPECT_FALSE(model.processes[1].complete);
  size_t events = 0;
  for (const auto& process : model.processes) events += process.events;
  EXPECT_GT(events, 0u);
}

TEST(TraceLoader, NotATraceIsAnErrorNamingTheFile) {
  std::string path = testing::test_directory("garbage") + "/garbage.moetrace";
  std::ofstream(path) << "this is not a trace";
  TraceModel model = load_traces({path});
  EXPECT_TRUE(model.processes.empty());
  ASSERT_EQ(model.errors.size(), 1u);
  EXPECT_EQ(model.errors[0].file, path);
  std::string json_path = testing::test_directory("badjson") + "/bad.json";
  std::ofstream(json_path) << "{\"traceEvents\": [ {\"ph\": \"X\", ";
  TraceModel json_model = load_traces({json_path});
  ASSERT_EQ(json_model.errors.size(), 1u);
  EXPECT_NE(json_model.errors[0].message.find("JSON"), std::string::npos);
}

// JSON that parses but holds no trace (an array of numbers, moescope's own report) is refused
// as "not a trace", so `report` fails instead of reporting "0 events, no problems".
TEST(TraceLoader, JsonWithoutTraceEventsIsRefused) {
  const std::string directory = testing::test_directory("not_traces");
  const std::string numbers = directory + "/numbers.json", report = directory + "/report.json";
  std::ofstream(numbers) << "[1, 2, 3]";
  std::ofstream(report) << R"({"summary": {"ranks": 1}, "findings": []})";
  for (const std::string& path : {numbers, report}) {
    TraceModel model = load_traces({path});
    EXPECT_TRUE(model.processes.empty()) << path;
    bool refused = false;
    for (const LoadError& error : model.errors) {
      refused |= error.refused && error.message.find("not a trace") != std::string::npos;
    }
    EXPECT_TRUE(refused) << path;
  }
}

}  // namespace
}  // namespace moescope::analysis

namespace moescope::analysis {
namespace {

// The pipelined path (decoder thread per file, used when threads are left over) gives the same
// model as the plain one; a cancel flag stops with an error.
TEST(TraceLoader, PipelinedDecodingGivesTheSameModel) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  options.num_steps = 20;
  options.sync_per_step = true;
  auto paths = testing::write_synthetic_run(testing::test_directory("pipelined"), "run", options);
  LoadOptions plain_options;
  plain_options.max_threads = 1;
  LoadOptions pipelined_options;
  pipelined_options.max_threads = 8;
  TraceModel plain = load_traces(paths, plain_options);
  TraceModel pipelined = load_traces(paths, pipelined_options);
  ASSERT_EQ(plain.processes.size(), pipelined.processes.size());
  EXPECT_EQ(plain.total_events, pipelined.total_events);
  for (size_t p = 0; p < plain.processes.size(); ++p) {
    const auto& a = plain.processes[p];
    const auto& b = pipelined.processes[p];
    EXPECT_EQ(a.chunks, b.chunks);
    ASSERT_EQ(a.threads.size(), b.threads.size());
    ASSERT_EQ(a.threads[0].spans.size(), b.threads[0].spans.size());
    for (size_t i = 0; i < a.threads[0].spans.size(); ++i) {
      EXPECT_EQ(a.threads[0].spans[i].start, b.threads[0].spans[i].start);
      EXPECT_EQ(a.threads[0].spans[i].end, b.threads[0].spans[i].end);
    }
    ASSERT_EQ(a.gpu_streams.size(), b.gpu_streams.size());
    for (size_t s = 0; s < a.gpu_streams.size(); ++s) {
      EXPECT_EQ(a.gpu_streams[s].ops.size(), b.gpu_streams[s].ops.size());
    }
    EXPECT_EQ(a.steps.size(), b.steps.size());
  }
  std::atomic<bool> cancel{true};
  LoadOptions cancelled_options;
  cancelled_options.cancel = &cancel;
  TraceModel cancelled = load_traces(paths, cancelled_options);
  EXPECT_TRUE(cancelled.processes.empty());
}

}  // namespace
}  // namespace moescope::analysis

namespace moescope::analysis {
namespace {

// A job killed with SIGKILL leaves its launcher's trace behind (the shim and `moescope record`
// delete it only at a clean end): beside ranked traces, a file that states no rank and holds
// only the shim's notes is left out with a note, instead of becoming rank 2 with a step of its
// own. One whose instant is the program's own is kept (numbered by file order, as before).
std::string write_rank_trace(const std::string& path, const char* metadata, const char* domain) {
  trace::TraceWriter writer;
  EXPECT_TRUE(writer.open(path, metadata));
  trace::RecordBuffer records;
  records.define_string(1, "train_step");
  records.define_string(2, domain ? domain : "");
  if (domain) {
    records.append<trace::InstantRecord>(trace::RecordKind::kInstant, 150, 1).domain = 2;
  } else {
    records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 100, 1);
    records.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 200);
  }
  EXPECT_TRUE(writer.write_chunk(1, records.bytes()));
  writer.close();
  return path;
}

TEST(TraceLoader, AKilledJobsEmptyLauncherTraceIsNoRank) {
  const std::string dir = testing::test_directory("killed_launcher");
  const std::string rank0 = write_rank_trace(dir + "/run.0.moetrace", R"({"rank": 0})", nullptr);
  const std::string rank1 = write_rank_trace(dir + "/run.1.moetrace", R"({"rank": 1})", nullptr);
  const std::string launcher =
      write_rank_trace(dir + "/run.norank.9.moetrace", R"({"host": "h"})", "moescope");
  TraceModel model = load_traces({launcher, rank0, rank1});
  ASSERT_EQ(model.processes.size(), 2u);
  EXPECT_EQ(model.processes[0].rank, 0);
  EXPECT_EQ(model.processes[1].rank, 1);
  ASSERT_EQ(model.errors.size(), 1u);
  EXPECT_EQ(model.errors[0].file, launcher);
  EXPECT_NE(model.errors[0].message.find("states no rank and holds nothing of its program"),
            std::string::npos)
      << model.errors[0].message;

  const std::string helper =
      write_rank_trace(dir + "/run.norank.10.moetrace", R"({"host": "h"})", "my_app");
  TraceModel kept = load_traces({helper, rank0, rank1});
  EXPECT_EQ(kept.processes.size(), 3u);
  ASSERT_FALSE(kept.errors.empty());
  EXPECT_NE(kept.errors[0].message.find("ranks numbered by file order"), std::string::npos);
  // Alone (no ranked trace beside it), a launcher's trace is what was asked for: kept.
  EXPECT_EQ(load_traces({launcher}).processes.size(), 1u);
}

// The `trigger` kind (the flight recorder's "why"): decoded into ProcessTrack::triggers, sorted
// by time, its detail a model string, counted in the time range and shifted with the clock.
TEST(TraceLoader, ReadsTriggersSortedWithTheirDetail) {
  std::string path = testing::test_directory("triggers") + "/triggers.moetrace";
  trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(path, R"({"rank": 0, "host": "h"})"));
  trace::RecordBuffer records;
  records.define_string(1, "RuntimeError: boom");
  records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 100, 1);
  records.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 200);
  {
    auto& late = records.append<trace::TriggerRecord>(trace::RecordKind::kTrigger, 900, 1);
    late.reason = 4;  // MOESCOPE_TRIGGER_EXCEPTION
    late.origin_rank = 3;
  }
  {
    auto& early = records.append<trace::TriggerRecord>(trace::RecordKind::kTrigger, 150, 0);
    early.reason = 3;  // MOESCOPE_TRIGGER_CRASH
    early.origin_rank = -1;
    early.code = 11;
  }
  ASSERT_TRUE(writer.write_chunk(1, records.bytes()));
  writer.close();
  TraceModel model = load_traces({path});
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  ASSERT_EQ(process.triggers.size(), 2u);
  EXPECT_EQ(process.triggers[0].time, 150);
  EXPECT_STREQ(trigger_reason_name(process.triggers[0].reason), "crash");
  EXPECT_EQ(process.triggers[0].code, 11);
  EXPECT_EQ(process.triggers[0].origin_rank, -1);
  EXPECT_EQ(process.triggers[0].detail, 0u);
  EXPECT_EQ(process.triggers[1].time, 900);
  EXPECT_STREQ(trigger_reason_name(process.triggers[1].reason), "exception");
  EXPECT_EQ(process.triggers[1].origin_rank, 3);
  EXPECT_EQ(model.name(process.triggers[1].detail), "RuntimeError: boom");
  EXPECT_EQ(process.end, 900);  // the last trigger is the process's last event
  EXPECT_EQ(process.events_per_kind[static_cast<size_t>(trace::RecordKind::kTrigger)], 2u);
  EXPECT_STREQ(trigger_reason_name(0), "unknown");
  EXPECT_STREQ(trigger_reason_name(99), "unknown");
  EXPECT_STREQ(trigger_reason_name(6), "collective_timeout");

  ProcessTrack shifted = process;
  shift_process_times(shifted, 1000);
  EXPECT_EQ(shifted.triggers[0].time, 1150);
  EXPECT_EQ(shifted.triggers[1].time, 1900);
}

// The `collective_open` kind (a collective a rank waits in): decoded into
// ProcessTrack::collectives_open, sorted by time, its op name a model string, counted in the time
// range and shifted with the clock; collectives_at_end keeps the one no op completed.
TEST(TraceLoader, ReadsOpenCollectivesAndWhichOneStillWaits) {
  std::string path = testing::test_directory("collective_open") + "/open.moetrace";
  trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(path, R"({"rank": 3, "host": "h"})"));
  trace::RecordBuffer records;
  records.define_string(1, "all_reduce");
  records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 100, 1);
  records.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, 200);
  auto open_at = [&](uint64_t time, uint32_t sequence) {
    auto& open =
        records.append<trace::CollectiveOpenRecord>(trace::RecordKind::kCollectiveOpen, time, 1);
    open.comm_id = 0x5a;
    open.bytes = 4096;
    open.kind = 1;
    open.sequence = sequence;
    open.rank = 1;
    open.num_ranks = 4;
  };
  open_at(700, 9);  // never completed: the rank waits in it
  open_at(300, 8);  // completed at 650 (its op below)
  auto& done = records.append<trace::CommOpRecord>(trace::RecordKind::kCommOp, 300, 1);
  done.start_time = 300;
  done.end_time = 650;
  done.comm_id = 0x5a;
  done.kind = 1;
  done.sequence = 8;
  done.rank = 1;
  done.num_ranks = 4;
  ASSERT_TRUE(writer.write_chunk(1, records.bytes()));
  writer.close();
  TraceModel model = load_traces({path});
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  ASSERT_EQ(process.collectives_open.size(), 2u);
  EXPECT_EQ(process.collectives_open[0].time, 300);
  EXPECT_EQ(process.collectives_open[1].time, 700);
  EXPECT_EQ(process.collectives_open[1].sequence, 9u);
  EXPECT_EQ(process.collectives_open[1].comm_id, 0x5au);
  EXPECT_EQ(process.collectives_open[1].bytes, 4096u);
  EXPECT_EQ(process.collectives_open[1].rank, 1);
  EXPECT_EQ(process.collectives_open[1].num_ranks, 4);
  EXPECT_EQ(model.name(process.collectives_open[1].name), "all_reduce");
  EXPECT_EQ(process.end, 700);
  EXPECT_EQ(process.events_per_kind[static_cast<size_t>(trace::RecordKind::kCollectiveOpen)], 2u);

  const std::vector<CollectiveState> states = collectives_at_end(process, 2'000'000'700);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_TRUE(states[0].has_completed);
  EXPECT_EQ(states[0].completed_sequence, 8u);
  EXPECT_TRUE(states[0].has_open);
  EXPECT_EQ(states[0].open_sequence, 9u);
  EXPECT_EQ(states[0].open_entered, 700);
  EXPECT_DOUBLE_EQ(states[0].open_for_s, 2.0);

  ProcessTrack shifted = process;
  shift_process_times(shifted, 1000);
  EXPECT_EQ(shifted.collectives_open[1].time, 1700);
}

}  // namespace
}  // namespace moescope::analysis

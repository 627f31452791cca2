// Values that decode fine but make no sense (issue 33): the saturating/checked time helpers,
// the Chrome export of times at the int64 limits, the Kineto importer's field checks, and the
// validation of decoded .moetrace records (times at the limits, a layer of 2^31, an all-to-all
// row of the wrong size, step numbers going backwards). Each bad record is skipped and counted;
// the rest of the file is still analysed.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/time_arithmetic.h"
#include "moescope/trace/trace_writer.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

bool any_error_has(const TraceModel& model, const std::string& text) {
  for (const auto& error : model.errors) {
    if (error.message.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string all_errors(const TraceModel& model) {
  std::string text;
  for (const auto& error : model.errors) text += error.to_string() + "\n";
  return text;
}

TEST(TimeArithmetic, SaturatesAndChecks) {
  EXPECT_EQ(trace::saturating_add(kMax, 1), kMax);
  EXPECT_EQ(trace::saturating_add(kMin, -1), kMin);
  EXPECT_EQ(trace::saturating_sub(kMin, 1), kMin);
  EXPECT_EQ(trace::saturating_sub(kMax, -1), kMax);
  EXPECT_EQ(trace::saturating_sub(0, kMin), kMax);
  EXPECT_EQ(trace::saturating_duration(kMin, kMax), kMax);
  EXPECT_EQ(trace::saturating_duration(10, 5), 0);
  EXPECT_EQ(trace::magnitude(kMin), uint64_t{1} << 63);
  EXPECT_FALSE(trace::checked_int64(1e300).has_value());
  EXPECT_FALSE(trace::checked_int64(std::numeric_limits<double>::quiet_NaN()).has_value());
  EXPECT_FALSE(trace::checked_int64(9223372036854775808.0).has_value());
  EXPECT_EQ(trace::checked_int64(-9223372036854775808.0), kMin);
  EXPECT_FALSE(trace::checked_micros_to_ns(1e300).has_value());
  EXPECT_FALSE(trace::checked_micros_to_ns(-std::numeric_limits<double>::infinity()));
  EXPECT_EQ(trace::checked_micros_to_ns(1.5), 1500);
  EXPECT_EQ(trace::checked_micros_to_ns(-2.0004), -2000);
}

// The exporter's JsonStream::micros negated INT64_MIN (undefined; in practice a write past its
// digit buffer). Times at both limits must export as valid JSON numbers.
TEST(HostileValues, ChromeExportOfTimesAtTheInt64Limits) {
  TraceModel model;
  ProcessTrack process;
  process.threads.emplace_back();
  Span low;
  low.start = kMin;
  low.end = kMax;
  process.threads.back().spans.push_back(low);
  process.threads.back().instants.push_back({kMin, 0, 0});
  process.threads.back().instants.push_back({kMax, 0, 0});
  model.processes.push_back(process);
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  ASSERT_NE(out, nullptr);
  ChromeExportResult result = export_chrome_trace(model, out);
  std::fclose(out);
  std::string json(text, size);
  std::free(text);
  ASSERT_TRUE(result.ok) << result.error;
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json;
  EXPECT_NE(json.find("-9223372036854775.808"), std::string::npos) << json;
  EXPECT_NE(json.find("9223372036854775.807"), std::string::npos) << json;
  EXPECT_NE(json.find("\"dur\": 9223372036854775.807"), std::string::npos) << json;
}

std::string write_kineto_events(const std::string& name, const nlohmann::json& events) {
  const std::string path = testing::test_directory("hostile_kineto") + "/" + name + ".json";
  std::ofstream(path)
      << nlohmann::json{{"traceEvents", events}, {"distributedInfo", {{"rank", "zero"}}}}.dump();
  return path;
}

TEST(HostileValues, KinetoFieldsOfEveryTypeAndRange) {
  nlohmann::json good = {{"ph", "X"}, {"cat", "cpu_op"}, {"name", "ok"}, {"pid", 1},
                         {"tid", 2},  {"ts", 10.0},      {"dur", 5.0}};
  nlohmann::json events = nlohmann::json::array({good});
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json event = good;
    event[key] = std::move(value);
    events.push_back(event);
  };
  with("ts", nullptr);                                // 1: no ts
  with("ts", "10");                                   // 2: a string
  with("dur", -5.0);                                  // 3: ends before it begins
  with("pid", 1e300);                                 // 4: not an int64
  with("tid", std::numeric_limits<uint64_t>::max());  // 5: past INT64_MAX
  with("args", nlohmann::json::array());              // 6: args not an object
  with("ph", 7);                                      // 7: phase not a string
  with("ts", 4611686018427387.904 * 1.01);            // 8: just past 2^62 ns
  events.push_back(42);                               // 9: not an object
  nlohmann::json kernel = good;
  kernel["cat"] = "kernel";
  kernel["args"] = {{"stream", -1}};  // 10: a negative stream
  events.push_back(kernel);
  kernel["args"] = {{"device", 4294967296LL}};  // 11: past uint32
  events.push_back(kernel);
  events.push_back(good);
  TraceModel model = load_traces({write_kineto_events("types", events)});
  ASSERT_EQ(model.processes.size(), 1u);
  size_t spans = 0;
  for (const auto& thread : model.processes[0].threads) spans += thread.spans.size();
  EXPECT_EQ(spans, 2u) << all_errors(model);
  for (int index = 1; index <= 11; ++index) {
    EXPECT_TRUE(any_error_has(model, "traceEvents[" + std::to_string(index) + "]"))
        << index << "\n"
        << all_errors(model);
  }
  EXPECT_FALSE(any_error_has(model, "traceEvents[0]"));
  EXPECT_TRUE(any_error_has(model, "11 event(s) skipped")) << all_errors(model);
  EXPECT_TRUE(any_error_has(model, "distributedInfo")) << all_errors(model);
}

// A .moetrace written by the project's writer with values that decode fine but make no sense.
std::string write_hostile_moetrace(const std::string& name) {
  using namespace moescope::trace;
  const std::string path = testing::test_directory("hostile_moetrace") + "/" + name + ".moetrace";
  TraceWriter writer;
  EXPECT_TRUE(writer.open(path, R"({"rank":0,"world_size":2})"));
  RecordBuffer buffer;
  buffer.define_string(1, "moe.layer");
  // Good spans and steps 1, 2, 3 (plus a step 0 marker after step 2: going backwards).
  int64_t t = 1000;
  for (int step = 1; step <= 3; ++step) {
    buffer.append<StepRecord>(RecordKind::kStep, uint64_t(t)).step = step;
    buffer.append<SpanBeginRecord>(RecordKind::kSpanBegin, uint64_t(t + 10), 1);
    buffer.append<SpanEndRecord>(RecordKind::kSpanEnd, uint64_t(t + 500));
    if (step == 2) buffer.append<StepRecord>(RecordKind::kStep, uint64_t(t + 600)).step = 0;
    t += 1000;
  }
  // A complete span from INT64_MIN to INT64_MAX (end - start overflows).
  auto& huge = buffer.append<SpanCompleteRecord>(RecordKind::kSpanComplete, uint64_t(kMin), 1);
  huge.end_time = uint64_t(kMax);
  // An expert load on layer 2^31 and a good one on layer 0.
  auto& bad_layer = buffer.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, 1500, 0, 8);
  bad_layer.layer = 1u << 31;
  bad_layer.step = 1;
  bad_layer.num_experts = 2;
  auto& good_layer = buffer.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, 1600, 0, 8);
  good_layer.step = 1;
  good_layer.num_experts = 2;
  // An all-to-all over 2 ranks with a split row of 3, and one over 2^31-1 ranks.
  auto& wrong_row = buffer.append_sized<CommOpRecord>(RecordKind::kCommOp, 2000, 0, 24);
  wrong_row.end_time = 2100;
  wrong_row.kind = 6;  // all-to-all
  wrong_row.num_ranks = 2;
  wrong_row.rank = 0;
  wrong_row.num_splits = 3;
  auto& many_ranks = buffer.append_sized<CommOpRecord>(RecordKind::kCommOp, 2200, 0, 16);
  many_ranks.end_time = 2300;
  many_ranks.kind = 6;
  many_ranks.num_ranks = std::numeric_limits<int32_t>::max();
  many_ranks.rank = 0;
  many_ranks.num_splits = 2;
  writer.write_chunk(1, buffer.bytes());
  RecordBuffer end;
  end.append<StatsRecord>(RecordKind::kStats, uint64_t(t));
  writer.write_chunk(0, end.bytes(), ChunkType::kEnd);
  writer.close();
  return path;
}

TEST(HostileValues, NonsenseRecordsAreSkippedAndCounted) {
  TraceModel model = load_traces({write_hostile_moetrace("nonsense")});
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  EXPECT_TRUE(any_error_has(model, "1 span(s) with a time outside")) << all_errors(model);
  EXPECT_TRUE(any_error_has(model, "1 expert load sample(s) with a layer id above"))
      << all_errors(model);
  EXPECT_TRUE(any_error_has(model, "split row does not have one entry per rank"))
      << all_errors(model);
  EXPECT_TRUE(any_error_has(model, "step number lower than the step before")) << all_errors(model);
  // The rest is analysed: the 3 good spans, the good load, steps 1..3 in order.
  size_t spans = 0;
  for (const auto& thread : process.threads) spans += thread.spans.size();
  EXPECT_EQ(spans, 3u);
  EXPECT_EQ(model.expert_loads.size(), 1u);
  ASSERT_GE(process.steps.size(), 2u);
  for (size_t i = 1; i < process.steps.size(); ++i) {
    EXPECT_GT(process.steps[i].step, process.steps[i - 1].step);
  }
  EXPECT_GE(process.begin, -trace::kMaxPlausibleTimeNs);
  EXPECT_LE(process.end, trace::kMaxPlausibleTimeNs);
  // The traffic matrix stays small and every analysis and the export run.
  for (const auto& matrix : analyze_communication(model).all_to_all)
    EXPECT_LE(matrix.num_ranks, 1024);
  Report report = build_report(model);
  EXPECT_FALSE(render_report(model, report, ReportFormat::kJson).empty());
  const std::string exported = testing::test_directory("hostile_moetrace") + "/export.json";
  ChromeExportResult result = export_chrome_trace(model, exported);
  EXPECT_TRUE(result.ok) << result.error;
}

// Two ranks, each with two top-level "iteration N" spans (no step records) that together cover
// the whole plausible range, and one all-to-all per rank as long: every time is accepted, but
// the sums over ranks (step coverage, time per collective kind) pass INT64_MAX. The fuzzer's
// find (UBSan: signed overflow in step detection); the sums saturate instead.
std::string write_rank_of_huge_iterations(const std::string& directory, int rank) {
  using namespace moescope::trace;
  const std::string path = directory + "/huge_iterations_" + std::to_string(rank) + ".moetrace";
  TraceWriter writer;
  EXPECT_TRUE(writer.open(path, "{\"rank\":" + std::to_string(rank) + ",\"world_size\":2}"));
  const int64_t limit = trace::kMaxPlausibleTimeNs - 1;
  RecordBuffer buffer;
  buffer.define_string(1, "iteration 1");
  buffer.define_string(2, "iteration 2");
  buffer.append<SpanCompleteRecord>(RecordKind::kSpanComplete, uint64_t(-limit), 1).end_time = 0;
  buffer.append<SpanCompleteRecord>(RecordKind::kSpanComplete, 0, 2).end_time = uint64_t(limit);
  auto& op = buffer.append_sized<CommOpRecord>(RecordKind::kCommOp, uint64_t(-limit), 0, 16);
  op.end_time = uint64_t(limit);
  op.kind = 6;  // all-to-all
  op.num_ranks = 2;
  op.rank = rank;
  op.num_splits = 2;
  writer.write_chunk(1, buffer.bytes());
  writer.close();
  return path;
}

TEST(HostileValues, SumsOfTimesOverRanksSaturate) {
  const std::string directory = testing::test_directory("huge_iterations");
  TraceModel model = load_traces(
      {write_rank_of_huge_iterations(directory, 0), write_rank_of_huge_iterations(directory, 1)});
  ASSERT_EQ(model.processes.size(), 2u) << all_errors(model);
  for (const auto& process : model.processes) {
    ASSERT_EQ(process.steps.size(), 2u) << all_errors(model);
    EXPECT_EQ(process.steps[0].step, 1);
    EXPECT_EQ(process.steps[1].step, 2);
  }
  Report report = build_report(model);
  EXPECT_FALSE(render_report(model, report, ReportFormat::kJson).empty());
  EXPECT_FALSE(render_report(model, report, ReportFormat::kText).empty());
}

}  // namespace
}  // namespace moescope::analysis

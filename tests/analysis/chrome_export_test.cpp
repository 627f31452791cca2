// Chrome export parsed back: every source event present, nesting valid per track, flows
// matched, nasty strings intact, one file per rank for HTA.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "moe_job_writer.h"
#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return nlohmann::json::parse(text.str());
}

// ts/dur in microseconds with 3 decimals back to integer nanoseconds.
int64_t to_ns(const nlohmann::json& value) {
  return static_cast<int64_t>(std::llround(value.get<double>() * 1000.0));
}

TEST(ChromeExport, EveryEventSurvivesWithValidNesting) {
  testing::SyntheticOptions options;
  options.num_ranks = 3;
  options.nasty_names = true;
  options.sync_per_step = true;
  std::string directory = testing::test_directory("export");
  TraceModel model = load_traces(testing::write_synthetic_run(directory, "run", options));
  ASSERT_EQ(model.processes.size(), 3u);
  std::string path = directory + "/out.json";
  ChromeExportResult result = export_chrome_trace(model, path);
  ASSERT_TRUE(result.ok) << result.error;
  nlohmann::json json = read_json(path);
  EXPECT_EQ(json["distributedInfo"]["rank"], 0);
  EXPECT_EQ(json["distributedInfo"]["world_size"], 3);
  const auto& events = json["traceEvents"];
  EXPECT_EQ(events.size(), result.events + 1);

  // Expected counts from the model.
  size_t spans = 0, calls = 0, kernels = 0, copies = 0, syncs = 0, comm_ops = 0, flows = 0;
  for (const auto& process : model.processes) {
    for (const auto& thread : process.threads)
      spans += thread.spans.size(), calls += thread.api_calls.size();
    for (const auto& stream : process.gpu_streams) {
      for (const auto& op : stream.ops) {
        kernels += op.kind == GpuOpKind::kKernel;
        copies += op.kind == GpuOpKind::kMemcpy;
        syncs += op.kind == GpuOpKind::kSync;
        flows += op.launch_thread != kNoIndex;
      }
    }
    for (const auto& comm : process.communicators) comm_ops += comm.ops.size();
  }
  std::map<std::string, size_t> by_category;
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> tracks;
  std::map<uint64_t, int> flow_ends;
  std::set<std::pair<int64_t, int64_t>> named_threads;
  size_t nasty = 0;
  for (const auto& event : events) {
    const std::string phase = event["ph"];
    if (phase == "X") {
      by_category[event["cat"]]++;
      tracks[{event["pid"].get<int64_t>(), event["tid"].get<int64_t>()}].push_back(
          {to_ns(event["ts"]), to_ns(event["ts"]) + to_ns(event["dur"])});
      if (event["name"] == testing::nasty_span_name()) ++nasty;
    } else if (phase == "s" || phase == "f") {
      flow_ends[event["id"].get<uint64_t>()] += phase == "s" ? 1 : 10;
      if (phase == "f") {
        EXPECT_EQ(event["bp"], "e");
      }
    } else if (phase == "M" && event["name"] == "thread_name") {
      named_threads.insert({event["pid"].get<int64_t>(), event["tid"].get<int64_t>()});
    }
  }
  EXPECT_EQ(by_category["user_annotation"], spans);
  EXPECT_EQ(by_category["cuda_runtime"], calls);
  EXPECT_EQ(by_category["kernel"], kernels);
  EXPECT_EQ(by_category["gpu_memcpy"], copies);
  EXPECT_EQ(by_category["cuda_sync"], syncs);
  EXPECT_EQ(by_category["communication"], comm_ops);
  EXPECT_EQ(nasty, 3u * 6);  // one per rank and step, name intact
  EXPECT_EQ(flow_ends.size(), flows);
  for (const auto& [id, ends] : flow_ends) EXPECT_EQ(ends, 11) << id;
  // Nesting per track: each X event is inside the enclosing one or after it.
  for (auto& [track, intervals] : tracks) {
    EXPECT_TRUE(named_threads.count(track)) << track.first << "/" << track.second;
    std::sort(intervals.begin(), intervals.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open_ends;
    for (const auto& [start, end] : intervals) {
      while (!open_ends.empty() && open_ends.back() <= start) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(end, open_ends.back())
            << "overlap on track " << track.first << "/" << track.second;
      }
      open_ends.push_back(end);
    }
  }
  // Times keep their nanoseconds.
  const Span& first_span = model.processes[0].threads[0].spans[0];
  bool found = false;
  for (const auto& event : events) {
    if (event["ph"] == "X" && event["pid"] == 0 && to_ns(event["ts"]) == first_span.start &&
        event["name"] == model.name(first_span.name)) {
      found = true;
      EXPECT_EQ(to_ns(event["dur"]), first_span.duration());
    }
  }
  EXPECT_TRUE(found);
}

// Counters: memory in use per category after every allocation/free, tokens per expert for
// every expert-load sample, and the recorder's own counters, each on its rank's process.
// A job that hung in its last all-reduce: each rank waiting in it gets a process-wide instant
// where it started to wait (its collective_open record); the rank that never entered, none.
TEST(ChromeExport, WhereEachRankStartedToWaitInACollective) {
  testing::MoeJobConfig config;
  config.ranks = 4;
  config.steps = 6;
  config.experts = 8;
  config.slow_host = -1;
  config.hang_missing_rank = 2;
  const std::string directory = testing::test_directory("export_hang");
  TraceModel model = load_traces(testing::write_moe_job(config, directory + "/job"));
  ASSERT_EQ(model.processes.size(), 4u);
  const std::string path = directory + "/out.json";
  ASSERT_TRUE(export_chrome_trace(model, path).ok);
  const nlohmann::json json = read_json(path);
  std::set<int> ranks;
  for (const auto& event : json["traceEvents"]) {
    if (event.value("cat", "") != "collective_open") continue;
    EXPECT_EQ(event["name"], "waiting in all_reduce #5");
    EXPECT_EQ(event["ph"], "i");
    EXPECT_EQ(event["s"], "p");
    EXPECT_EQ(event["args"]["communicator"], "1");
    EXPECT_EQ(event["args"]["sequence"], 5);
    const ProcessTrack& process = model.processes[event["pid"].get<size_t>()];
    ASSERT_EQ(process.collectives_open.size(), 1u);
    EXPECT_EQ(to_ns(event["ts"]), process.collectives_open[0].time);
    ranks.insert(event["pid"].get<int>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 3}));
}

TEST(ChromeExport, CountersForMemoryAndExpertLoad) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  std::string directory = testing::test_directory("export_counters");
  TraceModel model = load_traces(testing::write_synthetic_run(directory, "run", options));
  std::string path = directory + "/out.json";
  ASSERT_TRUE(export_chrome_trace(model, path).ok);
  nlohmann::json json = read_json(path);
  std::map<int64_t, std::vector<nlohmann::json>> memory, tokens;
  std::map<int64_t, size_t> other_counters;
  for (const auto& event : json["traceEvents"]) {
    if (event["ph"] != "C") continue;
    const std::string name = event["name"];
    const int64_t pid = event["pid"];
    if (name == "memory in use (MiB)") {
      memory[pid].push_back(event);
    } else if (name.rfind("expert tokens layer ", 0) == 0) {
      tokens[pid].push_back(event);
    } else {
      ++other_counters[pid];
    }
  }
  for (const ProcessTrack& process : model.processes) {
    const int64_t pid = process.rank;
    const MemoryUsage& usage = process.memory_usage;
    ASSERT_EQ(memory[pid].size(), usage.times.size());
    for (size_t i = 0; i < usage.times.size(); ++i) {
      const auto& event = memory[pid][i];
      EXPECT_EQ(to_ns(event["ts"]), usage.times[i]);
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        EXPECT_DOUBLE_EQ(event["args"][memory_category_name(c)].get<double>(),
                         double(usage.by_category[c][i]) / (1 << 20));
      }
    }
    size_t counter_samples = 0;
    for (const CounterTrack& counter : process.counters) counter_samples += counter.times.size();
    EXPECT_EQ(other_counters[pid], counter_samples);
    size_t samples = 0;
    for (const ExpertLoadSample& sample : model.expert_loads) {
      if (model.processes[sample.process].rank != process.rank) continue;
      ASSERT_LT(samples, tokens[pid].size());
      const auto& event = tokens[pid][samples++];
      EXPECT_EQ(event["name"], "expert tokens layer " + std::to_string(sample.layer) + " (local)");
      EXPECT_EQ(to_ns(event["ts"]), sample.time);
      auto counts = model.tokens(sample);
      ASSERT_EQ(event["args"].size(), counts.size());
      for (size_t e = 0; e < counts.size(); ++e) {
        EXPECT_EQ(event["args"]["e" + std::to_string(e)].get<uint64_t>(), counts[e]);
      }
    }
    EXPECT_EQ(samples, tokens[pid].size());
    EXPECT_GT(samples, 0u);
  }
}

TEST(ChromeExport, EscapesEveryStringAndReplacesInvalidUtf8) {
  std::string out;
  std::string text = testing::nasty_span_name() + "\xff\xc3(" + std::string(1, '\0') + "end";
  append_json_string(out, text);
  nlohmann::json parsed = nlohmann::json::parse(out);
  std::string back = parsed.get<std::string>();
  EXPECT_EQ(back.substr(0, testing::nasty_span_name().size()), testing::nasty_span_name());
  EXPECT_EQ(back.substr(testing::nasty_span_name().size()),
            "\xef\xbf\xbd\xef\xbf\xbd(" + std::string(1, '\0') + "end");
}

TEST(ChromeExport, OneRankPerFile) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  std::string directory = testing::test_directory("export_split");
  TraceModel model = load_traces(testing::write_synthetic_run(directory, "run", options));
  ChromeExportOptions export_options;
  export_options.only_rank = 1;
  std::string path = directory + "/rank1.json";
  ASSERT_TRUE(export_chrome_trace(model, path, export_options).ok);
  nlohmann::json json = read_json(path);
  EXPECT_EQ(json["distributedInfo"]["rank"], 1);
  for (const auto& event : json["traceEvents"]) {
    if (event["ph"] != "M" || event["name"] != "moescope_export") {
      EXPECT_EQ(event["pid"], 1);
    }
  }
}

TEST(ChromeExport, UnwritablePathIsAClearError) {
  TraceModel model;
  ChromeExportResult result = export_chrome_trace(model, "/nonexistent-dir/x.json");
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace moescope::analysis

// The viewer and `moescope report` show the same numbers. On a real two-rank moe_train trace
// (tests/data/moe_train_2ranks), every number the viewer's panels show is compared with the
// report's JSON: expert load per layer and per rank (heatmap and imbalance plot, also under a
// step filter), the all-to-all matrix with the per-rank bandwidth table, memory at the peak,
// and the findings with their severities. First through the view-model calls the panels make,
// then through what the real window drew (`moescope-view --screenshot` writes it next to the
// PNG).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/panel_data.h"
#include "moescope/viewer/run_summary.h"

namespace moescope::viewer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  EXPECT_NE(value, nullptr) << name << " is set by CTest";
  return value ? value : "";
}

std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  return output;
}

// Waits for a background job of the viewer.
template <typename Job>
void wait_for(const Job& job) {
  while (!job.done()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

class ViewerReportAgreement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    build_dir_ = environment("MOESCOPE_BUILD_DIR");
    const std::string data = environment("MOESCOPE_SOURCE_DIR") + "/tests/data/moe_train_2ranks";
    files_ = {data + "/run.0.moetrace", data + "/run.1.moetrace"};
    std::string command = build_dir_ + "/bin/moescope report --format json -q";
    for (const std::string& file : files_) command += " " + file;
    report_ = json::parse(run_command(command));
    // Loaded as the viewer loads it, with its findings computed by its tables job.
    TraceLoadingJob loading(files_, 0);
    wait_for(loading);
    trace_ = loading.take_result().release();
    TraceTablesJob tables(*trace_);
    wait_for(tables);
    tables.move_into(*trace_);
  }
  static void TearDownTestSuite() {
    delete trace_;
    trace_ = nullptr;
  }

  static const json& report_layer(uint32_t layer) {
    for (const json& entry : report_["expert_load"]) {
      if (entry["layer"].get<uint32_t>() == layer) return entry;
    }
    ADD_FAILURE() << "layer " << layer << " is not in the report";
    return report_["expert_load"][0];
  }

  // The heatmap row of `layer` next to the report's tokens of that layer.
  static void expect_row(const analysis::ExpertLoadMatrix& heatmap, uint32_t layer,
                         const json& tokens, const std::string& what) {
    const int row = heatmap.row_of(layer);
    ASSERT_GE(row, 0) << what;
    ASSERT_EQ(tokens.size(), static_cast<size_t>(heatmap.num_experts)) << what;
    for (int e = 0; e < heatmap.num_experts; ++e) {
      EXPECT_DOUBLE_EQ(heatmap.at(row, e), tokens[static_cast<size_t>(e)].get<double>())
          << what << " expert " << e;
    }
  }

  // The imbalance plot's line of `layer` next to the report's max/mean per step.
  static void expect_imbalance(const ImbalanceSeries& series, uint32_t layer, const json& steps,
                               const json& values, const std::string& what) {
    auto found = std::find(series.layer_ids.begin(), series.layer_ids.end(), layer);
    ASSERT_NE(found, series.layer_ids.end()) << what;
    const auto& line = series.per_layer[static_cast<size_t>(found - series.layer_ids.begin())];
    ASSERT_EQ(steps.size(), values.size());
    ASSERT_GT(steps.size(), 0u) << what;
    for (size_t i = 0; i < steps.size(); ++i) {
      auto column = std::find(series.steps.begin(), series.steps.end(), steps[i].get<int64_t>());
      ASSERT_NE(column, series.steps.end()) << what;
      EXPECT_DOUBLE_EQ(line[static_cast<size_t>(column - series.steps.begin())],
                       values[i].get<double>())
          << what << " step " << steps[i];
    }
  }

  // Renders `panel` with the real window and returns the numbers it drew.
  static json shown_on(const std::string& panel) {
    const std::string directory =
        build_dir_ + "/tests/viewer_report_agreement_" + std::to_string(getpid());
    fs::create_directories(directory);
    const std::string png = directory + "/" + panel + ".png";
    std::string command =
        "xvfb-run -a -s '-screen 0 1280x1024x24' " + build_dir_ + "/bin/moescope-view";
    for (const std::string& file : files_) command += " " + file;
    command += " --screenshot " + png + " --panel " + panel + " --size 1280x800 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(png + ".layout.json");
    json layout = json::parse(in, nullptr, false);
    fs::remove_all(directory);
    EXPECT_TRUE(layout.is_object()) << "no layout from " << command;
    return layout.is_object() ? layout["shown"] : json::object();
  }

  static inline std::string build_dir_;
  static inline std::vector<std::string> files_;
  static inline json report_;
  static inline LoadedTrace* trace_ = nullptr;
};

// The trace is what the comparisons need: two ranks with expert loads, all-to-alls, memory
// and findings (otherwise the tests below could pass on nothing).
TEST_F(ViewerReportAgreement, TheTraceHoldsEveryKindOfNumber) {
  ASSERT_NE(trace_, nullptr);
  EXPECT_TRUE(trace_->model.errors.empty());
  EXPECT_EQ(trace_->model.processes.size(), 2u);
  ASSERT_EQ(report_["expert_load"].size(), 2u);
  EXPECT_EQ(report_["expert_load"][0]["by_rank"].size(), 2u);
  ASSERT_EQ(report_["communication"]["all_to_all"].size(), 1u);
  EXPECT_GT(report_["communication"]["all_to_all"][0]["ops"].get<int>(), 0);
  EXPECT_GT(report_["memory"][0]["peak_bytes"].get<int64_t>(), 0);
  EXPECT_GE(report_["findings"].size(), 2u);
}

TEST_F(ViewerReportAgreement, ExpertHeatmapAndImbalanceOfEveryRankAndOfEachRank) {
  const analysis::ExpertLoadMatrix all = analysis::expert_load_matrix(trace_->model, {});
  ASSERT_EQ(all.layer_ids.size(), report_["expert_load"].size());
  const ImbalanceSeries all_series = imbalance_series(analysis::analyze_expert_load(trace_->model));
  for (uint32_t layer : all.layer_ids) {
    const json& entry = report_layer(layer);
    expect_row(all, layer, entry["tokens"], "all ranks, layer " + std::to_string(layer));
    expect_imbalance(all_series, layer, entry["step_ids"], entry["max_over_mean_by_step"],
                     "all ranks, layer " + std::to_string(layer));
    for (const json& rank_entry : entry["by_rank"]) {
      const int32_t rank = rank_entry["rank"].get<int32_t>();
      const std::string what = "rank " + std::to_string(rank) + ", layer " + std::to_string(layer);
      // The panels' rank filter.
      const analysis::StepRankFilter one_rank{-1, -1, rank};
      expect_row(analysis::expert_load_matrix(trace_->model, one_rank), layer, rank_entry["tokens"],
                 what);
      expect_imbalance(imbalance_series(analysis::analyze_expert_load(trace_->model, one_rank)),
                       layer, rank_entry["step_ids"], rank_entry["max_over_mean_by_step"], what);
    }
  }
}

// The panels' step filter: the heatmap of one step gives that step's max/mean of the report.
TEST_F(ViewerReportAgreement, HeatmapOfOneStepGivesThatStepsImbalance) {
  for (const json& entry : report_["expert_load"]) {
    const uint32_t layer = entry["layer"].get<uint32_t>();
    const json& steps = entry["step_ids"];
    for (size_t i = 0; i < steps.size(); ++i) {
      const int64_t step = steps[i].get<int64_t>();
      const analysis::ExpertLoadMatrix one =
          analysis::expert_load_matrix(trace_->model, {step, step, -1});
      const int row = one.row_of(layer);
      ASSERT_GE(row, 0);
      double max = 0;
      for (int e = 0; e < one.num_experts; ++e) max = std::max(max, one.at(row, e));
      const double mean = one.layer_total(row) / one.num_experts;
      EXPECT_DOUBLE_EQ(mean > 0 ? max / mean : 0.0, entry["max_over_mean_by_step"][i].get<double>())
          << "layer " << layer << " step " << step;
    }
  }
}

TEST_F(ViewerReportAgreement, AllToAllMatrixAndBandwidthTable) {
  const analysis::CommAnalysis comm = analysis::analyze_communication(trace_->model, {});
  const json& matrices = report_["communication"]["all_to_all"];
  ASSERT_EQ(comm.all_to_all.size(), matrices.size());
  for (size_t m = 0; m < matrices.size(); ++m) {
    const analysis::AllToAllMatrix& matrix = comm.all_to_all[m];
    const json& expected = matrices[m];
    ASSERT_EQ(matrix.num_ranks, expected["num_ranks"].get<int32_t>());
    EXPECT_EQ(matrix.num_ops, expected["ops"].get<uint32_t>());
    for (int32_t src = 0; src < matrix.num_ranks; ++src) {
      for (int32_t dst = 0; dst < matrix.num_ranks; ++dst) {
        EXPECT_EQ(matrix.at(src, dst), expected["bytes"][src][dst].get<uint64_t>());
      }
      const size_t row = static_cast<size_t>(src);
      EXPECT_EQ(matrix.ops_by_rank[row], expected["ops_by_rank"][row].get<uint32_t>());
      EXPECT_EQ(matrix.sent_bytes[row], expected["sent_bytes"][row].get<uint64_t>());
      EXPECT_DOUBLE_EQ(matrix.busy_ns[row] * 1e-6, expected["busy_ms"][row].get<double>());
      EXPECT_DOUBLE_EQ(matrix.bandwidth_gbps(src), expected["bandwidth_gbps"][row].get<double>());
    }
  }
}

TEST_F(ViewerReportAgreement, MemoryAtThePeak) {
  const json& ranks = report_["memory"];
  ASSERT_EQ(ranks.size(), trace_->model.processes.size());
  for (size_t p = 0; p < trace_->model.processes.size(); ++p) {
    // What the memory panel computes for that rank.
    const analysis::RankMemory peak = analysis::analyze_rank_memory(trace_->model.processes[p], 12);
    const json& expected = ranks[p];
    EXPECT_EQ(peak.rank, expected["rank"].get<int32_t>());
    EXPECT_EQ(peak.peak_bytes, expected["peak_bytes"].get<int64_t>());
    EXPECT_EQ(peak.peak_time, expected["peak_time_ns"].get<int64_t>());
    EXPECT_EQ(peak.live_at_peak, expected["live_at_peak"].get<size_t>());
    for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
      EXPECT_EQ(peak.peak_by_category[c],
                expected["peak_by_category"][analysis::memory_category_name(c)].get<int64_t>());
    }
  }
}

TEST_F(ViewerReportAgreement, FindingsAndTheirSeverities) {
  const json& expected = report_["findings"];
  ASSERT_EQ(trace_->findings.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const analysis::Finding& finding = trace_->findings[i];
    EXPECT_EQ(finding.kind, expected[i]["kind"].get<std::string>());
    EXPECT_EQ(analysis::severity_name(finding.severity),
              expected[i]["severity"].get<std::string>());
    EXPECT_DOUBLE_EQ(finding.est_ms_per_step, expected[i]["est_ms_per_step"].get<double>());
    EXPECT_DOUBLE_EQ(finding.step_share, expected[i]["step_share"].get<double>());
    EXPECT_EQ(finding.evidence, expected[i]["evidence"].get<std::string>());
    EXPECT_EQ(finding.where.layer, expected[i]["where"]["layer"].get<int32_t>());
  }
}

// The first screen's summary, recomputed from the report's JSON: the mean of the ranks'
// mean_per_step breakdowns, the chain from the first finding along "explains" (breadth first),
// and the cell with the most tokens of expert_load[].tokens with its share of the layer.
struct ExpectedSummary {
  std::vector<double> breakdown;  // step, compute, exposed comm, memcpy, idle ms
  std::vector<int32_t> chain_ids;
  std::vector<double> chain_ms;
  std::vector<double> hottest;  // layer, expert, share
};
ExpectedSummary expected_summary(const json& report) {
  ExpectedSummary expected;
  const char* parts[] = {"step_ms", "compute_ms", "exposed_communication_ms", "memcpy_ms",
                         "idle_ms"};
  expected.breakdown.assign(std::size(parts), 0.0);
  const json& ranks = report["breakdown"];
  for (const json& rank : ranks) {
    for (size_t i = 0; i < std::size(parts); ++i) {
      expected.breakdown[i] += rank["mean_per_step"][parts[i]].get<double>() / double(ranks.size());
    }
  }
  const json& findings = report["findings"];
  std::vector<int32_t> queue = {findings.empty() ? 0 : findings[0]["id"].get<int32_t>()};
  for (size_t next = 0; next < queue.size() && !findings.empty(); ++next) {
    const json& finding = findings[size_t(queue[next] - 1)];
    if (std::find(expected.chain_ids.begin(), expected.chain_ids.end(), queue[next]) !=
        expected.chain_ids.end()) {
      continue;
    }
    expected.chain_ids.push_back(queue[next]);
    expected.chain_ms.push_back(finding["est_ms_per_step"].get<double>());
    for (const json& id : finding["explains"]) queue.push_back(id.get<int32_t>());
  }
  double most = -1;
  for (const json& layer : report["expert_load"]) {
    double total = 0;
    for (const json& tokens : layer["tokens"]) total += tokens.get<double>();
    for (size_t e = 0; e < layer["tokens"].size(); ++e) {
      const double tokens = layer["tokens"][e].get<double>();
      if (tokens <= most) continue;
      most = tokens;
      expected.hottest = {layer["layer"].get<double>(), double(e), tokens / total};
    }
  }
  return expected;
}

TEST_F(ViewerReportAgreement, SummaryIsTheReportsBreakdownChainAndHottestCell) {
  const ExpectedSummary expected = expected_summary(report_);
  const RunSummary& summary = trace_->summary;
  ASSERT_EQ(summary.ranks.size(), report_["breakdown"].size());
  for (size_t r = 0; r < summary.ranks.size(); ++r) {
    const json& mean = report_["breakdown"][r]["mean_per_step"];
    EXPECT_EQ(summary.ranks[r].rank, report_["breakdown"][r]["rank"].get<int32_t>());
    EXPECT_DOUBLE_EQ(summary.ranks[r].compute_ms, mean["compute_ms"].get<double>());
    EXPECT_DOUBLE_EQ(summary.ranks[r].exposed_communication_ms,
                     mean["exposed_communication_ms"].get<double>());
    EXPECT_DOUBLE_EQ(summary.ranks[r].idle_ms, mean["idle_ms"].get<double>());
  }
  const double shown[] = {summary.mean.step_ms, summary.mean.compute_ms,
                          summary.mean.exposed_communication_ms, summary.mean.memcpy_ms,
                          summary.mean.idle_ms};
  ASSERT_GT(expected.breakdown[0], 0.0);
  EXPECT_GT(expected.breakdown[1], 0.0) << "the trace computes";
  for (size_t i = 0; i < expected.breakdown.size(); ++i) {
    EXPECT_NEAR(shown[i], expected.breakdown[i], 1e-9 * expected.breakdown[0]) << "part " << i;
  }
  ASSERT_FALSE(expected.chain_ids.empty());
  ASSERT_EQ(summary.chain.size(), expected.chain_ids.size());
  for (size_t i = 0; i < summary.chain.size(); ++i) {
    EXPECT_EQ(summary.chain[i].id, expected.chain_ids[i]);
    EXPECT_DOUBLE_EQ(summary.chain[i].est_ms_per_step, expected.chain_ms[i]);
    EXPECT_EQ(summary.chain[i].finding, expected.chain_ids[i] - 1);
  }
  EXPECT_EQ(summary.other_findings, report_["findings"].size() - expected.chain_ids.size());
  ASSERT_TRUE(summary.hottest.present);
  EXPECT_EQ(double(summary.hottest.layer), expected.hottest[0]);
  EXPECT_EQ(double(summary.hottest.expert), expected.hottest[1]);
  EXPECT_NEAR(summary.hottest.share, expected.hottest[2], 1e-12);
}

// What the real window drew, panel by panel, against the report.
TEST_F(ViewerReportAgreement, WhatTheWindowDrawsIsTheReport) {
  const json experts = shown_on("experts");
  const json& layers = report_["expert_load"];
  ASSERT_EQ(experts["heatmap_layers"].size(), layers.size());
  for (size_t row = 0; row < layers.size(); ++row) {
    EXPECT_EQ(experts["heatmap_layers"][row], layers[row]["layer"]);
    EXPECT_EQ(experts["heatmap_tokens"][row], layers[row]["tokens"]) << "layer row " << row;
    // The imbalance plot: each of the layer's steps at its column.
    const json& steps = layers[row]["step_ids"];
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& axis = experts["imbalance_steps"];
      const auto column = std::find(axis.begin(), axis.end(), steps[i]);
      ASSERT_NE(column, axis.end());
      EXPECT_DOUBLE_EQ(experts["imbalance_values"][row][static_cast<size_t>(column - axis.begin())]
                           .get<double>(),
                       layers[row]["max_over_mean_by_step"][i].get<double>());
    }
  }

  const json comm = shown_on("comm");
  const json& matrix = report_["communication"]["all_to_all"][0];
  EXPECT_EQ(comm["comm_bytes"], matrix["bytes"]);
  EXPECT_EQ(comm["comm_ops_by_rank"], matrix["ops_by_rank"]);
  EXPECT_EQ(comm["comm_sent_bytes"], matrix["sent_bytes"]);
  for (size_t rank = 0; rank < matrix["busy_ms"].size(); ++rank) {
    EXPECT_DOUBLE_EQ(comm["comm_busy_ns"][rank].get<double>() * 1e-6,
                     matrix["busy_ms"][rank].get<double>());
  }

  const json memory = shown_on("memory");
  const json& rank0 = report_["memory"][0];
  EXPECT_EQ(memory["memory_rank"], rank0["rank"]);
  EXPECT_EQ(memory["memory_peak_bytes"], rank0["peak_bytes"]);
  EXPECT_EQ(memory["memory_live_at_peak"], rank0["live_at_peak"]);
  for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
    EXPECT_EQ(memory["memory_peak_by_category"][c],
              rank0["peak_by_category"][analysis::memory_category_name(c)]);
  }

  // The first screen (the timeline tab) draws the summary with the report's numbers.
  const json summary = shown_on("timeline")["summary"];
  const ExpectedSummary expected = expected_summary(report_);
  EXPECT_TRUE(summary["drawn"].get<bool>());
  ASSERT_EQ(summary["breakdown"].size(), expected.breakdown.size());
  for (size_t i = 0; i < expected.breakdown.size(); ++i) {
    EXPECT_NEAR(summary["breakdown"][i].get<double>(), expected.breakdown[i],
                1e-9 * expected.breakdown[0]);
  }
  EXPECT_EQ(summary["chain_ids"].get<std::vector<int32_t>>(), expected.chain_ids);
  EXPECT_EQ(summary["chain_ms"].get<std::vector<double>>(), expected.chain_ms);
  ASSERT_EQ(summary["hottest"].size(), 3u);
  EXPECT_EQ(summary["hottest"][0].get<double>(), expected.hottest[0]);
  EXPECT_EQ(summary["hottest"][1].get<double>(), expected.hottest[1]);
  EXPECT_NEAR(summary["hottest"][2].get<double>(), expected.hottest[2], 1e-12);

  const json report_panel = shown_on("report");
  const json& findings = report_["findings"];
  ASSERT_EQ(report_panel["findings"].size(), findings.size());
  for (size_t i = 0; i < findings.size(); ++i) {
    const json& row = report_panel["findings"][i];
    EXPECT_EQ(row["kind"], findings[i]["kind"]);
    EXPECT_EQ(row["severity"], findings[i]["severity"]) << findings[i]["kind"];
    EXPECT_DOUBLE_EQ(row["est_ms_per_step"].get<double>(),
                     findings[i]["est_ms_per_step"].get<double>());
    EXPECT_EQ(row["evidence"], findings[i]["evidence"]);
  }
}

}  // namespace
}  // namespace moescope::viewer

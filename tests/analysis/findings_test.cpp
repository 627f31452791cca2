// The report finds each planted problem with the right kind, place and numbers, and nothing on
// a clean trace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::SyntheticOptions;

struct Analysed {
  TraceModel model;
  Report report;
};

Analysed analyse(const std::string& name, const SyntheticOptions& options) {
  Analysed result;
  result.model =
      load_traces(testing::write_synthetic_run(testing::test_directory(name), "run", options));
  EXPECT_TRUE(result.model.errors.empty());
  result.report = build_report(result.model);
  return result;
}

std::vector<const Finding*> of_kind(const Report& report, const std::string& kind) {
  std::vector<const Finding*> found;
  for (const Finding& finding : report.findings) {
    if (finding.kind == kind) found.push_back(&finding);
  }
  return found;
}

std::string kinds(const Report& report) {
  std::string text;
  for (const Finding& finding : report.findings)
    text += finding.kind + ": " + finding.evidence + "\n";
  return text;
}

double metric(const Finding& finding, const std::string& name) {
  for (const auto& [key, value] : finding.metrics) {
    if (key == name) return value;
  }
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

TEST(Findings, CleanTraceHasNone) {
  Analysed clean = analyse("clean", {});
  EXPECT_TRUE(clean.report.findings.empty()) << kinds(clean.report);
  // The breakdown still adds up: compute + exposed comm + memcpy + idle = step.
  for (const auto& rank : clean.report.breakdown.ranks) {
    ASSERT_EQ(rank.steps.size(), 6u);
    for (const auto& step : rank.steps) {
      EXPECT_NEAR(step.compute_ms + step.exposed_communication_ms + step.memcpy_ms + step.idle_ms,
                  step.step_ms, 1e-6);
      EXPECT_NEAR(step.exposed_communication_ms, 0.0, 1e-6);
      EXPECT_NEAR(step.communication_ms, 4 * 0.4, 1e-6);  // 2 layers x dispatch + combine
    }
  }
  ASSERT_EQ(clean.report.expert_load.layers.size(), 2u);
  EXPECT_LT(clean.report.expert_load.layers[0].max_over_mean, 1.1);
}

TEST(Findings, HotExpert) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;
  Analysed run = analyse("hot", options);
  auto found = of_kind(run.report, "expert_imbalance");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  EXPECT_EQ(found[0]->where.layer, 1);
  EXPECT_EQ(found[0]->where.experts, std::vector<uint32_t>{3});
  // 7 experts at ~256 and one at ~1024: max/mean = 1024 / (2816 / 8) = 2.91.
  EXPECT_NEAR(metric(*found[0], "max_over_mean"), 2.91, 0.1);
  // 2 ms of expert GEMM per layer and step, of which 1 - 1/2.91 is waiting for the hot expert.
  EXPECT_NEAR(found[0]->est_ms_per_step, 2.0 * (1 - 1 / 2.91), 0.1);
  const LayerLoad& layer = run.report.expert_load.layers.at(1);
  EXPECT_EQ(layer.hot_experts, std::vector<uint32_t>{3});
  EXPECT_NEAR(layer.share[3], 1024.0 / 2816.0, 0.01);
  EXPECT_EQ(of_kind(run.report, "straggler_rank").size(), 0u);
}

TEST(Findings, SlowRank) {
  SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 2;
  Analysed run = analyse("slow", options);
  auto found = of_kind(run.report, "straggler_rank");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  EXPECT_EQ(found[0]->where.ranks, std::vector<int32_t>{2});
  // Expert GEMM 2 ms x 1.6 on 2 layers: 2.4 ms more busy time per step.
  EXPECT_NEAR(found[0]->est_ms_per_step, 2.4, 0.05);
  EXPECT_EQ(run.report.findings[0].kind, "straggler_rank");
  // The others' waiting is not blamed on communication.
  EXPECT_EQ(of_kind(run.report, "exposed_communication").size(), 0u) << kinds(run.report);
  for (const auto& spread : run.report.breakdown.spread) EXPECT_EQ(spread.slowest_rank, 2);
}

TEST(Findings, UnoverlappedAllToAll) {
  SyntheticOptions options;
  options.unoverlapped_a2a = true;
  Analysed run = analyse("exposed", options);
  auto found = of_kind(run.report, "exposed_communication");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  // 2 layers x (dispatch + combine) x 3 ms, nothing under them.
  EXPECT_NEAR(found[0]->est_ms_per_step, 12.0, 0.01);
  EXPECT_EQ(found[0]->severity, Severity::kCritical);
  EXPECT_EQ(run.report.findings.size(), 1u) << kinds(run.report);
}

TEST(Findings, ExposedCommunicationNamesTheRunsCollectives) {
  SyntheticOptions options;
  options.unoverlapped_a2a = true;
  Analysed run = analyse("exposed_kinds", options);
  auto found = of_kind(run.report, "exposed_communication");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  EXPECT_NE(found[0]->evidence.find("(all_to_all)"), std::string::npos) << found[0]->evidence;
  EXPECT_NE(found[0]->suggestion.find("all-to-all"), std::string::npos);
  // No FSDP or DDP advice for a run with neither (tests/autocapture's fsdp_exposed_text checks
  // the converse on a real FSDP2 run).
  EXPECT_EQ(found[0]->suggestion.find("all_gather"), std::string::npos);
  EXPECT_EQ(found[0]->suggestion.find("all_reduce"), std::string::npos);
}

// A handful of tokens: max/mean is large by chance (one expert got 4 of 11), but a chi-square
// test against uniform routing has no evidence (1.4 expected tokens per expert): no finding.
TEST(Findings, FewTokensMakeNoImbalance) {
  SyntheticOptions options;
  options.num_ranks = 1;
  options.num_steps = 1;
  options.tokens_per_expert = 1;
  options.hot_layer = 1;
  options.hot_expert = 3;
  Analysed run = analyse("few_tokens", options);
  ASSERT_EQ(run.report.expert_load.layers.size(), 2u);
  EXPECT_GE(run.report.expert_load.layers[1].max_over_mean, 1.5);
  EXPECT_TRUE(of_kind(run.report, "expert_imbalance").empty()) << kinds(run.report);
}

// The same skew over many tokens is evidence: the finding quotes the test.
TEST(Findings, ImbalanceQuotesItsChiSquareTest) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;
  Analysed run = analyse("hot_tested", options);
  auto found = of_kind(run.report, "expert_imbalance");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  EXPECT_LT(metric(*found[0], "p_value"), 1e-3);
  EXPECT_GT(metric(*found[0], "chi_square"), 100.0);
  EXPECT_NE(found[0]->evidence.find("uniform routing rejected"), std::string::npos);
}

TEST(Findings, SyncPerStep) {
  SyntheticOptions options;
  options.sync_per_step = true;
  Analysed run = analyse("sync", options);
  auto found = of_kind(run.report, "host_sync_stall");
  ASSERT_EQ(found.size(), 2u) << kinds(run.report);  // one per rank
  for (const Finding* finding : found) {
    EXPECT_NEAR(finding->est_ms_per_step, 3.0, 0.01);
    EXPECT_EQ(metric(*finding, "syncs_per_step"), 1.0);
    EXPECT_EQ(metric(*finding, "blocking_d2h_per_step"), 1.0);
  }
}

TEST(Findings, AllocationChurn) {
  SyntheticOptions options;
  options.churn_allocations_per_step = 300;
  Analysed run = analyse("churn", options);
  auto found = of_kind(run.report, "allocation_churn");
  ASSERT_EQ(found.size(), 2u) << kinds(run.report);
  EXPECT_EQ(metric(*found[0], "allocations_per_step"), 301.0);  // + the activation buffer
  EXPECT_NEAR(found[0]->est_ms_per_step, 3.01, 1e-6);
  EXPECT_EQ(run.report.findings.size(), 2u) << kinds(run.report);
}

TEST(Findings, NanInLayerStats) {
  SyntheticOptions options;
  options.nan_step = 3;
  options.nan_layer = 1;
  options.nan_rank = 1;
  Analysed run = analyse("nan", options);
  auto found = of_kind(run.report, "nan_inf");
  ASSERT_EQ(found.size(), 1u) << kinds(run.report);
  EXPECT_EQ(found[0]->where.first_step, 3);
  EXPECT_EQ(found[0]->where.layer, 1);
  EXPECT_EQ(found[0]->where.ranks, std::vector<int32_t>{1});
  EXPECT_EQ(found[0]->severity, Severity::kCritical);
}

TEST(Findings, TokenDroppingDeadExpertsAndCollapse) {
  SyntheticOptions options;
  options.drop_layer = 0;
  options.drop_fraction = 0.05;
  options.dead_layer = 1;
  options.dead_experts = {5, 6};
  Analysed run = analyse("drop", options);
  auto dropped = of_kind(run.report, "token_dropping");
  ASSERT_EQ(dropped.size(), 1u) << kinds(run.report);
  EXPECT_EQ(dropped[0]->where.layer, 0);
  EXPECT_NEAR(metric(*dropped[0], "dropped_fraction"), 0.05, 0.001);
  auto dead = of_kind(run.report, "dead_experts");
  ASSERT_EQ(dead.size(), 1u) << kinds(run.report);
  EXPECT_EQ(dead[0]->where.layer, 1);
  EXPECT_EQ(dead[0]->where.experts, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(of_kind(run.report, "router_collapse").size(), 0u);

  SyntheticOptions collapse;
  collapse.collapse_layer = 0;
  collapse.num_steps = 8;
  Analysed collapsed = analyse("collapse", collapse);
  auto found = of_kind(collapsed.report, "router_collapse");
  ASSERT_EQ(found.size(), 1u) << kinds(collapsed.report);
  EXPECT_EQ(found[0]->where.layer, 0);
  EXPECT_LT(metric(*found[0], "effective_experts_last"), 2.5);
  EXPECT_GT(metric(*found[0], "effective_experts_first"), 7.5);
}

TEST(Findings, MemoryPressure) {
  SyntheticOptions options;
  options.device_memory_bytes = 600ull << 20;  // weights 512 MiB + 64 MiB activations
  Analysed run = analyse("memory", options);
  auto found = of_kind(run.report, "memory_pressure");
  ASSERT_EQ(found.size(), 2u) << kinds(run.report);
  const RankMemory& memory = run.report.memory.at(0);
  EXPECT_EQ(memory.peak_bytes, int64_t(576) << 20);
  EXPECT_EQ(memory.peak_by_category[1], int64_t(512) << 20);
  EXPECT_EQ(memory.peak_by_category[4], int64_t(64) << 20);
  ASSERT_FALSE(memory.largest_at_peak.empty());
  EXPECT_EQ(memory.largest_at_peak[0].bytes, int64_t(512) << 20);
}

TEST(Report, JsonHasTheDocumentedShape) {
  SyntheticOptions options;
  options.hot_layer = 0;
  options.hot_expert = 1;
  options.unoverlapped_a2a = true;
  Analysed run = analyse("json", options);
  auto json = nlohmann::json::parse(render_report(run.model, run.report, ReportFormat::kJson));
  EXPECT_EQ(json["summary"]["ranks"], 2);
  EXPECT_EQ(json["summary"]["steps"], 6);
  ASSERT_EQ(json["expert_load"].size(), 2u);
  EXPECT_EQ(json["expert_load"][0]["layer"], 0);
  EXPECT_GT(json["expert_load"][0]["max_over_mean"].get<double>(), 2.0);
  EXPECT_EQ(json["expert_load"][0]["hot_experts"], nlohmann::json::array({1}));
  EXPECT_TRUE(json["expert_load"][0]["dead_experts"].is_array());
  ASSERT_EQ(json["findings"].size(), 2u);
  // Ranked by estimated time lost: the 12 ms of exposed all-to-all first.
  EXPECT_EQ(json["findings"][0]["kind"], "exposed_communication");
  for (const auto& finding : json["findings"]) {
    for (const char* key :
         {"kind", "severity", "est_ms_per_step", "where", "evidence", "suggestion"}) {
      EXPECT_TRUE(finding.contains(key)) << key;
    }
  }
  const auto& matrix = json["communication"]["all_to_all"][0]["bytes"];
  ASSERT_EQ(matrix.size(), 2u);
  EXPECT_GT(matrix[0][1].get<uint64_t>(), 0u);
  std::string text = render_report(run.model, run.report, ReportFormat::kText);
  EXPECT_NE(text.find("exposed_communication"), std::string::npos);
  std::string markdown = render_report(run.model, run.report, ReportFormat::kMarkdown);
  EXPECT_NE(markdown.find("| layer |"), std::string::npos);
}

}  // namespace
}  // namespace moescope::analysis

namespace moescope::analysis {
namespace {

TEST(Findings, LateLaunches) {
  testing::SyntheticOptions options;
  options.late_launch_kernels = 50;
  Analysed run = analyse("launch", options);
  auto found = of_kind(run.report, "launch_bound");
  ASSERT_EQ(found.size(), 2u) << kinds(run.report);
  // 50 kernels per step, each waiting 29 us for its launch call to end.
  EXPECT_NEAR(found[0]->est_ms_per_step, 50 * 0.029, 1e-6);
  EXPECT_EQ(run.report.findings.size(), 2u) << kinds(run.report);
}

TEST(ExpertLoad, PredictionAccuracyAndRebalancing) {
  testing::SyntheticOptions options;
  options.predictions = true;
  Analysed run = analyse("predictions", options);
  ASSERT_EQ(run.report.expert_load.layers.size(), 2u);
  for (const LayerLoad& layer : run.report.expert_load.layers) {
    EXPECT_EQ(layer.predictions, 6u);
    EXPECT_NEAR(layer.prediction_error, 0.1, 0.005);  // predicted 10% above the actual
    EXPECT_EQ(layer.max_over_mean_by_step.size(), 6u);
  }
  const RebalanceSummary& rebalances = run.report.expert_load.rebalances;
  EXPECT_EQ(rebalances.decisions, 12u);
  EXPECT_EQ(rebalances.applied, 6u);
  EXPECT_FLOAT_EQ(rebalances.mean_imbalance_before, 2.0);
  EXPECT_FLOAT_EQ(rebalances.mean_imbalance_after, 1.25);
  EXPECT_EQ(rebalances.bytes_moved, 6u << 20);
  EXPECT_TRUE(run.report.findings.empty());
}

}  // namespace
}  // namespace moescope::analysis

namespace moescope::analysis {
namespace {

// Severity is the share of the step a finding costs (docs/analysis.md), whatever its kind.
TEST(Severity, FollowsTheShareOfTheStep) {
  EXPECT_EQ(severity_of(25.0, 100.0), Severity::kCritical);
  EXPECT_EQ(severity_of(24.9, 100.0), Severity::kWarning);
  EXPECT_EQ(severity_of(5.0, 100.0), Severity::kWarning);
  EXPECT_EQ(severity_of(4.9, 100.0), Severity::kInfo);
  EXPECT_EQ(severity_of(0.0, 100.0, /*threatens_run=*/true), Severity::kCritical);
  EXPECT_EQ(severity_of(10.0, 0.0), Severity::kInfo);  // no step known
  EXPECT_STREQ(severity_name(Severity::kCritical), "critical");
  EXPECT_STREQ(severity_name(Severity::kWarning), "warning");
  EXPECT_STREQ(severity_name(Severity::kInfo), "info");
}

// Several problems in one run: every finding's severity is its share of the step, so a finding
// that costs more per step is never rated lower than one that costs less.
TEST(Severity, RanksWithTheTimeAFindingCosts) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;
  options.sync_per_step = true;
  options.unoverlapped_a2a = true;
  options.churn_allocations_per_step = 60;
  Analysed run = analyse("severity_mix", options);
  ASSERT_GE(run.report.findings.size(), 3u) << kinds(run.report);
  const double step_ms =
      run.report.findings.front().est_ms_per_step / run.report.findings.front().step_share;
  EXPECT_GT(step_ms, 0.0);
  for (size_t i = 0; i < run.report.findings.size(); ++i) {
    const Finding& finding = run.report.findings[i];
    EXPECT_NEAR(finding.step_share, finding.est_ms_per_step / step_ms, 1e-9) << finding.kind;
    EXPECT_EQ(finding.severity, severity_of(finding.est_ms_per_step, step_ms)) << finding.kind;
    if (i > 0) {
      EXPECT_LE(finding.severity, run.report.findings[i - 1].severity)
          << finding.kind << " after " << run.report.findings[i - 1].kind;
    }
  }
}

}  // namespace
}  // namespace moescope::analysis

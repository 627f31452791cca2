// The analyses' numbers beside the findings: expert-load statistics per layer and across
// layers, their evolution over steps, achieved bandwidth per op, the step spread across ranks
// and the memory timeline by category. Each is checked against a computation of its own from
// the loaded model's raw samples, and against what was planted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::SyntheticOptions;

TraceModel load_run(const std::string& name, const SyntheticOptions& options) {
  TraceModel model =
      load_traces(testing::write_synthetic_run(testing::test_directory(name), "run", options));
  EXPECT_TRUE(model.errors.empty());
  return model;
}

TEST(AnalysisNumbers, RankImbalanceComesFromTheRowsEachRanksExpertsComputed) {
  // Layer 0, 2 ranks, 2 steps. LOCAL loads are even over experts, but rank 0's experts compute
  // 300 then 200 rows, rank 1's 100 then 200: max/mean 1.5 then 1.0, mean 1.25.
  TraceModel model;
  auto add = [&](int64_t step, int32_t rank, uint32_t scope, std::vector<uint32_t> tokens) {
    ExpertLoadSample sample;
    sample.step = step;
    sample.rank = rank;
    sample.scope = scope;
    sample.num_experts = uint32_t(tokens.size());
    sample.offset = uint32_t(model.expert_tokens.size());
    model.expert_tokens.insert(model.expert_tokens.end(), tokens.begin(), tokens.end());
    model.expert_loads.push_back(sample);
  };
  for (int32_t rank = 0; rank < 2; ++rank) {
    for (int64_t step = 0; step < 2; ++step) add(step, rank, 0 /*local*/, {50, 50, 50, 50});
  }
  add(0, 0, 2 /*received*/, {250, 50});
  add(0, 1, 2, {60, 40});
  add(1, 0, 2, {100, 100});
  add(1, 1, 2, {150, 50});
  const ExpertLoadAnalysis analysis = analyze_expert_load(model);
  ASSERT_EQ(analysis.layers.size(), 1u);
  EXPECT_EQ(analysis.layers[0].ranks, 2u);
  EXPECT_NEAR(analysis.layers[0].rank_max_over_mean, 1.25, 1e-12);
  EXPECT_NEAR(analysis.layers[0].max_over_mean, 1.0, 1e-12);  // the router itself is even

  TraceModel one_rank;
  std::swap(one_rank.expert_tokens, model.expert_tokens);
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.rank == 0) one_rank.expert_loads.push_back(sample);
  }
  EXPECT_EQ(analyze_expert_load(one_rank).layers[0].rank_max_over_mean, 0.0);
}

TEST(AnalysisNumbers, ExpertLoadStatisticsPerLayerAndAcrossLayers) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;  // 4x the tokens of the others
  TraceModel model = load_run("numbers_load", options);
  ExpertLoadAnalysis analysis = analyze_expert_load(model);
  ASSERT_EQ(analysis.layers.size(), 2u);

  // Per (layer, step): the sum of every rank's LOCAL sample.
  std::map<uint32_t, std::map<int64_t, std::vector<double>>> load;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    auto& tokens = load[sample.layer][sample.step];
    tokens.resize(sample.num_experts, 0.0);
    auto counts = model.tokens(sample);
    for (size_t e = 0; e < counts.size(); ++e) tokens[e] += counts[e];
  }
  std::vector<double> max_over_means;
  for (const LayerLoad& layer : analysis.layers) {
    const auto& steps = load.at(layer.layer);
    ASSERT_EQ(layer.max_over_mean_by_step.size(), steps.size());
    double sum_max_over_mean = 0, sum_cv = 0;
    size_t i = 0;
    for (const auto& [step, tokens] : steps) {
      double total = 0, max = 0;
      for (double t : tokens) total += t, max = std::max(max, t);
      const double mean = total / double(tokens.size());
      double variance = 0;
      for (double t : tokens) variance += (t - mean) * (t - mean);
      const double cv = std::sqrt(variance / double(tokens.size())) / mean;
      EXPECT_EQ(layer.steps[i], step);
      EXPECT_NEAR(layer.max_over_mean_by_step[i], max / mean, 1e-9) << "step " << step;
      sum_max_over_mean += max / mean;
      sum_cv += cv;
      ++i;
    }
    EXPECT_NEAR(layer.max_over_mean, sum_max_over_mean / double(steps.size()), 1e-9);
    EXPECT_NEAR(layer.cv, sum_cv / double(steps.size()), 1e-9);
    EXPECT_NEAR(layer.utilization, 1.0 / layer.max_over_mean, 1e-12);
    max_over_means.push_back(layer.max_over_mean);
  }
  // What was planted: 7 experts at ~256 tokens and one at ~1024 on layer 1, so max/mean ~2.91,
  // cv = sqrt((7 x 96^2 + 672^2) / 8) / 352 ~ 0.72; layer 0 is even (jitter only).
  EXPECT_NEAR(analysis.layers[1].max_over_mean, 2.91, 0.1);
  EXPECT_NEAR(analysis.layers[1].cv, 0.72, 0.05);
  EXPECT_LT(analysis.layers[0].cv, 0.1);
  // Across layers (linear interpolation between the two layers).
  std::sort(max_over_means.begin(), max_over_means.end());
  EXPECT_NEAR(analysis.max_over_mean.max, max_over_means[1], 1e-12);
  EXPECT_NEAR(analysis.max_over_mean.p50, 0.5 * (max_over_means[0] + max_over_means[1]), 1e-12);
  EXPECT_NEAR(analysis.max_over_mean.p90,
              max_over_means[0] + 0.9 * (max_over_means[1] - max_over_means[0]), 1e-12);
  EXPECT_NEAR(analysis.cv.max, std::max(analysis.layers[0].cv, analysis.layers[1].cv), 1e-12);
}

TEST(AnalysisNumbers, AchievedBandwidthPerOp) {
  TraceModel model = load_run("numbers_bandwidth", {});
  CommAnalysis comm = analyze_communication(model);
  ASSERT_FALSE(comm.ops.empty());
  for (const CommOpStats& stats : comm.ops) {
    // Every op of this name and kind on every rank: bytes / (end - start) in bytes/ns = GB/s.
    uint32_t count = 0;
    uint64_t bytes = 0;
    double min = 1e300, max = 0, sum = 0;
    for (const ProcessTrack& process : model.processes) {
      for (const CommunicatorTrack& track : process.communicators) {
        for (const CommOp& op : track.ops) {
          if (model.name(op.name) != stats.name || op.kind != stats.kind) continue;
          ++count;
          bytes += op.bytes;
          const double gbps = double(op.bytes) / double(op.end - op.start);
          min = std::min(min, gbps), max = std::max(max, gbps), sum += gbps;
        }
      }
    }
    EXPECT_EQ(stats.count, count) << stats.name;
    EXPECT_EQ(stats.bytes, bytes) << stats.name;
    EXPECT_NEAR(stats.mean_gbps, sum / count, 1e-9) << stats.name;
    EXPECT_NEAR(stats.min_gbps, min, 1e-9) << stats.name;
    EXPECT_NEAR(stats.max_gbps, max, 1e-9) << stats.name;
  }
  // Planted: 8 experts x ~256 tokens x the synthetic bytes per token, each all-to-all 0.4 ms.
  EXPECT_GT(comm.ops[0].mean_gbps, 0.0);
}

TEST(AnalysisNumbers, StepSpreadAcrossRanks) {
  SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 2;  // expert GEMM 2 ms x 1.6 on 2 layers: 2.4 ms more busy time per step
  TraceModel model = load_run("numbers_spread", options);
  TimeBreakdown breakdown = compute_time_breakdown(model);
  ASSERT_EQ(breakdown.ranks.size(), 4u);
  ASSERT_EQ(breakdown.spread.size(), 6u);
  for (size_t s = 0; s < breakdown.spread.size(); ++s) {
    const StepSpread& spread = breakdown.spread[s];
    double min = 1e300, max = 0, sum = 0;
    std::vector<double> busy;
    for (const RankBreakdown& rank : breakdown.ranks) {
      const StepBreakdown& step = rank.steps.at(s);
      ASSERT_EQ(step.step, spread.step);
      min = std::min(min, step.step_ms), max = std::max(max, step.step_ms), sum += step.step_ms;
      busy.push_back(step.busy_ms());
    }
    EXPECT_NEAR(spread.min_ms, min, 1e-9);
    EXPECT_NEAR(spread.max_ms, max, 1e-9);
    EXPECT_NEAR(spread.mean_ms, sum / 4, 1e-9);
    EXPECT_EQ(spread.slowest_rank, 2);
    EXPECT_NEAR(spread.max_busy_ms, *std::max_element(busy.begin(), busy.end()), 1e-9);
    EXPECT_NEAR(spread.max_busy_ms - spread.median_busy_ms, 2.4, 0.05);
  }
}

TEST(AnalysisNumbers, MemoryTimelineByCategory) {
  SyntheticOptions options;
  options.churn_allocations_per_step = 20;
  TraceModel model = load_run("numbers_memory", options);
  for (const ProcessTrack& process : model.processes) {
    const MemoryUsage& usage = process.memory_usage;
    ASSERT_EQ(usage.times.size(), process.memory_events.size());
    ASSERT_FALSE(usage.times.empty());
    int64_t total = 0;
    int64_t by_category[kNumMemoryCategories] = {};
    for (size_t i = 0; i < usage.times.size(); ++i) {
      const MemoryEvent& event = process.memory_events[i];
      total += event.bytes;
      by_category[event.category] += event.bytes;
      EXPECT_EQ(usage.times[i], event.time);
      EXPECT_EQ(usage.total[i], total);
      int64_t sum = 0;
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        EXPECT_EQ(usage.by_category[c][i], by_category[c]) << "category " << c;
        sum += usage.by_category[c][i];
      }
      EXPECT_EQ(sum, usage.total[i]);
    }
    // The expert weights (category 1) stay allocated for the whole run: 512 MiB.
    EXPECT_EQ(usage.by_category[1].back(), int64_t(512) << 20);
  }
  // Allocation churn per step: the planted 20 plus the activation buffer, every step.
  TimeBreakdown breakdown = compute_time_breakdown(model);
  for (const RankBreakdown& rank : breakdown.ranks) {
    for (const StepBreakdown& step : rank.steps) EXPECT_EQ(step.allocations, 21u);
  }
}

}  // namespace
}  // namespace moescope::analysis

// Wait vs transfer inside collectives and the causal links between findings, on synthetic runs
// whose waits are known exactly (synthetic_moe_trace.h: every rank enters the combine all-to-all
// when its experts finish, so the others wait for the slow rank's extra expert time).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "moescope/analysis/collective_op_wait.h"
#include "moescope/analysis/collective_wait.h"
#include "moescope/analysis/expert_placement_seen.h"
#include "moescope/analysis/finding_links.h"
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

const Finding* first_of_kind(const Report& report, const std::string& kind) {
  for (const Finding& finding : report.findings) {
    if (finding.kind == kind) return &finding;
  }
  return nullptr;
}

std::string listing(const Report& report) {
  std::string text;
  for (const Finding& f : report.findings) {
    text += "#" + std::to_string(f.id) + " " + f.kind + ": " + f.evidence + " | " + f.chain + "\n";
  }
  return text;
}

TEST(CollectiveWait, OthersWaitForTheSlowRankInTheCombine) {
  SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 2;
  const TraceModel model = load_run("wait_slow_rank", options);
  const CollectiveWaits waits = analyze_collective_waits(model);
  ASSERT_EQ(waits.kinds.size(), 1u);
  const CollectiveKindWait& all_to_all = waits.kinds.front();
  EXPECT_EQ(all_to_all.kind, kCommKindAllToAll);
  // 6 steps x 2 layers x (dispatch + combine), each matched on all 4 ranks.
  EXPECT_EQ(all_to_all.matched_ops, 24u);
  EXPECT_EQ(all_to_all.unmatched_ops, 0u);
  ASSERT_EQ(all_to_all.ranks.size(), 4u);
  for (const RankCollectiveWait& rank : all_to_all.ranks) {
    // The slow rank's experts take 2 ms x 0.6 longer per layer: 2 layers x 1.2 ms of waiting
    // per step on every other rank, none on the slow one. Transfer: 4 ops x 0.4 ms everywhere.
    EXPECT_NEAR(rank.wait_ms, rank.rank == 2 ? 0.0 : 2.4, 1e-3) << "rank " << rank.rank;
    EXPECT_NEAR(rank.transfer_ms, 1.6, 1e-3) << "rank " << rank.rank;
    EXPECT_NEAR(rank.caused_wait_ms, rank.rank == 2 ? 2.4 : 0.0, 1e-3) << "rank " << rank.rank;
  }
  EXPECT_NEAR(waits.of_rank(2).caused_wait_ms, 2.4, 1e-3);
  // The per-step series (the diff's rows): the mean over the 4 ranks.
  ASSERT_EQ(all_to_all.steps.size(), 6u);
  for (size_t i = 0; i < all_to_all.steps.size(); ++i) {
    EXPECT_NEAR(all_to_all.wait_ms[i], 3 * 2.4 / 4, 1e-3);
    EXPECT_NEAR(all_to_all.transfer_ms[i], 1.6, 1e-3);
  }
}

// Per op (what the timeline shades): the combine of every rank but the slow one waits 1.2 ms for
// it, the dispatch waits for nobody, and the ops' waits add up to the per-step totals.
TEST(CollectiveWait, EachOpsWaitIsTheWaitingTheTimelineShades) {
  SyntheticOptions options;
  options.num_ranks = 4;
  options.slow_rank = 2;
  const TraceModel model = load_run("op_wait_slow_rank", options);
  const CollectiveWaits waits = analyze_collective_waits(model);
  const CollectiveOpWaits op_waits = collective_op_waits(model);
  ASSERT_EQ(op_waits.wait_ns.size(), model.processes.size());
  for (size_t p = 0; p < model.processes.size(); ++p) {
    const ProcessTrack& process = model.processes[p];
    ASSERT_EQ(op_waits.wait_ns[p].size(), process.communicators.size());
    double waited_ns = 0;
    size_t waiting_ops = 0, ops = 0;
    for (size_t c = 0; c < process.communicators.size(); ++c) {
      for (size_t i = 0; i < process.communicators[c].ops.size(); ++i) {
        const TimeNs wait = op_waits.wait(p, c, i);
        ASSERT_GE(wait, 0) << "every op is matched";
        EXPECT_LE(wait, process.communicators[c].ops[i].duration());
        if (wait > 0) {
          EXPECT_NEAR(double(wait), 1.2e6, 1e3) << "rank " << process.rank << " op " << i;
          ++waiting_ops;
        }
        waited_ns += double(wait);
        ++ops;
      }
    }
    // 6 steps x 2 layers: the combines wait on every rank but the slow one.
    EXPECT_EQ(ops, 24u);
    EXPECT_EQ(waiting_ops, process.rank == 2 ? 0u : 12u) << "rank " << process.rank;
    EXPECT_NEAR(waited_ns * 1e-6 / double(process.steps.size()),
                waits.of_rank(process.rank).wait_ms, 1e-6);
  }
  EXPECT_EQ(op_waits.wait(99, 0, 0), -1) << "out of range: no wait";
}

TEST(CollectiveWait, ABalancedRunWaitsForNobody) {
  const CollectiveWaits waits = analyze_collective_waits(load_run("wait_clean", {}));
  ASSERT_EQ(waits.kinds.size(), 1u);
  for (const RankCollectiveWait& rank : waits.kinds.front().ranks) {
    EXPECT_NEAR(rank.wait_ms, 0.0, 1e-6);
    EXPECT_NEAR(rank.caused_wait_ms, 0.0, 1e-6);
  }
}

// Expert-load samples written into a model directly: per step, the router's tokens per global
// expert (GLOBAL, on rank 0) and each rank's rows per local slot (RECEIVED).
void add_sample(TraceModel& model, int64_t step, int32_t rank, uint32_t scope,
                const std::vector<uint32_t>& tokens) {
  ExpertLoadSample sample;
  sample.step = step;
  sample.layer = 1;
  sample.rank = rank;
  sample.scope = scope;
  sample.num_experts = uint32_t(tokens.size());
  sample.offset = uint32_t(model.expert_tokens.size());
  model.expert_tokens.insert(model.expert_tokens.end(), tokens.begin(), tokens.end());
  model.expert_loads.push_back(sample);
}

TEST(ExpertPlacementSeen, SlotsMatchTheExpertsWhoseTokensTheyReceive) {
  // 4 experts, 2 per rank: rank 0 hosts experts 3 and 1 (in that slot order), rank 1 hosts 0
  // and 2. Expert 1 is hot; the counts change from step to step.
  TraceModel model;
  for (int64_t step = 0; step < 4; ++step) {
    const uint32_t base = 10 + uint32_t(step) * 3;
    const std::vector<uint32_t> routed = {base, 5 * base, base + 2, base + 1};
    add_sample(model, step, 0, kExpertsGlobal, routed);
    add_sample(model, step, 0, kExpertsReceived, {routed[3], routed[1]});
    add_sample(model, step, 1, kExpertsReceived, {routed[0], routed[2]});
  }
  const LayerPlacementSeen seen = expert_placement_seen(model, 1);
  ASSERT_TRUE(seen.has_received_rows);
  EXPECT_EQ(seen.rank_of_expert, (std::vector<int32_t>{1, 0, 1, 0}));
  EXPECT_EQ(seen.busiest_rank, 0);
  EXPECT_EQ(seen.hosts_of({1}), std::vector<int32_t>{0});
  // Rows per step: rank 0 gets 6 base + 1, rank 1 2 base + 2 (mean base 14.5 over the steps).
  EXPECT_NEAR(seen.busiest_excess_rows, 4 * 14.5 - 1, 1e-9);
  EXPECT_FALSE(expert_placement_seen(model, 0).has_received_rows);
}

TEST(ExpertPlacementSeen, AReplicatedExpertHasNoSingleRank) {
  // Expert 1's tokens split over a slot on each rank: neither slot matches it.
  TraceModel model;
  for (int64_t step = 0; step < 4; ++step) {
    const uint32_t base = 10 + uint32_t(step) * 3;
    const std::vector<uint32_t> routed = {base, 4 * base, base + 2, base + 1};
    add_sample(model, step, 0, kExpertsGlobal, routed);
    add_sample(model, step, 0, kExpertsReceived, {routed[0], routed[1] / 2, routed[3]});
    add_sample(model, step, 1, kExpertsReceived, {routed[2], routed[1] / 2});
  }
  const LayerPlacementSeen seen = expert_placement_seen(model, 1);
  EXPECT_EQ(seen.rank_of_expert, (std::vector<int32_t>{0, -1, 1, 0}));
  EXPECT_TRUE(seen.hosts_of({1}).empty());
}

TEST(FindingLinks, StragglerExplainsTheWaitingAndRanksFirst) {
  SyntheticOptions options;
  options.slow_rank = 1;
  options.slow_factor = 2.0;
  options.unoverlapped_a2a = true;
  const TraceModel model = load_run("links_straggler", options);
  const Report report = build_report(model);
  const Finding* straggler = first_of_kind(report, "straggler_rank");
  const Finding* exposed = first_of_kind(report, "exposed_communication");
  ASSERT_TRUE(straggler && exposed) << listing(report);
  EXPECT_EQ(straggler->explains, std::vector<int32_t>{exposed->id}) << listing(report);
  EXPECT_EQ(exposed->explained_by, std::vector<int32_t>{straggler->id}) << listing(report);
  // The root cause comes first, its effect right after it.
  EXPECT_EQ(report.findings.front().kind, "straggler_rank") << listing(report);
  EXPECT_EQ(exposed->id, straggler->id + 1);
  for (size_t i = 0; i < report.findings.size(); ++i) EXPECT_EQ(report.findings[i].id, int(i + 1));
  // Rank 0 waits 2 layers x 2 ms per step for rank 1 inside the combine.
  EXPECT_NE(exposed->chain.find("waiting for rank 1"), std::string::npos) << exposed->chain;
  EXPECT_NE(exposed->suggestion.find("fix the straggler first"), std::string::npos);
  // No expert load singles rank 1 out (every rank has the same tokens): the chain says so.
  EXPECT_NE(straggler->chain.find("no expert cause"), std::string::npos) << straggler->chain;
  EXPECT_NE(straggler->chain.find("slower GPU or host"), std::string::npos) << straggler->chain;

  EXPECT_EQ(root_cause_line(report.findings).rfind("#1 straggler_rank (rank 1; ", 0), 0u)
      << root_cause_line(report.findings);
  EXPECT_NE(root_cause_line(report.findings).find(" -> #2 exposed_communication"),
            std::string::npos)
      << root_cause_line(report.findings);
  const nlohmann::json json =
      nlohmann::json::parse(render_report(model, report, ReportFormat::kJson));
  const auto& first = json["findings"][0];
  EXPECT_EQ(first["id"], 1);
  EXPECT_EQ(first["explains"], nlohmann::json::array({exposed->id}));
  EXPECT_TRUE(first["chain"].is_string());
  const auto& waits = json["communication"]["wait_transfer"];
  ASSERT_EQ(waits.size(), 1u) << json["communication"].dump(2);
  EXPECT_EQ(waits[0]["kind"], "all_to_all");
  EXPECT_NEAR(waits[0]["ranks"][0]["wait_ms_per_step"].get<double>(), 4.0, 1e-3);
  EXPECT_NEAR(waits[0]["ranks"][1]["caused_wait_ms_per_step"].get<double>(), 4.0, 1e-3);
  const std::string text = render_report(model, report, ReportFormat::kText);
  EXPECT_NE(text.find("chain: "), std::string::npos) << text;
  EXPECT_NE(text.find("others wait for it"), std::string::npos) << text;
}

TEST(FindingLinks, ImbalanceWithoutPlacementStopsAtTheLayer) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;
  const TraceModel model = load_run("links_no_placement", options);
  // The synthetic run records the router's tokens only, no rows received per rank.
  EXPECT_FALSE(expert_placement_seen(model, 1).has_received_rows);
  const Report report = build_report(model);
  const Finding* imbalance = first_of_kind(report, "expert_imbalance");
  ASSERT_TRUE(imbalance) << listing(report);
  EXPECT_TRUE(imbalance->explains.empty());
  EXPECT_NE(imbalance->chain.find("the chain stops at layer 1"), std::string::npos)
      << imbalance->chain;
}

}  // namespace
}  // namespace moescope::analysis

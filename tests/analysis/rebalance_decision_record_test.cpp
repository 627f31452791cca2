// The rebalancing decision's numbers in the trace (format 3): written with the rebalance record's
// tail, read into the model, kept by rank summaries, worded by the report; traces written before
// (tests/data's moe_train run, format 2) still load, their decisions without numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/rebalance_decision_text.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/trace_writer.h"

namespace fs = std::filesystem;
using namespace moescope;
using namespace moescope::analysis;

namespace {

const std::string kOlderRun = std::string(MOESCOPE_ANALYSIS_TEST_DIR) + "/../data/moe_train_2ranks";

// A decision with its numbers: kept, the replicas' sync costs more than the gain.
trace::RebalanceCosts kept_costs() {
  trace::RebalanceCosts costs{};
  costs.busiest_rows_before = 1100;
  costs.busiest_rows_after = 1000;
  costs.gain_ms = 1.2f;
  costs.replica_sync_ms = 2.3f;
  costs.migration_ms = 4.0f;
  costs.window_steps = 10;
  costs.net_ms = 1.2f - 2.3f - 0.4f;
  costs.net_stderr_ms = 0.25f;
  costs.reason = 2;  // MOESCOPE_REBALANCE_COSTS_EXCEED_GAIN
  return costs;
}

// One rank's trace: at step 7 layer 1 a kept decision with numbers, at step 14 layer 1 an
// applied one with numbers, and a decision without (as older writers wrote them).
std::string write_rank(const fs::path& directory, int rank) {
  trace::RecordBuffer records;
  auto append = [&](int64_t step, bool applied, const trace::RebalanceCosts* costs) {
    auto& record = records.append_sized<trace::RebalanceRecord>(
        trace::RecordKind::kRebalance, 1000 + uint64_t(step), 0,
        costs ? trace::padded_to_8(sizeof(trace::RebalanceCosts)) : 0);
    record.step = step;
    record.layer = 1;
    record.rank = rank;
    record.imbalance_before = 1.6f;
    record.imbalance_after = 1.1f;
    record.applied = applied ? 1 : 0;
    record.num_costs = costs ? 1 : 0;
    if (costs) std::memcpy(records.tail<trace::RebalanceRecord>(), costs, sizeof(*costs));
  };
  for (int64_t step = 0; step < 22; ++step) {  // the report's expert-load section holds them
    auto& load = records.append_sized<trace::ExpertLoadRecord>(trace::RecordKind::kExpertLoad,
                                                               900 + uint64_t(step), 0, 16);
    load.step = step;
    load.layer = 1;
    load.rank = rank;
    load.scope = 0;  // MOESCOPE_EXPERTS_LOCAL
    load.num_experts = 4;
    const uint32_t tokens[4] = {40, 10, 10, 4};
    std::memcpy(records.tail<trace::ExpertLoadRecord>(), tokens, sizeof(tokens));
  }
  const trace::RebalanceCosts kept = kept_costs();
  trace::RebalanceCosts pays = kept;
  pays.gain_ms = 3.0f + float(rank);  // ranks differ only where the report must pick one
  pays.replica_sync_ms = 0.5f;
  pays.net_ms = pays.gain_ms - 0.5f - 0.4f;
  pays.reason = 1;  // MOESCOPE_REBALANCE_PAYS
  append(7, false, &kept);
  append(14, true, &pays);
  append(21, false, nullptr);
  const std::string path = (directory / ("run." + std::to_string(rank) + ".moetrace")).string();
  trace::TraceWriter writer;
  EXPECT_TRUE(writer.open(path, R"({"rank":)" + std::to_string(rank) + R"(,"world_size":2})", {}))
      << writer.error();
  EXPECT_TRUE(writer.write_chunk(1, records.bytes()));
  trace::RecordBuffer end;
  end.append<trace::StatsRecord>(trace::RecordKind::kStats, 2000);
  EXPECT_TRUE(writer.write_chunk(0, end.bytes(), trace::ChunkType::kEnd));
  return path;
}

}  // namespace

TEST(RebalanceDecisionRecord, AnOlderRuntimeTraceStillLoadsItsDecisionsWithoutNumbers) {
  const TraceModel model =
      load_traces({kOlderRun + "/run.0.moetrace", kOlderRun + "/run.1.moetrace"});
  ASSERT_EQ(model.rebalances.size(), 8u);  // 4 decisions on each rank
  for (const RebalanceDecision& decision : model.rebalances) {
    EXPECT_FALSE(decision.has_costs);
    EXPECT_EQ(decision.gain_ms, 0.0f);
  }
  const Report report = build_report(model);
  EXPECT_EQ(report.expert_load.rebalances.decisions, 8u);
  EXPECT_TRUE(report.expert_load.rebalances.with_costs.empty());
  const std::string text = render_report(model, report, ReportFormat::kText);
  EXPECT_NE(text.find("rebalancing: 8 decisions"), std::string::npos) << text;
  EXPECT_EQ(text.find("rebalance at step"), std::string::npos) << text;
}

TEST(RebalanceDecisionRecord, TheNumbersTravelThroughTraceSummaryAndReport) {
  const fs::path directory =
      fs::temp_directory_path() / ("rebalance_record_" + std::to_string(getpid()));
  fs::create_directories(directory);
  const TraceModel model = load_traces({write_rank(directory, 0), write_rank(directory, 1)});
  ASSERT_EQ(model.rebalances.size(), 6u);
  const RebalanceDecision* kept = nullptr;
  int with_costs = 0;
  for (const RebalanceDecision& decision : model.rebalances) {
    with_costs += decision.has_costs ? 1 : 0;
    if (decision.step == 7 && decision.rank == 0) kept = &decision;
  }
  EXPECT_EQ(with_costs, 4);
  ASSERT_NE(kept, nullptr);
  ASSERT_TRUE(kept->has_costs);
  EXPECT_FLOAT_EQ(kept->gain_ms, 1.2f);
  EXPECT_FLOAT_EQ(kept->replica_sync_ms, 2.3f);
  EXPECT_FLOAT_EQ(kept->migration_ms, 4.0f);
  EXPECT_FLOAT_EQ(kept->window_steps, 10.0f);
  EXPECT_FLOAT_EQ(kept->busiest_rows_before, 1100.0f);
  EXPECT_EQ(kept->reason, 2u);
  // The recorded net is the gain less the costs.
  EXPECT_NEAR(kept->net_ms, kept->gain_ms - kept->replica_sync_ms - kept->migration_ms / 10, 1e-5);

  const std::string line = describe_rebalance_decision(*kept);
  EXPECT_NE(line.find("rebalance at step 7 layer 1: kept, predicted gain 1.20 ms/step <= replica "
                      "sync 2.30 ms/step + migration 4.00 ms / 10 steps; net -1.50 +- 0.49 "
                      "ms/step (the costs exceed the gain)"),
            std::string::npos)
      << line;

  // One line per step and layer, the lowest rank's.
  const Report report = build_report(model);
  const auto& decisions = report.expert_load.rebalances.with_costs;
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].step, 7);
  EXPECT_EQ(decisions[1].step, 14);
  EXPECT_EQ(decisions[1].rank, 0);
  EXPECT_FLOAT_EQ(decisions[1].gain_ms, 3.0f);
  const std::string text = render_report(model, report, ReportFormat::kText);
  EXPECT_NE(text.find("rebalance at step 14 layer 1: applied, predicted gain 3.00 ms/step > "),
            std::string::npos)
      << text;
  const std::string json = render_report(model, report, ReportFormat::kJson);
  EXPECT_NE(json.find("\"with_costs\""), std::string::npos);
  EXPECT_NE(json.find("the costs exceed the gain"), std::string::npos);

  // A rank summary keeps them.
  RankSummary summary = summarize_process(model, 0, 1);
  RankSummary decoded;
  std::string error;
  ASSERT_TRUE(decode_rank_summary(encode_rank_summary(summary), decoded, error)) << error;
  ASSERT_EQ(decoded.samples.rebalances.size(), 3u);
  const RebalanceDecision& first = decoded.samples.rebalances.front();
  EXPECT_TRUE(first.has_costs);
  EXPECT_FLOAT_EQ(first.replica_sync_ms, 2.3f);
  EXPECT_FLOAT_EQ(first.net_stderr_ms, 0.25f);
  EXPECT_EQ(first.reason, 2u);
  EXPECT_FALSE(decoded.samples.rebalances.back().has_costs);
  fs::remove_all(directory);
}

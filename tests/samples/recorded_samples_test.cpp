// The samples under `moescope record`: what the programs printed is what the trace holds.
#include <glob.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "moescope/analysis/layer_forward_samples.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/trace_model.h"
#include "moescope/recorder.h"
#include "sample_runs.h"

namespace moescope::samples_test {
namespace {

std::vector<std::string> glob_files(const std::string& pattern) {
  std::vector<std::string> files;
  glob_t result{};
  if (::glob(pattern.c_str(), 0, nullptr, &result) == 0) {
    for (size_t i = 0; i < result.gl_pathc; ++i) files.emplace_back(result.gl_pathv[i]);
  }
  ::globfree(&result);
  return files;
}

// (rank, step, layer) -> tokens per expert of every LOCAL-scope expert-load record.
std::map<ExpertLoadKey, std::vector<int64_t>> local_loads_in(const analysis::TraceModel& model) {
  std::map<ExpertLoadKey, std::vector<int64_t>> loads;
  for (const auto& sample : model.expert_loads) {
    if (sample.scope != MOESCOPE_EXPERTS_LOCAL) continue;
    std::vector<int64_t>& counts = loads[{sample.rank, sample.step, sample.layer}];
    EXPECT_TRUE(counts.empty()) << "two LOCAL records for rank " << sample.rank << " step "
                                << sample.step << " layer " << sample.layer;
    for (uint32_t count : model.tokens(sample)) counts.push_back(count);
  }
  return loads;
}

std::string record_command(const std::string& output_pattern) {
  return shell_quote(build_dir() + "/bin/moescope") + " record -o " + shell_quote(output_pattern) +
         " -- ";
}

// moe_train on 2 Gloo ranks under `moescope record` (traces dir/run.<rank>.moetrace) with the
// small model every test here uses and `args` after it.
CommandResult record_two_rank_moe_train(const std::string& dir, const std::string& args) {
  const int port = free_port_pair();
  const std::string command =
      record_command(dir + "/run.%r.moetrace") +
      "env OMP_NUM_THREADS=1 python3 -m torch.distributed.run --no-python --nproc_per_node 2 "
      "--master_addr 127.0.0.1 --master_port " +
      std::to_string(port) + " " + shell_quote(build_dir() + "/bin/moe_train") +
      " --threads 1 --layers 2 --hidden 32 --heads 4 --ffn-hidden 64 --experts 4 --top-k 2 " + args;
  return run_shell("timeout 300 " + command);
}

TEST(RecordedSamplesTest, MoeTrainOnTwoRanksTraceHoldsStepsAndThePrintedExpertLoad) {
  const std::string dir = fresh_dir("recorded_moe_train");
  CommandResult run = record_two_rank_moe_train(
      dir, "--batch 4 --seq-len 16 --steps 4 --gate-skew 2 --skew-layer 1 --print-expert-load");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto printed = parse_expert_load_lines(run.output);
  ASSERT_EQ(printed.size(), 2u * 4u * 2u) << run.output;  // ranks x steps x layers

  // One trace per rank (the torchrun launcher writes its own "norank" trace beside them).
  const std::vector<std::string> traces = glob_files(dir + "/run.[0-9]*.moetrace");
  ASSERT_EQ(traces.size(), 2u) << run.output;
  analysis::TraceModel model = analysis::load_traces(traces);
  for (const auto& error : model.errors) ADD_FAILURE() << error.message;
  ASSERT_EQ(model.processes.size(), 2u);
  std::set<int32_t> ranks;
  for (const auto& process : model.processes) {
    ranks.insert(process.rank);
    EXPECT_TRUE(process.complete) << process.file;
    std::vector<int64_t> steps;
    for (const auto& marker : process.step_markers) steps.push_back(marker.step);
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3})) << process.file;
    // Each MoE layer forward is one span per phase: the runtime's range reaches the trace once
    // although moescope's NVTX injection is listening too.
    std::map<std::string, int> phase_spans;
    for (const auto& thread : process.threads) {
      for (const auto& span : thread.spans) {
        const std::string& name = model.name(span.name);
        if (name.starts_with("moe.")) ++phase_spans[name];
      }
    }
    for (const char* phase : {"moe.layer", "moe.route", "moe.dispatch_a2a", "moe.combine_a2a"}) {
      EXPECT_EQ(phase_spans[phase], 4 * 2) << phase << " in " << process.file;  // steps x layers
    }
  }
  EXPECT_EQ(ranks, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(model.step_source, analysis::StepSource::kMarkers);
  EXPECT_EQ(local_loads_in(model), printed);

  // Each layer forward's expert compute and dispatch, with the rows its rank received: one per
  // rank, step and layer, the layers in forward order, each inside its step.
  const std::vector<analysis::LayerForwardSample> forwards = analysis::layer_forward_samples(model);
  ASSERT_EQ(forwards.size(), 2u * 4u * 2u);
  for (size_t i = 0; i < forwards.size(); ++i) {
    const analysis::LayerForwardSample& sample = forwards[i];
    EXPECT_EQ(sample.layer, uint32_t(i % 2)) << i;
    EXPECT_EQ(sample.rank, int32_t(i / 2 % 2)) << i;
    EXPECT_EQ(sample.step, int64_t(i / 4)) << i;
    EXPECT_GE(sample.rows, 0) << i;  // the skewed layer may send a rank nothing
    EXPECT_GT(sample.experts_ms, 0) << i;
    EXPECT_LT(sample.experts_ms, 10'000) << i;
    EXPECT_GT(sample.dispatch_ms, 0) << i;  // two ranks: every forward's rows travel
    EXPECT_LT(sample.dispatch_ms, 10'000) << i;
    EXPECT_GE(sample.between_all_to_alls_ms, sample.experts_ms) << i;  // the experts run between
    EXPECT_LT(sample.between_all_to_alls_ms, 10'000) << i;
  }
}

// The runtime's rebalancer decides on the cost rule with what it measured on this run, and
// every decision reaches the trace with its numbers: the same on both ranks (the fits are
// all-reduced), the net equal to gain - replica sync - migration / window, applied exactly when
// the rule says it pays; `moescope report` words them.
TEST(RecordedSamplesTest, MoeTrainRecordsEachRebalanceDecisionWithItsNumbers) {
  const std::string dir = fresh_dir("recorded_rebalance");
  CommandResult run = record_two_rank_moe_train(
      dir, "--batch 8 --seq-len 32 --steps 24 --gate-skew 4 --skew-layer 1 --rebalance-every 8");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> traces = glob_files(dir + "/run.[0-9]*.moetrace");
  ASSERT_EQ(traces.size(), 2u) << run.output;
  analysis::TraceModel model = analysis::load_traces(traces);
  for (const auto& error : model.errors) ADD_FAILURE() << error.message;
  // Steps 7, 15, 23 x 2 layers x 2 ranks.
  ASSERT_EQ(model.rebalances.size(), 12u) << run.output;
  // The expert cost is measured per layer: its work between its all-to-alls (forward and
  // backward) against its rows, which costs more per row than the experts' forward alone.
  const analysis::ExpertCostModel cost = analysis::fit_expert_cost(model, 1);
  EXPECT_TRUE(cost.between_all_to_alls) << cost.problem;
  EXPECT_EQ(cost.samples, 23u * 2u * 2u);  // steps after the first x layers x ranks
  EXPECT_GT(cost.forward_ms_per_row, 0);
  EXPECT_GT(cost.ms_per_row, cost.forward_ms_per_row);
  std::map<std::pair<int64_t, uint32_t>, const analysis::RebalanceDecision*> first_rank;
  for (const analysis::RebalanceDecision& d : model.rebalances) {
    SCOPED_TRACE("step " + std::to_string(d.step) + " layer " + std::to_string(d.layer) + " rank " +
                 std::to_string(d.rank));
    ASSERT_TRUE(d.has_costs);
    EXPECT_EQ(d.window_steps, 8.0f);
    EXPECT_LE(d.busiest_rows_after, d.busiest_rows_before);
    EXPECT_GE(d.net_stderr_ms, 0.0f);
    EXPECT_NEAR(d.net_ms, d.gain_ms - d.replica_sync_ms - d.migration_ms / d.window_steps,
                1e-3 + 1e-4 * std::abs(d.gain_ms));
    if (d.reason == MOESCOPE_REBALANCE_BALANCED) {
      EXPECT_EQ(d.busiest_rows_after, d.busiest_rows_before);  // not planned
    } else {
      EXPECT_TRUE(d.reason >= MOESCOPE_REBALANCE_PAYS && d.reason <= MOESCOPE_REBALANCE_NO_MOVE)
          << d.reason;
    }
    EXPECT_EQ(d.applied, d.reason == MOESCOPE_REBALANCE_PAYS);
    if (d.applied) {
      EXPECT_GT(d.net_ms - 1.96f * d.net_stderr_ms, 0.0f);
    }
    if (d.reason == MOESCOPE_REBALANCE_COSTS_EXCEED_GAIN) {
      EXPECT_LE(d.net_ms, 0.0f);
    }
    auto [other, inserted] = first_rank.try_emplace({d.step, d.layer}, &d);
    if (!inserted) {  // the other rank took the same decision on the same numbers
      EXPECT_EQ(other->second->applied, d.applied);
      EXPECT_EQ(other->second->reason, d.reason);
      EXPECT_FLOAT_EQ(other->second->gain_ms, d.gain_ms);
      EXPECT_FLOAT_EQ(other->second->net_ms, d.net_ms);
    }
  }
  // The skewed layer (1: experts 0 and 1, both on rank 0, take most rows) was planned for at
  // its first decision: a move that takes rows off the busiest rank, without replicas (no
  // redundant slots), so no replica sync.
  const analysis::RebalanceDecision* skewed = first_rank.at({7, 1});
  EXPECT_NE(skewed->reason, MOESCOPE_REBALANCE_BALANCED);
  EXPECT_LT(skewed->busiest_rows_after, skewed->busiest_rows_before);
  EXPECT_GT(skewed->gain_ms, 0.0f);
  EXPECT_EQ(skewed->replica_sync_ms, 0.0f);
  EXPECT_GT(skewed->migration_ms, 0.0f);

  const CommandResult report = run_shell(shell_quote(build_dir() + "/bin/moescope") + " report " +
                                         shell_quote(traces[0]) + " " + shell_quote(traces[1]));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("rebalance at step 7 layer 1: "), std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find(" ms/step + migration "), std::string::npos) << report.output;
}

TEST(RecordedSamplesTest, PythonSampleTraceHoldsThePrintedExpertLoad) {
  const std::string dir = fresh_dir("recorded_python");
  const std::string command = record_command(dir + "/py.%r.moetrace") + "python3 " +
                              shell_quote(source_dir() + "/samples/python/train_moe.py") +
                              " --steps 3 --layers 2 --experts 4 --gate-skew 2 --print-expert-load";
  CommandResult run = run_shell("timeout 300 " + command);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("recording"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("not recording"), std::string::npos) << run.output;
  const auto printed = parse_expert_load_lines(run.output);
  ASSERT_EQ(printed.size(), 3u * 2u) << run.output;

  const std::vector<std::string> traces = glob_files(dir + "/py.*.moetrace");
  ASSERT_EQ(traces.size(), 1u) << run.output;
  analysis::TraceModel model = analysis::load_traces(traces);
  for (const auto& error : model.errors) ADD_FAILURE() << error.message;
  ASSERT_EQ(model.processes.size(), 1u);
  std::vector<int64_t> steps;
  for (const auto& marker : model.processes[0].step_markers) steps.push_back(marker.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(local_loads_in(model), printed);
}

}  // namespace
}  // namespace moescope::samples_test

// The bottleneck rules as one object over a run's analyses, each rule a member that adds the
// findings it sees (thresholds in findings.h, explanations in docs/analysis.md). The rules live
// by family: rank_findings.cpp (time and memory per rank), expert_findings.cpp (routing and
// numerics); findings.cpp holds the common part and runs them all.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/findings.h"

namespace moescope::analysis {

// The steps a run covers, over every rank (-1 when it has none).
struct StepRange {
  int64_t first = -1, last = -1;
};

class FindingRules {
 public:
  // `expert_ms`: expert time per step of each process, when the caller computed it (else null).
  FindingRules(const TraceModel& model, const TimeBreakdown& breakdown,
               const ExpertLoadAnalysis& experts, const std::vector<RankMemory>& memory,
               const FindingThresholds& thresholds, const std::vector<double>* expert_ms);

  // Every rule's findings, largest estimated cost first.
  std::vector<Finding> run();

 private:
  // A finding of `kind` over the whole run; `threatens_run`: the finding endangers the run
  // itself (see severity_of).
  Finding& add(const char* kind, double est_ms, bool threatens_run = false);
  // A finding about one rank, from its mean step `mean`: where it is and its timeline process.
  Finding& add_for_rank(const char* kind, const StepBreakdown& mean, double est_ms);
  // A `kind` finding for each rank that loses enough of its mean step to `lost_ms` (by `min_ms`
  // and `share`, as worth_a_finding), costing that; `describe(finding, mean, percent)` writes
  // what it says, `percent` being the share of the rank's step lost.
  template <typename Describe>
  void add_for_ranks_losing(const char* kind, double StepBreakdown::*lost_ms, double min_ms,
                            double share, Describe describe);
  // A finding about `experts` of one layer, over the steps the layer was seen in.
  Finding& add_for_layer(const char* kind, const LayerLoad& layer,
                         const std::vector<uint32_t>& experts, double est_ms,
                         bool threatens_run = false);
  // Whether `ms` per step is worth a finding: at least `min_ms` and the `share` of `of_ms` (a
  // NaN is, so that it shows).
  static bool worth_a_finding(double ms, double min_ms, double share, double of_ms);
  // The median over ranks of each rank's mean step time (ms).
  double mean_step_ms() const;

  // rank_findings.cpp
  void straggler_rank();
  void exposed_communication();
  void host_sync_stall();
  void launch_bound();
  void memory_pressure();
  void allocation_churn();
  // expert_findings.cpp
  void expert_imbalance();
  void token_dropping();
  void dead_experts();
  void router_collapse();
  void nan_inf();

  const TraceModel& model_;
  const TimeBreakdown& breakdown_;
  const ExpertLoadAnalysis& experts_;
  const std::vector<RankMemory>& memory_;
  const FindingThresholds& limits_;
  const std::vector<double>* expert_ms_;  // per process, when the caller computed it
  StepRange steps_;
  double reference_step_ms_ = 0;  // what step_share and the severity divide by
  std::vector<StepBreakdown> means_;
  std::vector<Finding> findings_;
};

}  // namespace moescope::analysis

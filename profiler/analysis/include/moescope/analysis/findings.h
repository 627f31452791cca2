// Bottleneck findings: rules over the analyses, each with kind, severity, where, evidence, a
// suggestion and the estimated time lost per step, linked cause to effect and ranked by root
// cause (finding_links.h). The thresholds are FindingThresholds below; docs/analysis.md
// explains each rule.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// How much a finding matters, from the share of the step it costs (est_ms_per_step / the
// median of the ranks' mean step time): critical from kCriticalStepShare, warning from
// kWarningStepShare, info below. A finding that threatens the run itself rather than its speed
// (non-finite values, router collapse, memory at >= 97% of capacity, >= 10% of tokens
// dropped) is critical whatever it costs in time. docs/analysis.md states the same.
enum class Severity : uint8_t { kInfo = 0, kWarning = 1, kCritical = 2 };
inline constexpr double kCriticalStepShare = 0.25;
inline constexpr double kWarningStepShare = 0.05;
// `step_ms` <= 0 (no step known) counts the share as 0.
Severity severity_of(double est_ms_per_step, double step_ms, bool threatens_run = false);
// "critical", "warning", "info": the words `moescope report` (text, markdown, JSON) and the
// viewer all use.
const char* severity_name(Severity severity);

struct FindingWhere {
  std::vector<int32_t> ranks;  // empty = every rank
  int32_t layer = -1;          // -1 = not layer specific
  int64_t first_step = -1, last_step = -1;
  std::vector<uint32_t> experts;
};

struct Finding {
  std::string kind;  // expert_imbalance, straggler_rank, ... (see docs/analysis.md)
  Severity severity = Severity::kWarning;
  double est_ms_per_step = 0;
  double step_share = 0;  // est_ms_per_step / the reference step time (0 when unknown)
  FindingWhere where;
  std::string evidence;                                 // one sentence with the numbers
  std::vector<std::pair<std::string, double>> metrics;  // the numbers, by name
  std::string suggestion;
  // Where to look in the timeline: a process index (-1 = all) and an interval.
  int32_t process = -1;
  TimeNs start = 0, end = 0;
  // Causal links (finding_links.h): `id` is the finding's 1-based position in the ranked list;
  // `explains` / `explained_by` hold the ids of the findings this one causes / is caused by.
  int32_t id = 0;
  std::vector<int32_t> explains, explained_by;
  // How the finding links to the others, one sentence ("" when it stands alone), e.g. "rank 0
  // hosts experts 1, 2 (placement seen in the received rows): explains #2".
  std::string chain;
};

struct FindingThresholds {
  double imbalance_max_over_mean = 1.5;  // expert_imbalance
  // ... and only when a chi-square test of the run's tokens per expert rejects uniform
  // routing at this level (docs/analysis.md).
  double imbalance_significance = 1e-3;
  double straggler_excess = 0.10;  // busy time over the others' median
  double straggler_min_ms = 0.5;
  double exposed_comm_share = 0.10;  // of the step
  double exposed_comm_min_ms = 0.5;
  double host_sync_share = 0.02;
  double host_sync_min_ms = 0.2;
  double launch_gap_share = 0.10;
  double launch_gap_min_ms = 0.5;
  double memory_pressure_share = 0.90;  // of device capacity
  double memory_critical_share = 0.97;  // threatens the run (out of memory)
  double churn_allocations_per_step = 50;
  double allocation_cost_ms = 0.01;  // assumed cost of one allocation + free
  double dropped_fraction = 0.01;
  double dropped_critical_fraction = 0.10;  // threatens the run (quality)
  double collapse_effective_share = 0.25;   // effective experts / experts at the last step
  double collapse_entropy_ratio = 0.5;      // last / first router entropy
};

// The rank a finding is about: its only rank, else the rank of its process, else -1 (all).
int32_t finding_rank(const TraceModel& model, const Finding& finding);

// Every rule. The causal links between the findings and the ranking by root cause come after,
// once every finding is in (link_findings in finding_links.h: report and diff call it).
std::vector<Finding> find_bottlenecks(const TraceModel& model, const TimeBreakdown& breakdown,
                                      const ExpertLoadAnalysis& experts,
                                      const std::vector<RankMemory>& memory,
                                      const FindingThresholds& thresholds = {},
                                      const std::vector<double>* expert_ms_per_process = nullptr);

// Mean time per step of expert computation on one rank: GPU kernels named *expert* (not
// shared experts), else CPU spans named *experts*. find_bottlenecks computes it per process
// unless given (the summary path reads it from each rank's summary).
double expert_ms_per_step(const TraceModel& model, const ProcessTrack& process);

}  // namespace moescope::analysis

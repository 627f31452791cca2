// The bottleneck report: every analysis over a model, rendered as text, markdown or JSON.
// JSON shape: {"summary": {...}, "capture_gaps": [...], "phases": [...per rank...],
// "breakdown": [...per rank...], "step_spread": [...],
// "expert_load": [{"layer", "max_over_mean", "cv", "utilization", "hot_experts",
// "dead_experts", "tokens", "by_rank", ...}], "expert_load_percentiles": {...},
// "communication": {"all_to_all", "ops", "wait_transfer"}, "memory": [...], "cross_rank":
// {"steps", "ranks", "busy_ms", "waited_for_ms", "onsets", "hosts"}, "findings": [{"id", "kind",
// "severity", "est_ms_per_step", "step_share", "where", "evidence", "metrics", "suggestion",
// "explains", "explained_by", "chain"}], "errors": [...]}.
// docs/analysis.md lists every field; the viewer's panels show the same numbers.
#pragma once

#include <string>
#include <vector>

#include "moescope/analysis/collective_wait.h"
#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/cross_rank.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/findings.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/run_phases.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct ReportSummary {
  size_t ranks = 0;
  uint64_t events = 0;
  double duration_ms = 0;
  size_t steps = 0;  // steps of the rank with the most
  double mean_step_ms = 0;
  std::string step_source;
  std::string clock_alignment;
  std::vector<HostClock> host_clocks;  // several hosts: each but the first, with its error bound
  size_t errors = 0;
  InferenceSummary inference;  // inference.inference: forward passes and tokens, not steps
};

// One rank's view of the expert load (the viewer's rank filter).
struct RankExpertLoad {
  int32_t rank = 0;
  ExpertLoadMatrix tokens;
  ExpertLoadAnalysis load;
};

// Each rank's expert load (ranks with expert-load samples, ascending), analysed from that rank's
// samples alone (O(samples) in all, on every core).
std::vector<RankExpertLoad> expert_load_by_rank(const TraceModel& model);

struct Report {
  ReportSummary summary;
  TimeBreakdown breakdown;
  ExpertLoadAnalysis expert_load;
  ExpertLoadMatrix expert_tokens;                   // every rank, every step
  std::vector<RankExpertLoad> expert_load_by_rank;  // ranks with expert-load samples
  CommAnalysis communication;
  CollectiveWaits collective_waits;  // wait vs transfer inside each collective
  std::vector<RankMemory> memory;
  std::vector<Finding> findings;
  PhaseBreakdown phases;  // forward / backward / recompute / optimizer / other per step
  // What the capture could not record, from the trace's notes (domain "moescope"), e.g.
  // "expert load not captured inside torch.compile regions (...)"; each text once.
  std::vector<std::string> capture_gaps;
  CrossRankAnalysis cross_rank;  // straggler map, slowdown onsets, hosts
};

Report build_report(const TraceModel& model, const FindingThresholds& thresholds = {});
// The same from per-rank facts (rank_facts.h), one per process of `model`: the full-trace path
// computes them from the events; the summary path (rank_summary.h) reads them, with a `model`
// that holds only what summaries keep (steps, collectives, expert-load samples, hosts).
Report build_report(const TraceModel& model, const std::vector<RankFacts>& facts,
                    const FindingThresholds& thresholds = {});

enum class ReportFormat { kText, kMarkdown, kJson };
// Parses "text" / "markdown" / "json"; false when it is none of them.
bool parse_report_format(const std::string& name, ReportFormat& format);

std::string render_report(const TraceModel& model, const Report& report, ReportFormat format);

}  // namespace moescope::analysis

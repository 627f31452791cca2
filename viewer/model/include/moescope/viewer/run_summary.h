// The first screen's summary of a trace: where the step time goes (the report's breakdown,
// mean per step), the root-cause chain (the first finding and every finding it explains, with
// the time attributed) and the expert heatmap's hottest cell. Built from analysis::Report, so
// the numbers are `moescope report --format json`'s; each part names the finding a click on it
// selects. No ImGui here: tests check the numbers directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/report.h"

namespace moescope::viewer {

// A finding of the root-cause chain, in chain order (the root first).
struct SummaryChainEntry {
  int finding = -1;                   // index into the report's findings
  int32_t id = 0;                     // 1-based rank in the report
  std::string kind, severity, where;  // where: "layer 1, experts 1,2", "rank 0", ""
  double est_ms_per_step = 0;
  std::vector<int32_t> explains;  // ids of the findings it explains
  int depth = 0;                  // 0 = the root; 1 = explained by the root; ...
};

// The heatmap's hottest cell (most tokens over every rank and step) and its share of the
// layer's tokens.
struct SummaryHotCell {
  bool present = false;
  uint32_t layer = 0;
  int expert = 0;
  double tokens = 0, share = 0;
  int finding = -1;  // the expert_imbalance finding of that layer, when there is one
};

struct RunSummary {
  // Per step: the mean over the ranks (rank -1), and each rank's (the report's
  // breakdown[].mean_per_step, report order).
  analysis::StepBreakdown mean;
  std::vector<analysis::StepBreakdown> ranks;
  int exposed_communication_finding = -1;  // what a click on a breakdown part selects
  int idle_finding = -1;
  std::vector<SummaryChainEntry> chain;
  size_t other_findings = 0;  // findings outside the chain
  SummaryHotCell hottest;
};

RunSummary summarize_run(const analysis::Report& report);

// "layer 1, experts 1,2", "rank 0", "ranks 0,3", "" for everywhere.
std::string describe_where(const analysis::FindingWhere& where);

}  // namespace moescope::viewer

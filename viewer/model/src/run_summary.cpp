#include "moescope/viewer/run_summary.h"

#include <algorithm>
#include <deque>
#include <set>

#include "moescope/analysis/statistics.h"

namespace moescope::viewer {

namespace {

std::string joined(const std::vector<uint32_t>& numbers) {
  std::string text;
  for (uint32_t number : numbers) text += (text.empty() ? "" : ",") + std::to_string(number);
  return text;
}

int first_of_kind(const std::vector<analysis::Finding>& findings,
                  std::initializer_list<const char*> kinds) {
  for (const char* kind : kinds) {
    for (size_t i = 0; i < findings.size(); ++i) {
      if (findings[i].kind == kind) return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

std::string describe_where(const analysis::FindingWhere& where) {
  std::string text;
  if (where.layer >= 0) text = "layer " + std::to_string(where.layer);
  if (!where.experts.empty()) {
    text += (text.empty() ? "" : ", ") +
            std::string(where.experts.size() == 1 ? "expert " : "experts ") + joined(where.experts);
  }
  if (!where.ranks.empty()) {
    std::vector<uint32_t> ranks(where.ranks.begin(), where.ranks.end());
    text += (text.empty() ? "" : ", ") + std::string(ranks.size() == 1 ? "rank " : "ranks ") +
            joined(ranks);
  }
  return text;
}

RunSummary summarize_run(const analysis::Report& report) {
  RunSummary summary;
  const auto& findings = report.findings;
  for (const analysis::RankBreakdown& rank : report.breakdown.ranks) {
    summary.ranks.push_back(rank.mean());
  }
  summary.mean = report.breakdown.mean_over_ranks();
  summary.exposed_communication_finding = first_of_kind(findings, {"exposed_communication"});
  summary.idle_finding = first_of_kind(findings, {"launch_bound", "host_sync_stall"});

  // The chain: the first finding (ranked by root cause) and, breadth first, what it explains.
  if (!findings.empty()) {
    std::set<int32_t> seen;
    std::deque<std::pair<int, int>> queue{{0, 0}};  // (finding index, depth)
    while (!queue.empty()) {
      const auto [index, depth] = queue.front();
      queue.pop_front();
      const analysis::Finding& finding = findings[static_cast<size_t>(index)];
      if (!seen.insert(index).second) continue;
      SummaryChainEntry entry;
      entry.finding = index;
      entry.id = finding.id > 0 ? finding.id : index + 1;
      entry.kind = finding.kind;
      entry.severity = analysis::severity_name(finding.severity);
      entry.where = describe_where(finding.where);
      entry.est_ms_per_step = finding.est_ms_per_step;
      entry.explains = finding.explains;
      entry.depth = depth;
      summary.chain.push_back(std::move(entry));
      for (int32_t id : finding.explains) {
        if (id >= 1 && static_cast<size_t>(id) <= findings.size())
          queue.push_back({id - 1, depth + 1});
      }
    }
    summary.other_findings = findings.size() - summary.chain.size();
  }

  // The hottest cell: what the heatmap of every rank and step draws in its hottest colour.
  const analysis::ExpertLoadMatrix& tokens = report.expert_tokens;
  for (int row = 0; row < tokens.num_layers(); ++row) {
    for (int expert = 0; expert < tokens.num_experts; ++expert) {
      const double value = tokens.at(row, expert);
      if (summary.hottest.present && value <= summary.hottest.tokens) continue;
      summary.hottest.present = true;
      summary.hottest.layer = tokens.layer_ids[static_cast<size_t>(row)];
      summary.hottest.expert = expert;
      summary.hottest.tokens = value;
      summary.hottest.share = analysis::share(value, tokens.layer_total(row));
    }
  }
  if (summary.hottest.present) {
    for (size_t i = 0; i < findings.size(); ++i) {
      if (findings[i].kind == "expert_imbalance" &&
          findings[i].where.layer == static_cast<int32_t>(summary.hottest.layer)) {
        summary.hottest.finding = static_cast<int>(i);
        break;
      }
    }
  }
  return summary;
}

}  // namespace moescope::viewer

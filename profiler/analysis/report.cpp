// Builds the report from a model (every analysis, the findings linked) and picks its renderer.
#include "moescope/analysis/report.h"

#include <algorithm>
#include <set>

#include "moescope/analysis/finding_links.h"
#include "report_renderers.h"

namespace moescope::analysis {

Report build_report(const TraceModel& model, const FindingThresholds& thresholds) {
  return build_report(model, compute_rank_facts(model), thresholds);
}

Report build_report(const TraceModel& model, const std::vector<RankFacts>& facts,
                    const FindingThresholds& thresholds) {
  Report report;
  std::vector<RankPhases> phases;
  std::vector<double> expert_ms;
  for (const RankFacts& rank : facts) {
    phases.push_back(rank.phases);
    report.memory.push_back(rank.memory);
    expert_ms.push_back(rank.expert_ms_per_step);
  }
  report.breakdown = time_breakdown_of_facts(facts);
  report.expert_load = analyze_expert_load(model);
  report.expert_tokens = expert_load_matrix(model);
  report.expert_load_by_rank = expert_load_by_rank(model);
  report.communication = analyze_communication(model);
  report.collective_waits = analyze_collective_waits(model);
  report.findings = find_bottlenecks(model, report.breakdown, report.expert_load, report.memory,
                                     thresholds, &expert_ms);
  add_cross_rank_findings(model, report.breakdown, report.findings, &report.cross_rank);
  // Linked once every finding is in: ids, causes and the ranking cover the cross-rank ones too.
  link_findings(model, report.breakdown, report.collective_waits, report.findings);
  ReportSummary& s = report.summary;
  s.ranks = model.processes.size();
  s.events = model.total_events;
  s.duration_ms = double(model.end - model.begin) * 1e-6;
  double step_sum = 0;
  size_t step_count = 0;
  for (const auto& process : model.processes) {
    s.steps = std::max(s.steps, process.steps.size());
    for (const auto& step : process.steps) step_sum += double(step.duration()) * 1e-6, ++step_count;
  }
  s.mean_step_ms = step_count ? step_sum / double(step_count) : 0.0;
  s.step_source = step_source_name(model.step_source);
  s.clock_alignment = clock_alignment_method_name(model.clock_alignment);
  s.host_clocks = model.host_clocks;
  s.errors = model.errors.size();
  s.inference = inference_from_facts(model, facts);
  report.phases = phase_breakdown_of(std::move(phases));
  std::set<std::string> seen_gaps;
  for (const RankFacts& rank : facts) {
    for (const std::string& gap : rank.capture_gaps) {
      if (seen_gaps.insert(gap).second) report.capture_gaps.push_back(gap);
    }
  }
  return report;
}

bool parse_report_format(const std::string& name, ReportFormat& format) {
  if (name == "text") return format = ReportFormat::kText, true;
  if (name == "markdown" || name == "md") return format = ReportFormat::kMarkdown, true;
  if (name == "json") return format = ReportFormat::kJson, true;
  return false;
}

std::string render_report(const TraceModel& model, const Report& report, ReportFormat format) {
  switch (format) {
    case ReportFormat::kJson:
      return render_report_json(model, report);
    case ReportFormat::kMarkdown:
      return render_report_text(model, report, true);
    case ReportFormat::kText:
      break;
  }
  return render_report_text(model, report, false);
}

}  // namespace moescope::analysis

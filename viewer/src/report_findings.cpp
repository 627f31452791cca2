#include "report_findings.h"

#include "moescope/profiler/report.h"

namespace moescope::viewer {

namespace {

const char* severity_label(analysis::Severity severity) {
  switch (severity) {
    case analysis::Severity::kCritical:
      return "high";
    case analysis::Severity::kWarning:
      return "medium";
    default:
      return "low";
  }
}

}  // namespace

std::vector<ViewerFinding> compute_viewer_findings(const analysis::TraceModel& model) {
  std::vector<ViewerFinding> rows;
  analysis::Report report = analysis::build_report(model);
  for (const analysis::Finding& finding : report.findings) {
    ViewerFinding row;
    row.kind = finding.kind;
    row.severity = severity_label(finding.severity);
    row.est_ms_per_step = finding.est_ms_per_step;
    row.evidence = finding.evidence;
    row.suggestion = finding.suggestion;
    row.title = finding.evidence;
    if (finding.where.ranks.size() == 1) {
      row.rank = finding.where.ranks.front();
    } else if (finding.process >= 0 &&
               static_cast<size_t>(finding.process) < model.processes.size()) {
      row.rank = model.processes[static_cast<size_t>(finding.process)].rank;
    }
    row.layer = finding.where.layer;
    if (!finding.where.experts.empty())
      row.expert = static_cast<int32_t>(finding.where.experts.front());
    row.step_first = finding.where.first_step;
    row.step_last = finding.where.last_step;
    row.time_begin = finding.start;
    row.time_end = finding.end;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace moescope::viewer

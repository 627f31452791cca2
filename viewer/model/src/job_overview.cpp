#include "moescope/viewer/job_overview.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>

#include "moescope/analysis/cross_rank.h"
#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/statistics.h"
#include "moescope/analysis/summary_load.h"

namespace moescope::viewer {
namespace {

namespace fs = std::filesystem;

// The rows and columns of the straggler map, plus what a click needs of each rank.
void fill_from_map(const analysis::SummaryLoad& load, const analysis::CrossRankAnalysis& cross,
                   JobOverview& overview) {
  const analysis::StragglerMap& map = cross.map;
  overview.steps = map.steps;
  overview.busy_ms = map.busy_ms;
  overview.waited_for_ms = map.waited_for_ms;
  const size_t columns = map.steps.size();
  for (size_t r = 0; r < map.ranks.size(); ++r) {
    const analysis::ProcessTrack& process = load.model.processes[r];
    OverviewRow row;
    row.rank = map.ranks[r];
    row.host = process.host;
    std::error_code error;
    if (fs::is_regular_file(process.file, error)) row.trace = process.file;
    row.mean_busy_ms = analysis::mean({map.busy_ms.data() + r * columns, columns});
    row.mean_waited_for_ms = analysis::mean({map.waited_for_ms.data() + r * columns, columns});
    for (const analysis::StepInterval& step : process.steps) {
      row.step_numbers.push_back(step.step);
      row.step_starts.push_back(step.start);
      row.step_ends.push_back(step.end);
    }
    row.clock_offset = process.clock_offset;
    row.events = process.events;
    row.begin = process.begin;
    row.end = process.end;
    overview.rows.push_back(std::move(row));
  }
  for (const analysis::SlowdownOnset& onset : cross.onsets) {
    const int row = overview.row_of_rank(onset.rank);
    if (row >= 0 && overview.rows[row].onset_step < 0) {
      overview.rows[row].onset_step = onset.step;
      overview.rows[row].slowdown = onset.slowdown;
    }
  }
}

// Colour scales of heat(): each step's median busy time, the spread of busy / median, and the
// largest waited-for time.
void fill_scales(const analysis::TimeBreakdown& breakdown, JobOverview& overview) {
  for (const analysis::StepSpread& spread : breakdown.spread) {
    overview.step_median_busy_ms.push_back(spread.median_busy_ms);
  }
  overview.step_median_busy_ms.resize(overview.steps.size(), 0.0);
  bool first = true;
  for (size_t r = 0; r < overview.rows.size(); ++r) {
    for (size_t s = 0; s < overview.steps.size(); ++s) {
      const double median = overview.step_median_busy_ms[s];
      if (median > 0) {
        const double ratio = overview.value(OverviewMetric::kBusy, r, s) / median;
        overview.min_busy_ratio = first ? ratio : std::min(overview.min_busy_ratio, ratio);
        overview.max_busy_ratio = first ? ratio : std::max(overview.max_busy_ratio, ratio);
        first = false;
      }
      overview.max_waited_for_ms =
          std::max(overview.max_waited_for_ms, overview.value(OverviewMetric::kWaitedFor, r, s));
    }
  }
}

}  // namespace

double JobOverview::heat(OverviewMetric metric, size_t row, size_t step) const {
  const double v = value(metric, row, step);
  if (metric == OverviewMetric::kWaitedFor) {
    return max_waited_for_ms > 0 ? std::clamp(v / max_waited_for_ms, 0.0, 1.0) : 0.0;
  }
  const double median = step < step_median_busy_ms.size() ? step_median_busy_ms[step] : 0.0;
  const double spread = max_busy_ratio - min_busy_ratio;
  if (median <= 0 || spread <= 0) return 0.0;
  return std::clamp((v / median - min_busy_ratio) / spread, 0.0, 1.0);
}

int JobOverview::row_of_rank(int32_t rank) const {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].rank == rank) return static_cast<int>(i);
  }
  return -1;
}

ViewerInputs expand_viewer_inputs(const std::vector<std::string>& inputs) {
  ViewerInputs expanded;
  std::vector<std::string> traces;
  for (const std::string& input : inputs) {
    std::error_code code;
    if (!fs::is_directory(input, code)) {
      (analysis::is_summary_path(input) ? expanded.summaries : traces).push_back(input);
      continue;
    }
    try {
      const std::vector<std::string> summaries =
          analysis::files_in_folder(input, analysis::is_summary_path);
      if (!summaries.empty()) {
        expanded.summaries.insert(expanded.summaries.end(), summaries.begin(), summaries.end());
        continue;
      }
      const std::vector<std::string> found = analysis::recorded_trace_files({input});
      traces.insert(traces.end(), found.begin(), found.end());
    } catch (const analysis::UnlistableFolder& failure) {
      expanded.error = failure.what();
      return expanded;
    } catch (const std::exception&) {
      expanded.error = input +
                       " holds no .moesummary, .moetrace or PyTorch profiler .json/.json.gz file "
                       "(record with `moescope record`, or write summaries with "
                       "`moescope summarize`)";
      return expanded;
    }
  }
  // Traces given with summaries join the overview, which summarises them on the fly.
  auto& destination = expanded.summaries.empty() ? expanded.traces : expanded.summaries;
  destination.insert(destination.end(), traces.begin(), traces.end());
  return expanded;
}

JobOverview load_job_overview(const std::vector<std::string>& summaries) try {
  JobOverview overview;
  overview.summaries = summaries.size();
  analysis::SummaryLoad load = analysis::load_rank_summaries(summaries);
  overview.notes = load.notes;
  if (!load.refused.empty()) {
    overview.error = load.refused;
    return overview;
  }
  if (load.needs_traces) {
    overview.error = "these summaries need their full traces (" +
                     (load.notes.empty() ? std::string("see the notes") : load.notes.back()) +
                     "): open the .moetrace files instead";
    return overview;
  }
  if (load.model.processes.empty()) {
    overview.error = "no rank could be read";
    for (size_t i = 0; i < load.model.errors.size() && i < 3; ++i) {
      overview.error += "\n" + load.model.errors[i].to_string();
    }
    return overview;
  }
  analysis::TimeBreakdown breakdown;
  std::vector<bool> has_steps;
  for (const analysis::RankFacts& facts : load.facts) {
    breakdown.ranks.push_back(facts.breakdown);
    has_steps.push_back(facts.has_steps);
  }
  breakdown.spread = analysis::compute_step_spread(breakdown.ranks, has_steps);
  analysis::CrossRankAnalysis cross;
  analysis::add_cross_rank_findings(load.model, breakdown, overview.findings, &cross);
  for (const analysis::Finding& finding : overview.findings) {
    overview.headlines.push_back(finding.evidence);
  }
  fill_from_map(load, cross, overview);
  fill_scales(breakdown, overview);
  if (overview.steps.empty()) {
    overview.error = "the ranks share no step (steps come from step markers or profiler steps)";
  }
  return overview;
} catch (const std::exception& failure) {
  JobOverview overview;
  overview.error = std::string("cannot read the summaries: ") + failure.what();
  return overview;
}

RowOrder order_overview_rows(const JobOverview& overview, OverviewOrder order) {
  const std::vector<OverviewRow>& rows = overview.rows;
  auto before = [&](size_t a, size_t b) {
    const OverviewRow& x = rows[a];
    const OverviewRow& y = rows[b];
    switch (order) {
      case OverviewOrder::kSlowestMean:
        if (x.mean_busy_ms != y.mean_busy_ms) return x.mean_busy_ms > y.mean_busy_ms;
        break;
      case OverviewOrder::kOnset:
        if ((x.onset_step >= 0) != (y.onset_step >= 0)) return x.onset_step >= 0;
        if (x.onset_step != y.onset_step) return x.onset_step < y.onset_step;
        if (x.slowdown != y.slowdown) return x.slowdown > y.slowdown;
        break;
      case OverviewOrder::kRank:
        break;
    }
    return x.rank < y.rank;
  };
  std::map<std::string, std::vector<size_t>> by_host;
  for (size_t i = 0; i < rows.size(); ++i) by_host[rows[i].host].push_back(i);
  std::vector<std::vector<size_t>> groups;
  for (auto& [host, members] : by_host) {
    std::sort(members.begin(), members.end(), before);
    groups.push_back(std::move(members));
  }
  std::sort(groups.begin(), groups.end(),
            [&](const std::vector<size_t>& a, const std::vector<size_t>& b) {
              return before(a.front(), b.front());
            });
  RowOrder result;
  for (const std::vector<size_t>& members : groups) {
    result.groups.push_back({rows[members.front()].host, result.rows.size(), members.size()});
    result.rows.insert(result.rows.end(), members.begin(), members.end());
  }
  return result;
}

}  // namespace moescope::viewer

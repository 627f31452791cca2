// The job overview: a rank x step heatmap of a whole job read from its rank summaries
// (`moescope summarize`; analysis/summary_load.h), with the cross-rank findings (slow rank and
// its onset, slow hosts; analysis/cross_rank.h) named above it. Memory grows with ranks x
// steps, never with events: the events of one rank are loaded only on a click (rank_detail.h).
// ImGui-free: the overview panel draws what this computes, and tests drive it without a window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/findings.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::viewer {

// What a cell shows: the rank's busy time in the step (step - exposed communication - idle),
// or the time the other ranks waited for it in the step's collectives (cross_rank.h).
enum class OverviewMetric { kBusy, kWaitedFor };
// Row order inside the host groups (and of the groups, by their first row).
enum class OverviewOrder { kRank, kSlowestMean, kOnset };

struct OverviewRow {
  int32_t rank = 0;
  std::string host;
  std::string trace;  // the rank's trace beside its summary ("" when there is none)
  double mean_busy_ms = 0, mean_waited_for_ms = 0;
  int64_t onset_step = -1;  // first slow step of a slowdown onset; -1 when none
  double slowdown = 0;      // of that onset (0.18 = 18% slower)
  // The rank's steps on the job's clock and its clock offset (to find a window in its trace).
  std::vector<int64_t> step_numbers;
  std::vector<analysis::TimeNs> step_starts, step_ends;
  analysis::TimeNs clock_offset = 0;
  uint64_t events = 0;                  // events of its trace
  analysis::TimeNs begin = 0, end = 0;  // its trace's time range (job clock)
};

struct JobOverview {
  std::vector<OverviewRow> rows;      // by rank
  std::vector<int64_t> steps;         // steps every rank has, ascending (the columns)
  std::vector<double> busy_ms;        // [rows x steps]
  std::vector<double> waited_for_ms;  // [rows x steps]
  // The cross-rank findings (slowdown_onset, slow_host), ranked, and one line each.
  std::vector<analysis::Finding> findings;
  std::vector<std::string> headlines;
  std::vector<std::string> notes;  // ranks read from their traces, and why
  std::string error;               // non-empty: nothing to show, and why
  size_t summaries = 0;

  double value(OverviewMetric metric, size_t row, size_t step) const {
    return (metric == OverviewMetric::kBusy ? busy_ms : waited_for_ms)[row * steps.size() + step];
  }
  // Colour value in [0, 1] of a cell (heat_colour): busy time relative to the step's median
  // across ranks, spread from the least to the most relative busy time of the job; waited-for
  // time from 0 to the job's largest.
  double heat(OverviewMetric metric, size_t row, size_t step) const;
  int row_of_rank(int32_t rank) const;

  // Filled by build_job_overview for heat().
  std::vector<double> step_median_busy_ms;
  double min_busy_ratio = 1, max_busy_ratio = 1, max_waited_for_ms = 0;
};

// The viewer's inputs with folders expanded (analysis/recorded_files.h). Rank summaries open
// the job overview: a folder holding .moesummary files stands for them, and trace files given
// with them join them. Otherwise everything is traces for the timeline: a folder stands for its
// .moetrace files, else for its PyTorch profiler traces (tensorboard_trace_handler's folder).
struct ViewerInputs {
  std::vector<std::string> summaries;  // not empty: open the job overview
  std::vector<std::string> traces;     // else: load these
  std::string error;                   // a folder with nothing to open
};
ViewerInputs expand_viewer_inputs(const std::vector<std::string>& inputs);

// Reads the summaries (traces without a summary are summarised on the fly, with a note) and
// computes the overview. Never throws: JobOverview::error says what was wrong.
JobOverview load_job_overview(const std::vector<std::string>& summaries);

// A host's rows in display order: rows [first, first + count) of RowOrder::rows.
struct HostGroup {
  std::string host;
  size_t first = 0, count = 0;
};
struct RowOrder {
  std::vector<size_t> rows;  // indices into JobOverview::rows, top to bottom
  std::vector<HostGroup> groups;
};

// Rows grouped by host. kRank: hosts by their lowest rank, rows by rank. kSlowestMean: rows by
// mean busy time (slowest first), hosts by their slowest row. kOnset: rows with an onset first
// (earliest onset step first, then the larger slowdown), then the others by rank; hosts by
// their first row.
RowOrder order_overview_rows(const JobOverview& overview, OverviewOrder order);

}  // namespace moescope::viewer

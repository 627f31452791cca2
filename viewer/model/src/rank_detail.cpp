#include "moescope/viewer/rank_detail.h"

#include <algorithm>
#include <chrono>

#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::viewer {
namespace {

// Margin over the proportional estimate: events are not spread evenly in time, and the reader
// stops at whole chunks, which each recorder thread writes every ~100 ms.
constexpr double kEstimateMargin = 1.25;
constexpr double kEstimateSlackShare = 0.05;  // of the rank's events

// Events of the rank's trace up to `until` (job clock), assuming a constant event rate.
uint64_t events_until(const OverviewRow& row, analysis::TimeNs until) {
  if (row.end <= row.begin || row.events == 0) return kDetailMaxEvents;
  const double fraction =
      std::clamp(double(until - row.begin) / double(row.end - row.begin), 0.0, 1.0);
  const double estimate = (fraction * kEstimateMargin + kEstimateSlackShare) * double(row.events);
  return uint64_t(std::min(estimate, double(kDetailMaxEvents)));
}

std::unique_ptr<LoadedTrace> read_detail(const DetailRequest& request, uint64_t max_events) {
  auto started = std::chrono::steady_clock::now();
  auto detail = std::make_unique<LoadedTrace>();
  detail->files = {request.trace};
  analysis::LoadOptions options;
  options.max_threads = 1;
  options.max_events_per_file = max_events;
  detail->model = analysis::load_traces(detail->files, options);
  detail->timeline = build_timeline_index(detail->model);
  detail->steps = analysis::known_steps(detail->model);
  detail->load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return detail;
}

bool has_step(const LoadedTrace& detail, int64_t step) {
  return std::binary_search(detail.steps.begin(), detail.steps.end(), step);
}

}  // namespace

DetailRequest detail_request_for(const JobOverview& overview, size_t row, size_t column) {
  DetailRequest request;
  if (row >= overview.rows.size() || column >= overview.steps.size()) {
    request.error = "no such cell";
    return request;
  }
  const OverviewRow& rank = overview.rows[row];
  request.rank = rank.rank;
  request.step = overview.steps[column];
  request.first_step = request.last_step = request.step;
  // The window: the rank's own steps around the clicked one.
  auto at = std::lower_bound(rank.step_numbers.begin(), rank.step_numbers.end(), request.step);
  size_t index = size_t(at - rank.step_numbers.begin());
  analysis::TimeNs window_end = rank.end;
  if (at != rank.step_numbers.end() && *at == request.step) {
    const size_t first = index >= size_t(kDetailStepsAround) ? index - kDetailStepsAround : 0;
    const size_t last = std::min(index + size_t(kDetailStepsAround), rank.step_numbers.size() - 1);
    request.first_step = rank.step_numbers[first];
    request.last_step = rank.step_numbers[last];
    window_end = rank.step_ends[last];
  }
  request.max_events = events_until(rank, window_end);
  if (rank.trace.empty()) {
    request.error = "rank " + std::to_string(rank.rank) +
                    ": no trace beside its summary, so only the overview is known";
    return request;
  }
  request.trace = rank.trace;
  return request;
}

std::unique_ptr<LoadedTrace> load_rank_detail(const DetailRequest& request) {
  std::unique_ptr<LoadedTrace> detail = read_detail(request, request.max_events);
  const bool stopped_early =
      std::any_of(detail->model.processes.begin(), detail->model.processes.end(),
                  [](const analysis::ProcessTrack& process) { return process.truncated; });
  if (stopped_early && !has_step(*detail, request.last_step) &&
      request.max_events < kDetailMaxEvents) {
    detail = read_detail(request, kDetailMaxEvents);
  }
  return detail;
}

bool detail_window_range(const LoadedTrace& detail, const DetailRequest& request, double& begin_ns,
                         double& end_ns) {
  bool found = false;
  for (const analysis::ProcessTrack& process : detail.model.processes) {
    for (const analysis::StepInterval& step : process.steps) {
      if (step.step < request.first_step || step.step > request.last_step) continue;
      begin_ns = found ? std::min(begin_ns, double(step.start)) : double(step.start);
      end_ns = found ? std::max(end_ns, double(step.end)) : double(step.end);
      found = true;
    }
  }
  return found;
}

}  // namespace moescope::viewer

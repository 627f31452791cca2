// The job overview tab (`moescope view` given rank summaries or a folder of them): the
// cross-rank findings above a rank x step heatmap (busy time, or time the others waited for the
// rank), rows grouped by host and sortable; a click on a cell loads that rank's detail for a
// window of steps (rank_detail.h) into the other panels. Draws what job_overview.h computes.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "moescope/viewer/job_overview.h"
#include "moescope/viewer/rank_detail.h"

namespace moescope::viewer {

class OverviewPanel {
 public:
  // Starts reading the summaries on a background thread.
  void open(std::vector<std::string> summaries);
  bool active() const { return !summaries_.empty(); }
  // Still reading the summaries, or a rank's detail.
  bool busy() const { return overview_loading_.valid() || detail_loading_.valid(); }
  // Takes finished work: call once per frame before drawing.
  void poll();
  void draw();
  // A rank's detail once loaded after a click (then null until the next one), and its request.
  std::unique_ptr<LoadedTrace> take_detail(DetailRequest& request);
  // Acts as a click on the cell of `rank` and `step` (screenshot mode, tests).
  bool click(int32_t rank, int64_t step);
  const JobOverview& overview() const { return overview_; }

 private:
  void draw_controls();
  void draw_heatmap();
  void request_detail(size_t row, size_t column);

  std::vector<std::string> summaries_;
  std::future<JobOverview> overview_loading_;
  double load_started_ = 0, load_seconds_ = 0;
  JobOverview overview_;
  bool loaded_ = false;
  OverviewMetric metric_ = OverviewMetric::kBusy;
  OverviewOrder order_ = OverviewOrder::kSlowestMean;
  RowOrder rows_;
  // The detail being loaded, the one loaded (until taken) and the last request's outcome.
  std::future<std::unique_ptr<LoadedTrace>> detail_loading_;
  std::unique_ptr<LoadedTrace> detail_;
  DetailRequest pending_, detail_request_;
  std::string detail_message_;
};

}  // namespace moescope::viewer

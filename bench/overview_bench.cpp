// overview_bench: what opening the viewer's job overview costs (docs/performance.md, "Job
// overview"): reads a folder of rank summaries into the overview model (job_overview.h) as the
// viewer does, and prints the wall and CPU time and the peak memory of the process; then one
// rank's detail for a click (rank_detail.h). `moescope-view FOLDER --screenshot` measures the
// same with the window (bench/many_ranks_bench.sh runs both).
// Usage: overview_bench FOLDER [--rank R --step S]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

#include "moescope/viewer/job_overview.h"
#include "moescope/viewer/rank_detail.h"

namespace {

double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
}

// Peak resident memory of this process so far (VmHWM), in MB.
double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moescope::viewer;
  if (argc < 2) {
    std::fprintf(stderr, "usage: overview_bench FOLDER [--rank R --step S]\n");
    return 2;
  }
  int rank = -1;
  long step = -1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--rank") rank = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--step") step = std::atol(argv[i + 1]);
  }
  const ViewerInputs inputs = expand_viewer_inputs({argv[1]});
  if (inputs.summaries.empty()) {
    std::fprintf(stderr, "overview_bench: %s\n",
                 inputs.error.empty() ? "no summaries" : inputs.error.c_str());
    return 1;
  }
  const std::vector<std::string>& files = inputs.summaries;
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  JobOverview overview = load_job_overview(files);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (!overview.error.empty()) {
    std::fprintf(stderr, "overview_bench: %s\n", overview.error.c_str());
    return 1;
  }
  std::printf(
      "overview: %zu ranks x %zu steps from %zu summaries in %.2f s wall, %.2f s CPU, "
      "peak RSS %.0f MB\n",
      overview.rows.size(), overview.steps.size(), files.size(), wall, cpu_seconds() - cpu_start,
      peak_rss_mb());
  for (const std::string& line : overview.headlines) std::printf("  %s\n", line.c_str());
  if (rank < 0) return 0;
  const int row = overview.row_of_rank(rank);
  size_t column = 0;
  while (column < overview.steps.size() && overview.steps[column] != step) ++column;
  if (row < 0 || column == overview.steps.size()) {
    std::fprintf(stderr, "overview_bench: no cell for rank %d, step %ld\n", rank, step);
    return 1;
  }
  const DetailRequest request = detail_request_for(overview, size_t(row), column);
  const auto detail_start = std::chrono::steady_clock::now();
  std::unique_ptr<LoadedTrace> detail = load_rank_detail(request);
  std::printf(
      "detail: rank %d steps %ld-%ld, %llu events read (stop at %llu) in %.3f s; "
      "peak RSS %.0f MB\n",
      rank, long(request.first_step), long(request.last_step),
      (unsigned long long)detail->model.total_events, (unsigned long long)request.max_events,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - detail_start).count(),
      peak_rss_mb());
  return 0;
}

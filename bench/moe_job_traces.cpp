// moe_job_traces: writes the traces of a synthetic N-rank MoE job with a slow rank (from a given
// step), a slow host and a hot expert planted (tests/analysis/moe_job_writer.h), and measures
// one rank's summary: its size per 1,000 steps and the time to make and write it per 1 M events
// (what the shim would spend at exit). bench/many_ranks_bench.sh runs it at 64 / 1,024 / 4,096
// ranks and times `moescope summarize` and `moescope report` on the result.
//
// Usage: moe_job_traces --dir DIR [--ranks N] [--steps S] [--slow-rank R] [--slow-from STEP]
//                       [--slow-host H] [--ranks-per-host K] [--expert-parallel G]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include "moe_job_writer.h"
#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/trace_loader.h"

namespace {

// CPU time of this process (this measurement runs on one thread): what the work costs, whatever
// else the machine runs.
double cpu_seconds() {
  return double(std::clock()) / CLOCKS_PER_SEC;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moescope;
  testing::MoeJobConfig config;
  std::string directory;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto number = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : -1; };
    if (arg == "--dir" && i + 1 < argc) {
      directory = argv[++i];
    } else if (arg == "--ranks") {
      config.ranks = number();
    } else if (arg == "--steps") {
      config.steps = number();
    } else if (arg == "--slow-rank") {
      config.slow_rank = number();
    } else if (arg == "--slow-from") {
      config.slow_from_step = number();
    } else if (arg == "--slow-host") {
      config.slow_host = number();
    } else if (arg == "--ranks-per-host") {
      config.ranks_per_host = number();
    } else if (arg == "--expert-parallel") {
      config.expert_parallel = number();
    } else {
      directory.clear();
      break;
    }
  }
  if (directory.empty()) {
    std::fprintf(stderr,
                 "usage: moe_job_traces --dir DIR [--ranks N] [--steps S] [--slow-rank R] "
                 "[--slow-from STEP] [--slow-host H] [--ranks-per-host K] [--expert-parallel G]\n");
    return 2;
  }
  auto start = std::chrono::steady_clock::now();
  uint64_t events = 0;
  const std::vector<std::string> paths = testing::write_moe_job(config, directory, &events);
  if (paths.empty()) return 1;
  uint64_t bytes = 0;
  for (const std::string& path : paths) bytes += std::filesystem::file_size(path);
  std::printf(
      "job: %d ranks x %d steps, %.2f M events, %.1f MB of traces, written in %.1f s; planted: "
      "rank %d slower x%.2f from step %d, host %s x%.2f, layer %d expert %d x%.1f tokens\n",
      config.ranks, config.steps, double(events) / 1e6, double(bytes) / 1e6, seconds_since(start),
      config.slow_rank, config.slow_factor, config.slow_from_step,
      testing::moe_job_host_name(config.slow_host).c_str(), config.host_factor, config.hot_layer,
      config.hot_expert, config.hot_factor);

  // One rank's summary: load, then summarise + encode + write (the part the shim adds at exit).
  start = std::chrono::steady_clock::now();
  analysis::TraceModel model = analysis::load_traces({paths[0]});
  const double load_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  const analysis::RankSummary summary =
      analysis::summarize_process(model, 0, std::filesystem::file_size(paths[0]));
  const std::string probe = directory + "/probe.moesummary.tmp";
  std::string error;
  if (!analysis::write_rank_summary(probe, summary, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const double write_s = seconds_since(start);
  const double write_cpu_s = cpu_seconds() - cpu_start;
  const double summary_bytes = double(std::filesystem::file_size(probe));
  std::filesystem::remove(probe);
  const double rank_events = double(model.processes[0].events);
  std::printf(
      "summary of rank 0: %.1f KB for %d steps = %.1f KB per 1,000 steps; made and written in "
      "%.1f ms (%.1f ms CPU) for %.0f events = %.3f s per 1 M events, %.3f s CPU (loading the "
      "trace: %.1f ms)\n",
      summary_bytes / 1e3, config.steps, summary_bytes / 1e3 * 1000.0 / config.steps, write_s * 1e3,
      write_cpu_s * 1e3, rank_events, write_s / rank_events * 1e6, write_cpu_s / rank_events * 1e6,
      load_s * 1e3);
  return 0;
}

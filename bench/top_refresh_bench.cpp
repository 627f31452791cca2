// top_refresh_bench: what one `moescope top` refresh costs at many ranks, reading only what is
// new (analysis/live_rank_state.h) against loading every trace again (what each refresh did
// before), in the same run on the same bytes.
//
// It writes a synthetic job's traces (tests/analysis/moe_job_writer.h: step markers, kernels,
// all-to-all and all-reduce ops, expert loads; a chunk per stream and step, as a recorder that
// flushes every step), in a child process so that its memory is not counted here. Growing
// copies hold all but the last `--appends` steps. Then:
//   first refresh    a fresh LiveRunState reads every copy once
//   per append       one more step appended to every copy, then one refresh (timed)
//   full reload      load_traces + time breakdown + layer loads of the same bytes
// and prints the times, their ratio, the bytes each read and the peak RSS before the full
// reload ran (the incremental reader's) and after.
//
// Usage: top_refresh_bench [--ranks N] [--steps S] [--appends A] [--dir DIR] [--keep]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "moe_job_writer.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/live_rank_state.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_loader.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

// A written trace: its bytes' path and where each chunk ends.
struct Source {
  std::string path;
  std::vector<uint64_t> chunk_ends;
};

bool copy_range(const std::string& from, const std::string& to, uint64_t begin, uint64_t end) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::app);
  std::vector<char> bytes(end - begin);
  in.seekg(std::streamoff(begin));
  in.read(bytes.data(), std::streamsize(bytes.size()));
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return bool(in) && bool(out);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moescope;
  int ranks = 1024, steps = 200, appends = 3;
  std::string directory = "/tmp/moescope_top_refresh_bench";
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ranks" && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (arg == "--appends" && i + 1 < argc) {
      appends = std::atoi(argv[++i]);
    } else if (arg == "--dir" && i + 1 < argc) {
      directory = argv[++i];
    } else if (arg == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: top_refresh_bench [--ranks N] [--steps S] [--appends A] [--dir DIR] "
                   "[--keep]\n");
      return 2;
    }
  }
  if (ranks < 1 || steps < 2 || appends < 1 || appends >= steps) {
    std::fprintf(stderr, "top_refresh_bench: need ranks >= 1 and 1 <= appends < steps\n");
    return 2;
  }
  std::filesystem::remove_all(directory);
  const std::string written = directory + "/written", live = directory + "/live";
  std::filesystem::create_directories(live);

  testing::MoeJobConfig config;
  config.ranks = ranks;
  config.steps = steps;
  config.layers = 2;
  config.experts = 16;
  config.kernels_per_layer = 4;
  config.slow_from_step = steps / 2;
  config.hot_expert = 5;   // of 16
  config.chunk_bytes = 1;  // a chunk per stream and step
  config.strings_first = true;
  auto start = Clock::now();
  const pid_t child = fork();
  if (child == 0) _exit(testing::write_moe_job(config, written).empty() ? 1 : 0);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "top_refresh_bench: writing the traces failed\n");
    return 1;
  }
  const double write_s = seconds_since(start);

  // Growing copies: all but the last `appends` steps (2 chunks each) and the end chunk.
  std::vector<Source> sources;
  std::vector<std::string> paths;
  uint64_t total_bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    Source source{written + "/job." + std::to_string(r) + ".moetrace", {}};
    source.chunk_ends = moescope::testing::trace_chunk_ends(source.path);
    if (source.chunk_ends.size() < size_t(2 * appends + 2)) {
      std::fprintf(stderr, "top_refresh_bench: %s has too few chunks\n", source.path.c_str());
      return 1;
    }
    paths.push_back(live + "/job." + std::to_string(r) + ".moetrace");
    const uint64_t prefix = source.chunk_ends[source.chunk_ends.size() - 2 - 2 * size_t(appends)];
    if (!copy_range(source.path, paths.back(), 0, prefix)) return 1;
    total_bytes += prefix;
    sources.push_back(std::move(source));
  }

  analysis::LiveRunState run;
  start = Clock::now();
  run.refresh(paths);
  const double first_s = seconds_since(start);
  const uint64_t first_bytes = run.last_refresh_bytes();
  const int64_t first_common = run.common_step();

  std::vector<double> refresh_s;
  uint64_t appended_bytes = 0, refresh_bytes = 0;
  for (int a = 0; a < appends; ++a) {
    for (int r = 0; r < ranks; ++r) {
      const auto& ends = sources[size_t(r)].chunk_ends;
      const size_t last = ends.size() - 2 - 2 * size_t(appends - a);
      if (!copy_range(sources[size_t(r)].path, paths[size_t(r)], ends[last], ends[last + 2])) {
        return 1;
      }
      appended_bytes += ends[last + 2] - ends[last];
    }
    start = Clock::now();
    run.refresh(paths);
    refresh_s.push_back(seconds_since(start));
    refresh_bytes += run.last_refresh_bytes();
  }
  total_bytes += appended_bytes;
  const double incremental_rss = peak_rss_mib();
  size_t window_chunks = 0;
  for (const auto& file : run.files()) window_chunks += file->window_chunks();
  std::vector<double> sorted = refresh_s;
  std::sort(sorted.begin(), sorted.end());
  const double median_s = sorted[sorted.size() / 2];

  // What a refresh cost before: every trace loaded again, then the frame's analyses.
  start = Clock::now();
  analysis::TraceModel model = analysis::load_traces(paths);
  analysis::TimeBreakdown breakdown = analysis::compute_time_breakdown(model);
  std::vector<analysis::LayerStepLoad> loads = analysis::layer_step_loads(model);
  const double full_s = seconds_since(start);
  const double full_rss = peak_rss_mib();

  std::printf(
      "top refresh at %d ranks, %d steps per trace (%.1f MiB of traces; written in %.1f s)\n",
      ranks, steps, double(total_bytes) / (1 << 20), write_s);
  std::printf("  %-34s %10.3f s  %10.1f MiB read\n", "first refresh (reads everything)", first_s,
              double(first_bytes) / (1 << 20));
  std::printf("  %-34s %10.3f s  %10.3f MiB read per refresh (%d refreshes, max %.3f s)\n",
              "refresh after one step appended", median_s,
              double(refresh_bytes) / appends / (1 << 20), appends, sorted.back());
  std::printf("  %-34s %10.3f s  %10.1f MiB read\n", "full reload (before)", full_s,
              double(total_bytes) / (1 << 20));
  std::printf("  full reload / incremental refresh: %.0fx\n", full_s / median_s);
  std::printf("  bytes read per refresh: %llu, appended: %llu\n",
              static_cast<unsigned long long>(refresh_bytes / uint64_t(appends)),
              static_cast<unsigned long long>(appended_bytes / uint64_t(appends)));
  std::printf(
      "  common step %lld after the first refresh, %lld at the end (model: %zu ranks, %zu "
      "layer-steps)\n",
      static_cast<long long>(first_common), static_cast<long long>(run.common_step()),
      breakdown.ranks.size(), loads.size());
  std::printf("  decoded chunks kept: %zu over %d ranks (%.1f per rank)\n", window_chunks, ranks,
              double(window_chunks) / ranks);
  std::printf("  peak RSS: %.0f MiB with the incremental reader, %.0f MiB after the full reload\n",
              incremental_rss, full_rss);
  if (!keep) std::filesystem::remove_all(directory);
  // The refresh reads only what was appended: anything else is a failure of the benchmark.
  return refresh_bytes == appended_bytes ? 0 : 1;
}

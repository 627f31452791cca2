#include "overview_job.h"

#include <cstdio>
#include <filesystem>

#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::testing {

MoeJobConfig overview_job_config() {
  MoeJobConfig config;
  config.ranks = 64;
  config.steps = 40;
  config.kernels_per_layer = 4;
  config.ranks_per_host = 8;
  config.expert_parallel = 16;
  config.slow_rank = 37;
  config.slow_from_step = 25;
  config.slow_host = 2;
  config.threads = 2;
  config.chunk_bytes = 1;  // a chunk per stream and step, as a long run's flushes give
  return config;
}

std::vector<std::string> write_summarized_job(const MoeJobConfig& config,
                                              const std::string& directory) {
  const std::vector<std::string> traces = write_moe_job(config, directory);
  std::vector<std::string> summaries;
  for (const std::string& trace : traces) {
    analysis::TraceModel model = analysis::load_traces({trace});
    std::string error;
    const std::string summary = analysis::summary_path_for(trace);
    if (model.processes.size() != 1 ||
        !analysis::write_rank_summary(
            summary, analysis::summarize_process(model, 0, std::filesystem::file_size(trace)),
            error)) {
      std::fprintf(stderr, "cannot summarize %s: %s\n", trace.c_str(), error.c_str());
      return {};
    }
    summaries.push_back(summary);
  }
  return summaries;
}

}  // namespace moescope::testing

// `moe_job_files DIR RANKS STEPS`: writes DIR/job.<rank>.moetrace of a small synthetic MoE job
// (moe_job_writer.h, 4 ranks per host, expert-parallel groups of 2), for tests that need a
// job's traces on disk (tests/analysis/test_fanout_dask.py).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "moe_job_writer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: moe_job_files DIR RANKS STEPS\n");
    return 2;
  }
  moescope::testing::MoeJobConfig config;
  config.ranks = std::atoi(argv[2]);
  config.steps = std::atoi(argv[3]);
  if (config.ranks < 2 || config.ranks % 2 != 0 || config.steps < 1) {
    std::fprintf(stderr, "moe_job_files: RANKS must be even and >= 2, STEPS >= 1\n");
    return 2;
  }
  config.ranks_per_host = 4;
  config.expert_parallel = 2;
  config.kernels_per_layer = 2;
  config.experts = 8;
  config.hot_expert = 3;
  config.slow_rank = 1;
  config.slow_from_step = config.steps / 2;
  config.slow_host = -1;
  config.threads = 1;
  return moescope::testing::write_moe_job(config, argv[1]).empty() ? 1 : 0;
}

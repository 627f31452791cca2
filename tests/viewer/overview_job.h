// A 64-rank synthetic MoE job (tests/analysis/moe_job_writer.h) with a slow rank from a step, a
// slow host and a hot expert planted, and each rank's summary written beside its trace as
// `moescope summarize` does: the input of the job overview's tests.
#pragma once

#include <string>
#include <vector>

#include "moe_job_writer.h"

namespace moescope::testing {

// The job the overview tests use: 64 ranks, 8 per host, 40 steps; rank 37 slower by 18% from
// step 25, host 2 (ranks 16-23) slower by 10% throughout; a
// chunk per stream and step.
MoeJobConfig overview_job_config();

// Writes the job into `directory` and a summary beside each trace; returns the summary paths in
// rank order, or an empty list after printing why.
std::vector<std::string> write_summarized_job(const MoeJobConfig& config,
                                              const std::string& directory);

}  // namespace moescope::testing

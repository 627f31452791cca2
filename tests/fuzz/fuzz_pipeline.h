// What the fuzz targets do with a model once loaded: everything a user can do with a trace
// (report in every format, Chrome export, a diff of the run against itself, the prediction
// check), so a hostile value that decodes fine is also followed through the analyses.
#pragma once

#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::fuzz {

// load_traces(paths) -> report -> export -> diff; aborts (a finding) only on a broken promise
// (an export that is not written whole), never on a reported load error.
void run_whole_pipeline(const std::vector<std::string>& paths);

// A file name under /dev/shm (else /tmp) private to this process, with `suffix`.
std::string scratch_path(const std::string& suffix);

// Writes `size` bytes to `path` (truncating); false when it cannot.
bool write_file(const std::string& path, const void* data, size_t size);

}  // namespace moescope::fuzz

// What a path named on the command line, or dropped on the viewer, stands for: a file for
// itself, a folder for the recorded files in it. One rule for every command and the viewer.
#pragma once

#include <string>
#include <vector>

namespace moescope::analysis {

// The regular files in `folder` whose path `matches`, sorted; none when it cannot be listed.
std::vector<std::string> files_in_folder(const std::string& folder,
                                         bool (*matches)(const std::string& path));

// True for a moescope trace file (by name: .moetrace).
bool is_moetrace_path(const std::string& path);

// The trace files of `paths` now: files as given, folders as their *.moetrace files (sorted).
// A folder without one adds nothing (a live run's folder before its first file: `top`).
std::vector<std::string> trace_files_of(const std::vector<std::string>& paths);

// The same for a recorded run, where a folder without .moetrace files stands for its PyTorch
// profiler traces (*.json, *.json.gz: tensorboard_trace_handler's folder; not in a moescope run
// folder, whose JSON files are its metadata). Throws std::runtime_error naming a folder with
// neither.
std::vector<std::string> recorded_trace_files(const std::vector<std::string>& paths);

}  // namespace moescope::analysis

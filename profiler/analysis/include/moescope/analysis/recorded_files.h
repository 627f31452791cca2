// What a path named on the command line, or dropped on the viewer, stands for: a file for
// itself, a folder for the recorded files in it. One rule for every command and the viewer.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace moescope::analysis {

// A folder that cannot be listed (permissions, too many open files, a stale mount): thrown
// with "FOLDER: cannot list: REASON", so that it is never mistaken for an empty folder.
struct UnlistableFolder : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The regular files in `folder` whose path `matches`, sorted. Throws UnlistableFolder.
std::vector<std::string> files_in_folder(const std::string& folder,
                                         bool (*matches)(const std::string& path));

// True for a moescope trace file (by name: .moetrace).
bool is_moetrace_path(const std::string& path);

// The trace files of `paths` now: files as given, folders as their *.moetrace files (sorted).
// A folder without one adds nothing (a live run's folder before its first file: `top`).
// Throws UnlistableFolder.
std::vector<std::string> trace_files_of(const std::vector<std::string>& paths);

// The same for a recorded run, where a folder without .moetrace files stands for its PyTorch
// profiler traces (*.json, *.json.gz: tensorboard_trace_handler's folder; not in a moescope run
// folder, whose JSON files are its metadata). Throws std::runtime_error naming a folder with
// neither (UnlistableFolder for one that cannot be listed).
std::vector<std::string> recorded_trace_files(const std::vector<std::string>& paths);

}  // namespace moescope::analysis

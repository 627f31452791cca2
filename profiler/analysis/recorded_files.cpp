// Folders stand for their recorded files (recorded_files.h).
#include "moescope/analysis/recorded_files.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "moescope/analysis/trace_loader.h"

namespace moescope::analysis {
namespace {

bool is_directory(const std::string& path) {
  std::error_code code;
  return std::filesystem::is_directory(path, code);
}

// The Chrome/Kineto JSON traces of a folder without .moetrace files: what the PyTorch
// profiler's tensorboard_trace_handler writes (WORKER.TIME.pt.trace.json[.gz], one per worker
// and cycle), or any folder of such files. A moescope run folder (run.json) holds none of them.
std::vector<std::string> chrome_traces_in(const std::string& folder) {
  std::error_code code;
  if (std::filesystem::exists(std::filesystem::path(folder) / "run.json", code)) return {};
  return files_in_folder(folder, is_chrome_json_path);
}

}  // namespace

std::vector<std::string> files_in_folder(const std::string& folder,
                                         bool (*matches)(const std::string& path)) {
  std::vector<std::string> found;
  std::error_code code;
  std::filesystem::directory_iterator entries(folder, code);
  if (code) throw UnlistableFolder(folder + ": cannot list: " + code.message());
  for (const auto& entry : entries) {
    std::error_code type_code;
    if (entry.is_regular_file(type_code) && matches(entry.path().string())) {
      found.push_back(entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

bool is_moetrace_path(const std::string& path) {
  return std::filesystem::path(path).extension() == ".moetrace";
}

std::vector<std::string> trace_files_of(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    if (!is_directory(path)) {
      files.push_back(path);
      continue;
    }
    const std::vector<std::string> found = files_in_folder(path, is_moetrace_path);
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::vector<std::string> recorded_trace_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::vector<std::string> found = trace_files_of({path});
    if (found.empty()) found = chrome_traces_in(path);
    if (found.empty()) {
      throw std::runtime_error(path +
                               ": no .moetrace file in this folder (nor a PyTorch profiler "
                               ".json or .json.gz trace)");
    }
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

}  // namespace moescope::analysis

// Checks and prepares `record -o` before the program starts (see record_output.h).
#include "record_output.h"

#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>

#include "moescope/trace/trace_reader.h"

namespace moescope::cli {
namespace {

// mkdir -p: every missing folder of `directory`; "" when they all exist at the end.
std::string make_directories(const std::string& directory) {
  std::string so_far;
  size_t position = 0;
  while (position != std::string::npos) {
    size_t slash = directory.find('/', position + 1);
    so_far = directory.substr(0, slash);
    position = slash;
    if (so_far.empty() || so_far == "/") continue;
    if (::mkdir(so_far.c_str(), 0777) != 0 && errno != EEXIST) {
      return "cannot create the folder " + so_far + ": " + std::strerror(errno);
    }
  }
  struct stat info;
  if (::stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return directory + " is not a folder";
  }
  return "";
}

// Kernel file systems (/proc, /sys, /dev, cgroups, debugfs): their files look writable to
// root and take no trace.
bool on_kernel_file_system(const std::string& path) {
  struct statfs info;
  if (::statfs(path.c_str(), &info) != 0) return false;
  switch (static_cast<unsigned long>(info.f_type)) {
    case 0x9fa0:      // proc
    case 0x62656572:  // sysfs
    case 0x1373:      // devfs
    case 0x64626720:  // debugfs
    case 0x27e0eb:    // cgroup
    case 0x63677270:  // cgroup2
      return true;
    default:
      return false;
  }
}

}  // namespace

bool written_by_session(const std::string& path, const std::string& session) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  trace::TraceReader reader;
  if (!reader.open(path)) return false;
  auto metadata = nlohmann::json::parse(reader.metadata_json(), nullptr, false);
  return metadata.is_object() && metadata.value("session", std::string()) == session;
}

std::string prepare_trace_output(const std::string& pattern) {
  if (pattern.empty() || pattern.back() == '/') {
    return "'" + pattern + "' names no file (e.g. -o " + pattern + "run.%r.moetrace)";
  }
  const size_t slash = pattern.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : pattern.substr(0, slash);
  // A %-field in the folder (one folder per rank or pid) is expanded by each process's shim,
  // which says itself when it cannot write there.
  if (directory.find('%') != std::string::npos) return "";
  struct stat info;
  if (pattern.find('%') == std::string::npos && ::stat(pattern.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {
      return pattern + " is a directory (name a file in it: -o " + pattern + "/run.%r.moetrace)";
    }
    if (!S_ISREG(info.st_mode)) return pattern + " is not a regular file";
  }
  if (!directory.empty()) {
    std::string problem = make_directories(directory);
    if (!problem.empty()) return problem;
  }
  if (on_kernel_file_system(directory.empty() ? "/" : directory)) {
    return directory + " is a kernel file system (/proc, /sys, /dev): it takes no trace";
  }
  return "";
}

}  // namespace moescope::cli

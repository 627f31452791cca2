// Checks and prepares `record -o` before the program starts (see record_output.h).
#include "record_output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

bool is_regular_file(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string prepare_trace_output(const std::string& pattern) {
  if (pattern.empty() || pattern.back() == '/') {
    return "'" + pattern + "' names no file (e.g. -o " + pattern + "run.%r.moetrace)";
  }
  const size_t slash = pattern.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : pattern.substr(0, slash);
  if (directory.find('%') != std::string::npos) {
    return "the folder of '" + pattern + "' has a %-field; only the file name may have one";
  }
  struct stat info;
  if (pattern.find('%') == std::string::npos && ::stat(pattern.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {
      return pattern + " is a directory (name a file in it: -o " + pattern + "/run.%r.moetrace)";
    }
    if (!S_ISREG(info.st_mode) || ::access(pattern.c_str(), W_OK) != 0) {
      return "cannot write " + pattern + " (" +
             (S_ISREG(info.st_mode) ? std::string(std::strerror(EACCES))
                                    : std::string("not a regular file")) +
             ")";
    }
  }
  if (!directory.empty()) {
    std::string problem = make_directories(directory);
    if (!problem.empty()) return problem;
  }
  if (::access(directory.empty() ? "/" : directory.c_str(), W_OK | X_OK) != 0) {
    return "cannot write in the folder " + directory + ": " + std::strerror(errno);
  }
  return "";
}

}  // namespace moescope::cli

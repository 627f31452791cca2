#include "process_liveness.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace moescope::cli {

const std::string& this_host_name() {
  static const std::string name = [] {
    char buffer[256] = {};
    return gethostname(buffer, sizeof(buffer) - 1) == 0 ? std::string(buffer) : std::string();
  }();
  return name;
}

bool process_gone(const std::string& host, int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX || host.empty() || host != this_host_name()) return false;
  // Signal 0 checks existence only; EPERM means it exists under another user.
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace moescope::cli

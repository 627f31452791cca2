#include "shim_options.h"
#include "moescope/trace/recording_environment.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace moescope::inject {
namespace {

ShimOptions g_options;

bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  if (!std::strcmp(value, "0") || !std::strcmp(value, "off") || !std::strcmp(value, "false")) {
    return false;
  }
  if (!std::strcmp(value, "1") || !std::strcmp(value, "on") || !std::strcmp(value, "true")) {
    return true;
  }
  std::fprintf(stderr, "moescope: ignoring %s=%s (expected 0 or 1)\n", name, value);
  return fallback;
}

// A non-negative decimal number; 0 when unset or malformed (with a warning).
double env_seconds(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return 0;
  char* end = nullptr;
  double parsed = std::strtod(value, &end);
  if (!end || *end || !(parsed >= 0) || parsed > 1e7) {
    std::fprintf(stderr, "moescope: ignoring %s=%s (expected a number >= 0)\n", name, value);
    return 0;
  }
  return parsed;
}

}  // namespace

bool rank_is_selected(const std::string& ranks, int rank) {
  if (ranks.empty()) return true;
  if (rank < 0) return false;
  size_t begin = 0;
  while (begin <= ranks.size()) {
    size_t end = ranks.find(',', begin);
    if (end == std::string::npos) end = ranks.size();
    std::string entry = ranks.substr(begin, end - begin);
    size_t dash = entry.find('-');
    char* stop = nullptr;
    if (!entry.empty()) {
      long first = std::strtol(entry.c_str(), &stop, 10);
      long last =
          dash != std::string::npos ? std::strtol(entry.c_str() + dash + 1, nullptr, 10) : first;
      if (rank >= first && rank <= last) return true;
    }
    begin = end + 1;
  }
  return false;
}

bool read_shim_options(ShimOptions& options) {
  const char* output = std::getenv(trace::environment::kOutput);
  if (!output || !*output) return false;
  options.output_pattern = output;
  if (const char* fork_mode = std::getenv(trace::environment::kFork); fork_mode && *fork_mode) {
    if (!std::strcmp(fork_mode, "skip")) {
      options.fork_mode = ForkMode::kSkip;
    } else if (!std::strcmp(fork_mode, "trace")) {
      options.fork_mode = ForkMode::kTrace;
    } else {
      std::fprintf(stderr, "moescope: ignoring MOESCOPE_FORK=%s (expected trace or skip)\n",
                   fork_mode);
    }
  }
  options.capture_cuda = env_flag(trace::environment::kCuda, true);
  options.capture_nccl = env_flag(trace::environment::kNccl, true);
  options.capture_nvtx = env_flag(trace::environment::kNvtx, true);
  if (const char* root = std::getenv(trace::environment::kRootPid))
    options.root_pid = std::atoi(root);
  if (const char* session = std::getenv(trace::environment::kSession)) options.session = session;
  if (const char* ranks = std::getenv(trace::environment::kRanks)) options.ranks = ranks;
  if (const char* run_dir = std::getenv(trace::environment::kRunDir)) options.run_dir = run_dir;
  options.hang_timeout_s = env_seconds(trace::environment::kHangTimeoutS);
  options.slow_step_factor = env_seconds(trace::environment::kSlowStepFactor);
  g_options = options;
  return true;
}

const ShimOptions& shim_options() {
  return g_options;
}

}  // namespace moescope::inject

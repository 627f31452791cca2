#include "shim_options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace

bool read_shim_options(ShimOptions& options) {
  const char* output = std::getenv("MOESCOPE_OUTPUT");
  if (!output || !*output) return false;
  options.output_pattern = output;
  if (const char* fork_mode = std::getenv("MOESCOPE_FORK"); fork_mode && *fork_mode) {
    if (!std::strcmp(fork_mode, "skip")) {
      options.fork_mode = ForkMode::kSkip;
    } else if (!std::strcmp(fork_mode, "trace")) {
      options.fork_mode = ForkMode::kTrace;
    } else {
      std::fprintf(stderr, "moescope: ignoring MOESCOPE_FORK=%s (expected trace or skip)\n",
                   fork_mode);
    }
  }
  options.capture_cuda = env_flag("MOESCOPE_CUDA", true);
  options.capture_nccl = env_flag("MOESCOPE_NCCL", true);
  options.capture_nvtx = env_flag("MOESCOPE_NVTX", true);
  if (const char* root = std::getenv("MOESCOPE_ROOT_PID")) options.root_pid = std::atoi(root);
  if (const char* session = std::getenv("MOESCOPE_SESSION")) options.session = session;
  g_options = options;
  return true;
}

const ShimOptions& shim_options() {
  return g_options;
}

}  // namespace moescope::inject

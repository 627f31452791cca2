// What `moescope record` asks of the shim, passed through environment variables so that exec'd
// children inherit it:
//
//   MOESCOPE_OUTPUT     trace path pattern (%r rank, %p pid, %h host); unset = shim stays idle
//   MOESCOPE_FORK       trace | skip: forked children get their own trace or are not recorded
//   MOESCOPE_CUDA       0 disables CUDA capture (CUPTI)
//   MOESCOPE_NCCL       0 disables NCCL capture (moescope record then preloads the shim
//                       variant without any ncclX symbol)
//   MOESCOPE_NVTX       0: moescope record did not attach the shim to NVTX (metadata only)
//   MOESCOPE_ROOT_PID   pid of the command `moescope record` started
//   MOESCOPE_SESSION    identifies one `moescope record` run (tells its files from older ones)
//   MOESCOPE_FLUSH_MS, MOESCOPE_BUFFER_MB   read by the recorder itself
#pragma once

#include <string>

namespace moescope::inject {

enum class ForkMode { kTrace, kSkip };

struct ShimOptions {
  std::string output_pattern;
  ForkMode fork_mode = ForkMode::kTrace;
  bool capture_cuda = true;
  bool capture_nccl = true;
  bool capture_nvtx = true;
  int root_pid = 0;
  std::string session;
};

// Reads the options; false when MOESCOPE_OUTPUT is unset (the shim was loaded without
// `moescope record`, e.g. by the Python module, and must not record on its own). Bad values
// warn once on stderr and fall back to the defaults.
bool read_shim_options(ShimOptions& options);

// The options of this process (valid after the shim's constructor ran).
const ShimOptions& shim_options();

}  // namespace moescope::inject

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
//   MOESCOPE_RANKS      comma-separated ranks to record; other ranks leave the shim idle
//   MOESCOPE_RUN_DIR    the run folder of a flight-recorder run (run_folder.h)
//   MOESCOPE_HANG_TIMEOUT_S, MOESCOPE_SLOW_STEP_FACTOR   the flight recorder's watchdogs
//   MOESCOPE_FLUSH_MS, MOESCOPE_BUFFER_MB, MOESCOPE_FLIGHT, MOESCOPE_FLIGHT_MB, MOESCOPE_STEPS,
//   MOESCOPE_DELAY_S, MOESCOPE_DURATION_S, MOESCOPE_MAX_SIZE   read by the recorder itself
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
  std::string ranks;            // "" = every rank
  std::string run_dir;          // flight recorder: shared by the run's processes
  double hang_timeout_s = 0;    // 0 = no hang watchdog
  double slow_step_factor = 0;  // 0 = no slow-step trigger
};

// True when this process should record under MOESCOPE_RANKS: every process when unset, else
// the listed ranks (a process without a rank, e.g. the launcher, is not recorded).
bool rank_is_selected(const std::string& ranks, int rank);

// --ranks in a launcher: ranks not listed are exec'd without moescope (shim_rank_filter.cpp).
void install_rank_filter(const ShimOptions& options);

// Reads the options; false when MOESCOPE_OUTPUT is unset (the shim was loaded without
// `moescope record`, e.g. by the Python module, and must not record on its own). Bad values
// warn once on stderr and fall back to the defaults.
bool read_shim_options(ShimOptions& options);

// The options of this process (valid after the shim's constructor ran).
const ShimOptions& shim_options();

}  // namespace moescope::inject

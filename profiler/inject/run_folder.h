// The run folder: how the processes of one `moescope record --flight-recorder` run find each
// other, so that one trigger makes the whole job dump (docs/flight-recorder.md).
//
//   $MOESCOPE_RUN_DIR/
//     run.json          written by `moescope record`: its pid, the command, the trace pattern
//     trigger           "SEQ ORIGIN_RANK REASON CODE ORIGIN_PID": the latest job-wide trigger,
//                       replaced atomically (rename) by whoever fires one (a rank, `moescope dump`)
//     procs/PID.json    one per recording process: rank, trace path, dumps written so far
//     stack.PID.txt     Python processes: faulthandler writes every thread's stack here on SIGUSR2
//
// Every process polls `trigger` (a 100 ms tick); a process that sees a newer sequence number
// than the one it started with dumps with reason "peer". On several hosts the folder must be
// shared (MOESCOPE_RUN_DIR on a shared file system).
#pragma once

#include <cstdint>
#include <string>

namespace moescope::inject {

struct RunTrigger {
  uint64_t sequence = 0;  // 0 = none yet
  int32_t origin_rank = -1;
  uint32_t reason = 0;
  int32_t code = 0;
  int64_t origin_pid = 0;
};

// Reads `<run_dir>/trigger`; false when there is none (or it does not parse).
bool read_run_trigger(const std::string& run_dir, RunTrigger& out);
// Announces a trigger to the job: the sequence number becomes one more than the latest.
// Returns the new sequence number (0 on failure).
uint64_t announce_run_trigger(const std::string& run_dir, int32_t origin_rank, uint32_t reason,
                              int32_t code, int64_t origin_pid);

// The same from a fatal signal's handler: only async-signal-safe calls. `scratch_path` must be
// `<run_dir>/trigger.<pid>` prepared beforehand, `trigger_path` `<run_dir>/trigger`.
void announce_run_trigger_from_signal_handler(const char* trigger_path, const char* scratch_path,
                                              int32_t origin_rank, uint32_t reason, int32_t code,
                                              int64_t origin_pid);

// Writes `<run_dir>/procs/<pid>.json` (replaced atomically).
void write_process_entry(const std::string& run_dir, int64_t pid, const std::string& json);
void remove_process_entry(const std::string& run_dir, int64_t pid);

// True when some process of the run registered itself with a rank (procs/PID.json): a process
// without one (torchrun's launcher) then leaves the dumping to the ranks.
bool run_has_ranked_process(const std::string& run_dir);

}  // namespace moescope::inject

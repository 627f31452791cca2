// `moescope record`'s capture windows and flight recorder options (docs/flight-recorder.md):
// parsed here, handed to the shim and the recorder as environment variables.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace moescope::cli {

struct RecordWindowOptions {
  std::string steps;                // --steps A:B
  double delay_s = 0;               // --delay
  double duration_s = 0;            // --duration
  std::string ranks;                // --ranks 0,2-3
  std::string max_size;             // --max-size 500M
  std::string flight;               // --flight-recorder 30 | 200steps
  std::string flight_size = "64M";  // --flight-recorder-size
  double hang_timeout_s = 0;        // --hang-timeout
  double slow_step_factor = 0;      // --slow-step
};

void add_record_window_options(CLI::App& command, RecordWindowOptions& options);

// Bytes of "500M", "2G", "4096", "64MB"; false when malformed.
bool parse_size(const std::string& text, unsigned long long& bytes);

// Where run folders live: $MOESCOPE_RUNS_DIR, else $XDG_RUNTIME_DIR/moescope-runs, else
// /tmp/moescope-runs-UID.
std::string runs_root();

// Under --flight-recorder: makes the run folder (run_folder.h) for `session` and writes its
// run.json; returns its path ("" without the flight recorder, or when it cannot be made: then
// dumps are per process, not job-wide, and this says so).
std::string make_run_folder(const RecordWindowOptions& options, const std::string& session,
                            const std::string& pattern, const std::vector<std::string>& command);
void remove_run_folder(const std::string& run_dir);

// Sets the variables the shim and the recorder read (in the child, before exec).
void export_record_window_environment(const RecordWindowOptions& options,
                                      const std::string& run_dir);

}  // namespace moescope::cli

// Where `moescope record -o PATTERN` writes, checked before the program starts: the folders
// are created (as torch's tensorboard_trace_handler does), and a pattern that can never name a
// trace file (a directory, a device, a file of /proc, /sys or /dev, folders that cannot be
// created) stops `record` before anything runs. A folder or file that exists but is not
// writable is left to the shim: the program runs, the shim says once why it does not record,
// and `record` says "no trace written" (tests/compat's unwritable_output).
#pragma once

#include <string>

namespace moescope::cli {

// Creates the folders of `pattern` (an absolute trace path pattern; folders with a %-field
// are left to the shim) and checks that it can name a trace. Returns "" when it can, else
// what is wrong, e.g. "/tmp/x is a directory (name a file: -o /tmp/x/run.%r.moetrace)".
std::string prepare_trace_output(const std::string& pattern);

// True when `path` is a trace this run wrote: a readable .moetrace whose metadata names
// `session` (not a directory, a /proc entry, or another run's file the pattern matches).
bool written_by_session(const std::string& path, const std::string& session);

}  // namespace moescope::cli

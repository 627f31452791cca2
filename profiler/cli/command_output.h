// Where a command's text goes (stdout for "" or "-", else the file named), and how its errors
// reach the user.
#pragma once

#include <functional>
#include <string>

namespace moescope::cli {

// Writes `text` to stdout (`path` empty or "-") or to the file `path`; throws
// std::runtime_error "cannot write PATH" when the file cannot be written (a full disk too).
void write_command_output(const std::string& text, const std::string& path);

// Runs a command's body. An error it throws is printed as "moescope COMMAND: error: WHAT" and
// the command exits 1; CLI11's own errors pass through to CLI11, which reports them.
void run_reporting_errors(const char* command, const std::function<void()>& body);

}  // namespace moescope::cli

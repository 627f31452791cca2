// Running the built `moescope` CLI from the analysis CLI tests.
#pragma once

#include <string>
#include <vector>

namespace moescope::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// Runs `moescope ARGUMENTS` (MOESCOPE_CLI_PATH) through the shell, after `runner` when given
// (a command that runs another, e.g. "setpriv --reuid=65534 ... ").
CommandResult run_cli(const std::string& arguments, const std::string& runner = "");

// The paths as shell arguments, each quoted and preceded by a space.
std::string joined(const std::vector<std::string>& paths);

}  // namespace moescope::testing

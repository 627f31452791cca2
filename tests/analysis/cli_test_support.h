// Running the built `moescope` CLI from the analysis CLI tests.
#pragma once

#include <string>
#include <vector>

namespace moescope::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// Runs `moescope ARGUMENTS` (MOESCOPE_CLI_PATH) through the shell.
CommandResult run_cli(const std::string& arguments);

// The paths as shell arguments, each quoted and preceded by a space.
std::string joined(const std::vector<std::string>& paths);

}  // namespace moescope::testing

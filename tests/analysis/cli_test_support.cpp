#include "cli_test_support.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace moescope::testing {

CommandResult run_cli(const std::string& arguments, const std::string& runner) {
  CommandResult result;
  const std::string command = runner + MOESCOPE_CLI_PATH + " " + arguments + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.out.append(buffer.data(), got);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string joined(const std::vector<std::string>& paths) {
  std::string text;
  for (const auto& path : paths) text += " '" + path + "'";
  return text;
}

}  // namespace moescope::testing

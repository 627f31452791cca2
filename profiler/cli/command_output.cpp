#include "command_output.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <stdexcept>

namespace moescope::cli {

void write_command_output(const std::string& text, const std::string& path) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) throw std::runtime_error("cannot write " + path);
}

void run_reporting_errors(const char* command, const std::function<void()>& body) {
  try {
    body();
  } catch (const CLI::Error&) {
    throw;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "moescope %s: error: %s\n", command, error.what());
    throw CLI::RuntimeError(1);
  }
}

}  // namespace moescope::cli

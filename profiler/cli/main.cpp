// moescope: record, inspect, analyse and view MoE training traces.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"moescope: profile and debug Mixture-of-Experts training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moescope 0.1.0");
#define MOESCOPE_ADD_CLI_COMMAND(name) moescope::cli::add_##name##_command(app);
  MOESCOPE_CLI_COMMANDS(MOESCOPE_ADD_CLI_COMMAND)
#undef MOESCOPE_ADD_CLI_COMMAND
  CLI11_PARSE(app, argc, argv);
  return 0;
}

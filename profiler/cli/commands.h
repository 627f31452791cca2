// Subcommands of the `moescope` CLI. Each lives in <name>_command.cpp and registers itself on
// the app; it returns through the callback's exit code (thrown CLI::RuntimeError(code)).
#pragma once

namespace CLI {
class App;
}

// The subcommands, in the order `moescope --help` lists them. This list is the only one: it
// declares each add_<name>_command here and main.cpp registers them from it.
#define MOESCOPE_CLI_COMMANDS(X) \
  X(info)                        \
  X(plan)                        \
  X(report)                      \
  X(diff)                        \
  X(noise)                       \
  X(export)                      \
  X(record)                      \
  X(view)                        \
  X(dump)                        \
  X(metrics)                     \
  X(top)                         \
  X(summarize)

namespace moescope::cli {

#define MOESCOPE_DECLARE_CLI_COMMAND(name) void add_##name##_command(CLI::App& app);
MOESCOPE_CLI_COMMANDS(MOESCOPE_DECLARE_CLI_COMMAND)
#undef MOESCOPE_DECLARE_CLI_COMMAND

}  // namespace moescope::cli

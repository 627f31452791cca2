// Running the samples from tests: shell commands with captured output, free loopback ports,
// and parsers for the lines moe_train and train_moe.py print.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace moescope::samples_test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Runs `command` with /bin/sh, output captured.
CommandResult run_shell(const std::string& command);

/// The build and source trees (MOESCOPE_BUILD_DIR / MOESCOPE_SOURCE_DIR, set by CTest).
std::string build_dir();
std::string source_dir();
/// A fresh empty folder under the build tree for one test.
std::string fresh_dir(const std::string& name);

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close), such that
/// port + 1 was free too (moe_train under torchrun takes MASTER_PORT + 1).
int free_port_pair();

/// Quotes `text` for /bin/sh.
std::string shell_quote(const std::string& text);

/// "step N loss X ..." lines of moe_train: step -> loss text as printed (exact comparisons).
std::map<int64_t, std::string> parse_loss_lines(const std::string& output);
/// The same as numbers.
std::map<int64_t, double> parse_losses(const std::string& output);
/// "step N ... max/mean L0 a L1 b ..." -> per step, per layer max/mean.
std::map<int64_t, std::vector<double>> parse_max_over_mean(const std::string& output);

/// (rank, step, layer) -> tokens per expert, from the "expert_load rank R step S layer L local
/// c0 c1 ..." lines moe_train and train_moe.py print with --print-expert-load.
using ExpertLoadKey = std::tuple<int32_t, int64_t, uint32_t>;
std::map<ExpertLoadKey, std::vector<int64_t>> parse_expert_load_lines(const std::string& output);

/// Mean of values[first..last] of a step -> value map, by position.
double mean_of_first(const std::map<int64_t, double>& values, size_t count);
double mean_of_last(const std::map<int64_t, double>& values, size_t count);

}  // namespace moescope::samples_test

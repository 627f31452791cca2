// `moescope noise RUN... [--runs RUN...]... [--skip-steps N] [--batches K] [--json FILE]
//  [--detail]`: how much do recordings of one program differ? Each RUN is one recording (a
// folder of its ranks' traces, or one trace file); the positional RUNs are one program, and each
// --runs names the recordings of another (pooled: e.g. one pair per seed). Prints each
// recording's mean step time, the spread of those means against their own noise, and the
// run-to-run standard deviation that `moescope diff --run-to-run` takes
// (analysis/difference_interval.h, estimate_run_to_run).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/run_diff.h"
#include "run_inputs.h"

namespace moescope::cli {
namespace {

struct NoiseOptions {
  std::vector<std::string> runs;                    // one program's recordings
  std::vector<std::vector<std::string>> more_runs;  // --runs: another program's each
  size_t skip_steps = 1;
  size_t max_batches = 10;
  std::string json;
  bool detail = false;
};

struct Recording {
  std::string path;
  size_t group = 0;
  size_t ranks = 0;
  analysis::SampleMean step_time;
};

Recording measure(const std::string& path, size_t group, const NoiseOptions& options) {
  const RunInputs run = load_run_inputs({path}, options.detail, "noise");
  report_load_errors(run.model, "noise: " + path, path);
  analysis::DiffOptions diff;
  diff.skip_steps = options.skip_steps;
  diff.max_batches = options.max_batches;
  Recording recording{path, group, run.model.processes.size(),
                      analysis::run_step_time(run.model, diff, run.breakdown_or_null())};
  if (!recording.step_time.known()) {
    throw std::runtime_error(path + ": fewer than 2 steps after the " +
                             std::to_string(options.skip_steps) + " warm-up step(s)");
  }
  return recording;
}

void run_noise(const NoiseOptions& options) {
  std::vector<std::vector<std::string>> groups;
  if (!options.runs.empty()) groups.push_back(options.runs);
  groups.insert(groups.end(), options.more_runs.begin(), options.more_runs.end());
  std::vector<Recording> recordings;
  std::vector<std::vector<analysis::SampleMean>> means(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const std::string& path : groups[g]) {
      recordings.push_back(measure(path, g, options));
      means[g].push_back(recordings.back().step_time);
    }
  }
  const analysis::RunToRunEstimate estimate = analysis::estimate_run_to_run(means);
  if (estimate.degrees_of_freedom == 0) {
    throw std::runtime_error(
        "no program has two recordings: give at least two RUNs of one program (or a --runs "
        "with two)");
  }
  std::printf(
      "moescope noise: %zu recording(s) of %zu program(s), the steps after %zu warm-up "
      "step(s)\n",
      recordings.size(), groups.size(), options.skip_steps);
  std::printf("%-8s %-6s %-6s %-15s %s\n", "program", "ranks", "steps", "step time (ms)",
              "recording");
  for (const Recording& r : recordings) {
    std::printf("%-8zu %-6zu %-6zu %6.2f +- %-5.2f %s\n", r.group + 1, r.ranks, r.step_time.steps,
                r.step_time.mean, r.step_time.standard_error, r.path.c_str());
  }
  std::printf(
      "the recordings' means spread by %.2f ms (standard deviation within their program, "
      "%zu degree(s) of freedom); their own step-to-step noise alone accounts for %.2f ms\n",
      std::sqrt(estimate.between_variance), estimate.degrees_of_freedom,
      std::sqrt(estimate.within_variance));
  std::printf(
      "run-to-run standard deviation: %.2f ms per run (moescope diff ... --run-to-run %.2f)\n",
      estimate.sigma, estimate.sigma);
  if (estimate.degrees_of_freedom < 5) {
    std::printf(
        "note: %zu degree(s) of freedom make a rough figure; record more runs of the "
        "program, or pool other programs' pairs with --runs\n",
        estimate.degrees_of_freedom);
  }
  if (options.json.empty()) return;
  nlohmann::ordered_json out;
  out["skip_steps"] = options.skip_steps;
  out["recordings"] = nlohmann::ordered_json::array();
  for (const Recording& r : recordings) {
    out["recordings"].push_back({{"path", r.path},
                                 {"program", r.group + 1},
                                 {"ranks", r.ranks},
                                 {"steps", r.step_time.steps},
                                 {"step_ms", r.step_time.mean},
                                 {"standard_error_ms", r.step_time.standard_error}});
  }
  out["degrees_of_freedom"] = estimate.degrees_of_freedom;
  out["between_sd_ms"] = std::sqrt(estimate.between_variance);
  out["within_se_ms"] = std::sqrt(estimate.within_variance);
  out["run_to_run_ms"] = estimate.sigma;
  write_command_output(out.dump(2) + "\n", options.json);
}

}  // namespace

void add_noise_command(CLI::App& app) {
  auto options = std::make_shared<NoiseOptions>();
  auto* command = app.add_subcommand(
      "noise",
      "How much do recordings of one program differ? The run-to-run standard deviation of the "
      "mean step time, for `moescope diff --run-to-run`");
  command->add_option("runs", options->runs,
                      "Recordings of one program (same build, options and seed): each a folder "
                      "of its ranks' .moetrace files, or one trace file");
  command->add_option("--runs", options->more_runs,
                      "The recordings of another program (repeat the option per program): the "
                      "spread is pooled within each program, e.g. one pair per seed");
  add_step_sample_options(*command, options->skip_steps, options->max_batches);
  command->add_option("--json", options->json, "Also write the numbers as JSON to FILE");
  add_detail_flag(*command, options->detail);
  command->callback([options] { run_reporting_errors("noise", [&] { run_noise(*options); }); });
}

}  // namespace moescope::cli

// moescope: record, inspect, analyse and view MoE training traces.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"moescope: profile and debug Mixture-of-Experts training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moescope 0.1.0");
  moescope::cli::add_info_command(app);
  moescope::cli::add_plan_command(app);
  moescope::cli::add_report_command(app);
  moescope::cli::add_diff_command(app);
  moescope::cli::add_noise_command(app);
  moescope::cli::add_export_command(app);
  moescope::cli::add_record_command(app);
  moescope::cli::add_view_command(app);
  moescope::cli::add_dump_command(app);
  moescope::cli::add_metrics_command(app);
  moescope::cli::add_top_command(app);
  moescope::cli::add_summarize_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

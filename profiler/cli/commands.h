// Subcommands of the `moescope` CLI. Each lives in <name>_command.cpp and registers itself on
// the app; it returns through the callback's exit code (thrown CLI::RuntimeError(code)).
#pragma once

namespace CLI {
class App;
}

namespace moescope::cli {

void add_diff_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_record_command(CLI::App& app);
void add_view_command(CLI::App& app);
void add_dump_command(CLI::App& app);
void add_metrics_command(CLI::App& app);
void add_noise_command(CLI::App& app);
void add_top_command(CLI::App& app);
void add_summarize_command(CLI::App& app);

}  // namespace moescope::cli

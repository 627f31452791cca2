// `moescope view TRACE... [--against TRACE...] [--screenshot OUT.png] [--panel NAME]
// [--size WxH]`: replaces this
// process with the desktop viewer, moescope-view, found next to the moescope binary (so an
// installed or build-tree pair always matches), else on PATH.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"

namespace moescope::cli {
namespace {

std::string viewer_next_to_this_binary() {
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  std::filesystem::path viewer = self.parent_path() / "moescope-view";
  return std::filesystem::exists(viewer, error) ? viewer.string() : "";
}

struct ViewOptions {
  std::vector<std::string> traces;
  std::vector<std::string> against;
  std::string screenshot;
  std::string panel;
  std::string size;
};

}  // namespace

void add_view_command(CLI::App& app) {
  auto options = std::make_shared<ViewOptions>();
  CLI::App* view = app.add_subcommand("view", "Open traces in the desktop viewer (moescope-view)");
  view->add_option("traces", options->traces,
                   "Trace files (one per rank); rank summaries (.moesummary) or folders of them "
                   "open the job overview");
  view->add_option("--against", options->against,
                   "A second run's trace files: the Compare tab shows both (moescope diff)");
  view->add_option("--screenshot", options->screenshot, "Render headless and write this PNG");
  view->add_option("--panel", options->panel, "Panel for the screenshot")
      ->check(CLI::IsMember(
          {"overview", "timeline", "experts", "comm", "memory", "report", "stats", "compare"}));
  view->add_option("--size", options->size, "Screenshot size WxH (default 1600x900)");
  view->callback([options] {
    std::string viewer = viewer_next_to_this_binary();
    if (viewer.empty()) viewer = "moescope-view";  // execvp searches PATH
    std::vector<std::string> arguments{viewer};
    arguments.insert(arguments.end(), options->traces.begin(), options->traces.end());
    if (!options->screenshot.empty())
      arguments.insert(arguments.end(), {"--screenshot", options->screenshot});
    if (!options->panel.empty()) arguments.insert(arguments.end(), {"--panel", options->panel});
    if (!options->size.empty()) arguments.insert(arguments.end(), {"--size", options->size});
    if (!options->against.empty()) {  // last: every trace after --against is the second run
      arguments.push_back("--against");
      arguments.insert(arguments.end(), options->against.begin(), options->against.end());
    }
    std::vector<char*> argv;
    for (std::string& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    std::cout.flush();
    execvp(argv[0], argv.data());
    std::cerr << "moescope view: cannot run " << viewer << ": " << std::strerror(errno)
              << " (build with the viewer: GLFW + Dear ImGui, see README)\n";
    throw CLI::RuntimeError(127);
  });
}

}  // namespace moescope::cli

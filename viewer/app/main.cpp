// moescope-view: the desktop viewer. `moescope view` execs this binary.
//   moescope-view [TRACE... | SUMMARY... | FOLDER...] [--screenshot OUT.png [--panel NAME] [--size
//   WxH] [--finding N]
//                 [--search TEXT]]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/viewer/job_overview.h"
#include "viewer_app.h"

namespace {

void print_usage() {
  std::fprintf(
      stderr,
      "usage: moescope-view [TRACE... | SUMMARY... | FOLDER...] [--against TRACE...] "
      "[--screenshot OUT.png]\n"
      "       [--panel overview|timeline|experts|comm|memory|report|stats|compare] [--size WxH]\n"
      "       [--finding N] [--search TEXT] [--input SCRIPT]\n"
      "  rank summaries (.moesummary, or a folder of them) open the job overview: a rank x step\n"
      "  heatmap; a click loads that rank's trace for the steps around it\n"
      "  --against: the traces after it are a second run, compared with the first (Compare)\n"
      "  screenshot mode: --finding clicks report row N, --search searches, --input plays\n"
      "  'move X Y; click X Y; wheel X Y N; drag X0 Y0 X1 Y1 [right]; key W|A|S|D FRAMES'\n");
}

}  // namespace

int main(int argc, char** argv) {
  using moescope::viewer::ViewerOptions;
  ViewerOptions options;
  bool panel_given = false;
  bool after_against = false;  // trace arguments after --against belong to the second run
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "moescope-view: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (argument == "--screenshot") {
      options.screenshot_path = value("--screenshot");
    } else if (argument == "--panel") {
      const char* name = value("--panel");
      panel_given = true;
      if (!moescope::viewer::parse_panel(name, options.panel)) {
        std::fprintf(
            stderr,
            "moescope-view: unknown panel '%s' (overview, timeline, experts, comm, memory, report, "
            "stats, compare)\n",
            name);
        return 2;
      }
    } else if (argument == "--size") {
      const char* size = value("--size");
      if (std::sscanf(size, "%dx%d", &options.width, &options.height) != 2 || options.width < 200 ||
          options.height < 150 || options.width > 8192 || options.height > 8192) {
        std::fprintf(stderr, "moescope-view: bad --size '%s' (want WxH, 200x150 to 8192x8192)\n",
                     size);
        return 2;
      }
    } else if (argument == "--finding") {
      options.finding = std::atoi(value("--finding"));
      if (options.finding < 1) {
        std::fprintf(stderr, "moescope-view: --finding wants a report row number from 1\n");
        return 2;
      }
    } else if (argument == "--input") {
      options.input = value("--input");
    } else if (argument == "--against") {
      after_against = true;
    } else if (argument == "--search") {
      options.search = value("--search");
    } else if (argument == "-h" || argument == "--help") {
      print_usage();
      return 0;
    } else if (!argument.empty() && argument[0] == '-') {
      std::fprintf(stderr, "moescope-view: unknown option '%s'\n", argument.c_str());
      print_usage();
      return 2;
    } else {
      (after_against ? options.against : options.files).push_back(argument);
    }
  }
  if (after_against && options.against.empty()) {
    std::fprintf(stderr, "moescope-view: --against needs the second run's trace files\n");
    return 2;
  }
  if (!options.against.empty() && options.files.empty()) {
    std::fprintf(stderr, "moescope-view: --against needs a first run to compare with\n");
    return 2;
  }
  std::vector<std::string> all_files = options.files;
  all_files.insert(all_files.end(), options.against.begin(), options.against.end());
  for (const std::string& file : all_files) {
    if (!std::filesystem::exists(file)) {
      std::fprintf(stderr, "moescope-view: cannot open %s: no such file\n", file.c_str());
      return 2;
    }
  }
  if (!options.against.empty()) {
    // Two runs compared: their traces (a folder's, a summary's), never a job overview.
    try {
      options.files =
          moescope::analysis::trace_inputs(moescope::analysis::recorded_trace_files(options.files));
      options.against = moescope::analysis::trace_inputs(
          moescope::analysis::recorded_trace_files(options.against));
    } catch (const std::exception& error) {
      std::fprintf(stderr, "moescope-view: %s\n", error.what());
      return 2;
    }
  } else {
    // Rank summaries (or folders of them) open the job overview, folders of traces the timeline.
    moescope::viewer::ViewerInputs inputs = moescope::viewer::expand_viewer_inputs(options.files);
    if (!inputs.error.empty()) {
      std::fprintf(stderr, "moescope-view: %s\n", inputs.error.c_str());
      return 2;
    }
    options.overview = std::move(inputs.summaries);
    options.files = std::move(inputs.traces);
    if (!options.overview.empty() && !panel_given) {
      options.panel = moescope::viewer::Panel::kOverview;
    }
  }
  if (!options.screenshot_path.empty() && options.files.empty() && options.overview.empty()) {
    std::fprintf(stderr, "moescope-view: --screenshot needs at least one trace file\n");
    return 2;
  }
  moescope::viewer::ViewerApp app(options);
  return app.run();
}

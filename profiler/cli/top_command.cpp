// `moescope top [--once] [--interval S] [--stall-after S] RUN_FOLDER | TRACES...`: a live terminal
// view of a running job from its growing traces (top_frame.h says what a frame shows). A folder
// stands for the .moetrace files in it, found again at each refresh (ranks that start late appear);
// where it also holds an earlier run's files, the view follows the newest run (live_rank_state.h).
// --once prints one frame and exits, like `top -b -n 1`; otherwise the frame is redrawn every
// interval until `q` (or Ctrl-C).
//
// Each refresh reads only what the recorders appended since the previous one
// (analysis/live_rank_state.h): a trace still being written is read up to its last whole chunk,
// and the partial chunk after it is read at a later refresh, once whole.
#include <CLI/CLI.hpp>

#include <poll.h>
#include <termios.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "moescope/analysis/live_rank_state.h"
#include "moescope/analysis/recorded_files.h"
#include "run_inputs.h"
#include "top_frame.h"

namespace moescope::cli {
namespace {

struct TopOptions {
  std::vector<std::string> paths;
  bool once = false;
  double interval_s = 1.0;
  double stall_after_s = kTopStallSeconds;
};

std::string frame_of(const TopOptions& options, analysis::LiveRunState& run) {
  std::vector<std::string> files;
  try {
    files = analysis::trace_files_of(options.paths);
  } catch (const analysis::UnlistableFolder& failure) {
    return std::string("moescope top: ") + failure.what() + "\n";  // said at every refresh
  }
  if (files.empty()) return "moescope top: no .moetrace file yet in the given folder(s)\n";
  run.refresh(files);
  // Damage is said once per file (its first problem), a partial last chunk never: the writer
  // is still writing it.
  std::string errors;
  size_t readable = 0;
  for (const auto& file : run.files()) {
    readable += file->readable() ? 1 : 0;
    if (!file->errors().empty()) {
      errors += "moescope top: " + file->errors().front().to_string();
      if (file->errors().size() > 1) {
        errors += " (+" + std::to_string(file->errors().size() - 1) + " more)";
      }
      errors += "\n";
    }
  }
  // An earlier run's files in the folder: said in one line, the first one's reason in full.
  const auto& left_out = run.other_runs();
  if (!left_out.empty()) {
    errors += "moescope top: following the newest run; left out " +
              std::to_string(left_out.size()) + " file(s) of another run, first " +
              left_out.front().file + ": " + left_out.front().message + "\n";
  }
  if (readable == 0) return errors + "moescope top: nothing readable yet\n";
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return render_top_frame(run, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(),
                          options.stall_after_s) +
         errors;
}

// Terminal input without line buffering while the view runs (restored on exit).
class KeyReader {
 public:
  KeyReader() {
    active_ = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (!active_) return;
    termios raw = saved_;
    raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  }
  ~KeyReader() {
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  // Waits up to `timeout_ms` for a key; true when it was q (or stdin closed).
  bool quit_within(int timeout_ms) {
    pollfd input{STDIN_FILENO, POLLIN, 0};
    if (poll(&input, 1, timeout_ms) <= 0) return false;
    char key = 0;
    ssize_t got = read(STDIN_FILENO, &key, 1);
    return got <= 0 || key == 'q' || key == 'Q';
  }

 private:
  termios saved_{};
  bool active_ = false;
};

void run_top(const TopOptions& options) {
  analysis::LiveRunState run;  // kept between refreshes: each reads only what is new
  if (options.once) {
    std::string frame = frame_of(options, run);
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    return;
  }
  KeyReader keys;
  const int interval_ms = std::max(100, int(options.interval_s * 1000));
  do {
    std::string frame = "\x1b[H\x1b[2J" + frame_of(options, run) + "\n(q quits)\n";
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
  } while (!keys.quit_within(interval_ms));
}

}  // namespace

void add_top_command(CLI::App& app) {
  auto options = std::make_shared<TopOptions>();
  auto* command = app.add_subcommand(
      "top",
      "Live view of a running job: step time per rank, the slowest rank, per-layer "
      "imbalance with the hot experts, exposed communication");
  command->add_option("paths", options->paths, "A folder of .moetrace files, or trace files")
      ->required();
  command->add_flag("--once", options->once, "Print one frame and exit");
  command->add_option("--interval", options->interval_s, "Seconds between refreshes")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  command
      ->add_option("--stall-after", options->stall_after_s,
                   "Call the job stalled when no rank still writing has finished a step for "
                   "this many seconds (and 20 steps); raise it above the longest checkpoint "
                   "save or evaluation")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e7));
  command->callback([options] { run_top(*options); });
}

}  // namespace moescope::cli

#include "record_window_options.h"
#include "moescope/trace/recording_environment.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace moescope::cli {
namespace {

constexpr unsigned long long kMaxFlightRingMegabytes = 4096;  // flight_ring.h

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds);
  return text;
}

// "A:B" with 0 <= A <= B (the recorder's parse_step_window, checked here for a clear error).
std::string check_steps(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) return "expected A:B (first and last step, inclusive)";
  char* end = nullptr;
  long long first = std::strtoll(text.c_str(), &end, 10);
  if (colon == 0 || end != text.c_str() + colon) return "A in A:B is not a step number";
  long long last = std::strtoll(text.c_str() + colon + 1, &end, 10);
  if (colon + 1 >= text.size() || *end) return "B in A:B is not a step number";
  if (first < 0 || last < first) return "expected 0 <= A <= B";
  return "";
}

std::string check_ranks(const std::string& text) {
  if (text.empty()) return "expected a list of ranks such as 0,2-3";
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != ',' && c != '-') {
      return "expected a list of ranks such as 0,2-3";
    }
  }
  return "";
}

std::string check_flight(const std::string& text) {
  if (text.size() > 5 && text.compare(text.size() - 5, 5, "steps") == 0) {
    char* end = nullptr;
    long steps = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() + text.size() - 5 && steps >= 1) return "";
    return "expected Nsteps with N >= 1";
  }
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (end && !*end && seconds > 0) return "";
  return "expected seconds (e.g. 30) or a number of steps (e.g. 200steps)";
}

}  // namespace

bool parse_size(const std::string& text, unsigned long long& bytes) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (!end || end == text.c_str() || !(value > 0)) return false;
  std::string unit = end;
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (!unit.empty()) {
    return false;
  }
  bytes = static_cast<unsigned long long>(std::llround(value * scale));
  return bytes > 0;
}

void add_record_window_options(CLI::App& command, RecordWindowOptions& options) {
  auto validator = [](std::string (*check)(const std::string&), const char* name) {
    return CLI::Validator(check, name);
  };
  command
      .add_option("--steps", options.steps,
                  "Record only training steps A to B (inclusive), as the report numbers them "
                  "(step markers: the zero-code capture's or moescope.step())")
      ->check(validator(&check_steps, "A:B"));
  command.add_option("--delay", options.delay_s, "Start recording SECONDS after the start")
      ->check(CLI::Range(0.0, 1e7));
  command
      .add_option("--duration", options.duration_s,
                  "Stop recording SECONDS after it started (after --delay / step A)")
      ->check(CLI::Range(0.0, 1e7));
  command
      .add_option("--ranks", options.ranks,
                  "Record only these ranks (e.g. 0,2-3); the others run as without moescope")
      ->check(validator(&check_ranks, "LIST"));
  command
      .add_option("--max-size", options.max_size,
                  "Stop writing a process's events once its trace reaches SIZE (e.g. 500M); the "
                  "trace says so")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            unsigned long long bytes = 0;
            if (!parse_size(text, bytes)) return "expected a size such as 500M, 2G or 1048576";
            return bytes < 4096 ? "at least 4096 bytes" : "";
          },
          "SIZE"));
  command
      .add_option("--flight-recorder", options.flight,
                  "Write nothing while the run goes well; keep the last DURATION (seconds, or "
                  "Nsteps) in memory and write it when a trigger fires (hang, crash, exception, "
                  "non-zero exit, SIGUSR1, moescope dump)")
      ->check(validator(&check_flight, "DURATION"));
  command
      .add_option("--flight-recorder-size", options.flight_size,
                  "The flight recorder's memory per process (default 64M, at most 4G)")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            unsigned long long bytes = 0;
            if (!parse_size(text, bytes) || bytes < (1u << 20) ||
                bytes > (kMaxFlightRingMegabytes << 20)) {
              return "expected 1M to 4G";
            }
            return "";
          },
          "SIZE"));
  command
      .add_option("--hang-timeout", options.hang_timeout_s,
                  "Flight recorder: dump when no step ends and no collective progresses for "
                  "SECONDS (off by default)")
      ->check(CLI::Range(0.1, 1e7));
  command
      .add_option("--slow-step", options.slow_step_factor,
                  "Flight recorder: dump when a step runs longer than K x the median of the last "
                  "20 (off by default)")
      ->check(CLI::Range(1.0, 1e6));
}

std::string runs_root() {
  if (const char* forced = std::getenv(trace::environment::kRunsDir); forced && *forced)
    return forced;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    return std::string(runtime) + "/moescope-runs";
  }
  return "/tmp/moescope-runs-" + std::to_string(::getuid());
}

std::string make_run_folder(const RecordWindowOptions& options, const std::string& session,
                            const std::string& pattern, const std::vector<std::string>& command) {
  if (options.flight.empty()) return {};
  std::string root = runs_root();
  ::mkdir(root.c_str(), 0700);
  std::string folder = root + "/" + session;
  if (::mkdir(folder.c_str(), 0700) != 0) {
    std::fprintf(stderr,
                 "moescope record: cannot make the run folder %s (%s); a trigger dumps only "
                 "the process it fires in\n",
                 folder.c_str(), std::strerror(errno));
    return {};
  }
  nlohmann::json run = {{"record_pid", ::getpid()},
                        {"session", session},
                        {"pattern", pattern},
                        {"command", command},
                        {"flight_recorder", options.flight}};
  std::ofstream(folder + "/run.json") << run.dump(2) << "\n";
  return folder;
}

void remove_run_folder(const std::string& run_dir) {
  if (run_dir.empty()) return;
  for (const std::string sub : {"/procs", ""}) {
    std::string folder = run_dir + sub;
    if (DIR* dir = ::opendir(folder.c_str())) {
      while (dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] == '.' || entry->d_type == DT_DIR) continue;
        ::unlink((folder + "/" + entry->d_name).c_str());
      }
      ::closedir(dir);
    }
    ::rmdir(folder.c_str());
  }
}

void export_record_window_environment(const RecordWindowOptions& options,
                                      const std::string& run_dir) {
  auto set = [](const char* name, const std::string& value) {
    if (!value.empty()) ::setenv(name, value.c_str(), 1);
  };
  set(trace::environment::kSteps, options.steps);
  if (options.delay_s > 0) set(trace::environment::kDelayS, seconds_text(options.delay_s));
  if (options.duration_s > 0) set(trace::environment::kDurationS, seconds_text(options.duration_s));
  set(trace::environment::kRanks, options.ranks);
  unsigned long long bytes = 0;
  if (!options.max_size.empty() && parse_size(options.max_size, bytes)) {
    set(trace::environment::kMaxSize, std::to_string(bytes));
  }
  if (!options.flight.empty()) {
    set(trace::environment::kFlight, options.flight);
    if (parse_size(options.flight_size, bytes)) {
      set(trace::environment::kFlightMb, std::to_string(std::max(1ull, bytes >> 20)));
    }
    set(trace::environment::kRunDir, run_dir);
    if (options.hang_timeout_s > 0) {
      set(trace::environment::kHangTimeoutS, seconds_text(options.hang_timeout_s));
    }
    if (options.slow_step_factor > 0) {
      set(trace::environment::kSlowStepFactor, seconds_text(options.slow_step_factor));
    }
  }
}

}  // namespace moescope::cli

// `moescope dump [RUN] [--wait SECONDS]`: makes every process of a running
// `moescope record --flight-recorder` run write its ring now (docs/flight-recorder.md). The run
// is found through its run folder (record_window_options.h: runs_root()), so no pid is needed:
// with one run going, `moescope dump` alone; with several, name one by its session id or folder.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "moescope/recorder.h"
#include "record_window_options.h"
#include "run_folder.h"

namespace moescope::cli {
namespace {

struct RunFolder {
  std::string path;
  std::string session;
  long record_pid = 0;
  std::vector<std::string> command;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  if (!file) return nullptr;
  return nlohmann::json::parse(file, nullptr, false);
}

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

bool read_run(const std::string& path, RunFolder& out) {
  nlohmann::json run = read_json(path + "/run.json");
  if (!run.is_object()) return false;
  out.path = path;
  out.session = run.value("session", "");
  out.record_pid = run.value("record_pid", 0L);
  if (run.contains("command") && run["command"].is_array()) {
    out.command = run["command"].get<std::vector<std::string>>();
  }
  return true;
}

std::vector<RunFolder> live_runs() {
  std::vector<RunFolder> runs;
  std::string root = runs_root();
  DIR* dir = ::opendir(root.c_str());
  if (!dir) return runs;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    RunFolder run;
    if (read_run(root + "/" + entry->d_name, run) && process_alive(run.record_pid)) {
      runs.push_back(run);
    }
  }
  ::closedir(dir);
  return runs;
}

// pid -> the process entry (procs/PID.json) of a run.
std::map<long, nlohmann::json> process_entries(const std::string& run_dir) {
  std::map<long, nlohmann::json> entries;
  std::string folder = run_dir + "/procs";
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return entries;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    nlohmann::json parsed = read_json(folder + "/" + name);
    if (parsed.is_object()) entries[parsed.value("pid", 0L)] = parsed;
  }
  ::closedir(dir);
  return entries;
}

std::string describe(const RunFolder& run) {
  std::string command;
  for (const auto& part : run.command) command += (command.empty() ? "" : " ") + part;
  return run.session + "  (moescope record pid " + std::to_string(run.record_pid) + ": " + command +
         ")";
}

int run_dump(const std::string& wanted, double wait_s) {
  RunFolder run;
  if (!wanted.empty() && wanted.find('/') != std::string::npos) {
    if (!read_run(wanted, run)) {
      std::fprintf(stderr, "moescope dump: %s is not a run folder (no run.json)\n", wanted.c_str());
      return 2;
    }
  } else {
    std::vector<RunFolder> runs = live_runs();
    std::vector<RunFolder> matching;
    for (const auto& candidate : runs) {
      if (wanted.empty() || candidate.session.find(wanted) != std::string::npos) {
        matching.push_back(candidate);
      }
    }
    if (matching.empty()) {
      std::fprintf(stderr,
                   "moescope dump: no running `moescope record --flight-recorder` run%s%s "
                   "(looked in %s)\n",
                   wanted.empty() ? "" : " matches ", wanted.c_str(), runs_root().c_str());
      return 2;
    }
    if (matching.size() > 1) {
      std::fprintf(stderr, "moescope dump: %zu runs are going; name one:\n", matching.size());
      for (const auto& candidate : matching) {
        std::fprintf(stderr, "  %s\n", describe(candidate).c_str());
      }
      return 2;
    }
    run = matching.front();
  }
  auto before = process_entries(run.path);
  if (inject::announce_run_trigger(run.path, -1, MOESCOPE_TRIGGER_SIGNAL, 0, ::getpid()) == 0) {
    std::fprintf(stderr, "moescope dump: cannot write the trigger into %s\n", run.path.c_str());
    return 2;
  }
  std::fprintf(stderr, "moescope dump: asked %zu process%s of %s to write their ring\n",
               before.size(), before.size() == 1 ? "" : "es", run.session.c_str());
  struct timespec pause = {0, 100 * 1000 * 1000};
  std::map<long, std::string> written;
  for (double waited = 0; waited < wait_s; waited += 0.1) {
    auto now = process_entries(run.path);
    size_t pending = 0;
    for (const auto& [pid, entry] : now) {
      size_t had =
          before.count(pid) ? before[pid].value("dumps", nlohmann::json::array()).size() : 0;
      auto dumps = entry.value("dumps", nlohmann::json::array());
      if (dumps.size() > had) {
        written[pid] = dumps.back().get<std::string>();
      } else if (!entry.value("exited", false) && process_alive(pid)) {
        ++pending;
      }
    }
    if (pending == 0) break;
    nanosleep(&pause, nullptr);
  }
  for (const auto& [pid, path] : written) std::printf("%s\n", path.c_str());
  if (written.empty()) {
    std::fprintf(stderr, "moescope dump: no process wrote a dump within %.0f s\n", wait_s);
    return 1;
  }
  return 0;
}

}  // namespace

void add_dump_command(CLI::App& app) {
  auto wanted = std::make_shared<std::string>();
  auto wait_s = std::make_shared<double>(30.0);
  auto* command = app.add_subcommand(
      "dump", "Make every process of a running --flight-recorder run write its ring now");
  command->add_option("run", *wanted,
                      "The run: its session id (or a part of it) or its run folder; may be left "
                      "out when one run is going");
  command->add_option("--wait", *wait_s, "Wait at most SECONDS for the dumps (default 30)")
      ->check(CLI::Range(0.0, 3600.0));
  command->footer("Prints the dump files written, one per line.");
  command->callback([wanted, wait_s] {
    int code = run_dump(*wanted, *wait_s);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace moescope::cli

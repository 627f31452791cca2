// `moescope record [-o PATTERN] [--fork=trace|skip] [--no-cuda] [--no-nccl] [--no-nvtx]
//                  [--flush-ms N] [--no-summary] -- COMMAND ARGS...`
// Runs COMMAND with the capture shim preloaded (docs/capture.md): every process it starts
// writes its own trace. The command's stdin/stdout/stderr and exit code pass through unchanged
// (128 + signal when it is killed); what moescope says goes to stderr. When the command has
// ended, each trace's rank summary is written beside it (record_summaries.h), here, on the node
// where those ranks ran.
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "moescope/trace/recording_environment.h"
#include "preload_list.h"
#include "record_output.h"
#include "record_summaries.h"
#include "record_window_options.h"
#include "shim_trace_path.h"

namespace moescope::cli {
namespace {

struct RecordOptions {
  std::string output = "moescope.%r.moetrace";
  std::string fork_mode = "trace";
  bool no_cuda = false;
  bool no_nccl = false;
  bool no_nvtx = false;
  bool no_python = false;   // no zero-code capture of Python programs
  std::string step_marker;  // module:NAME | function:MODULE:QUALNAME
  int module_depth = 2;
  bool torch_ops = false;
  bool no_summary = false;  // no rank summaries beside the traces at the end
  // Live MoE health scalars of Python programs (docs/metrics.md): "" = into the program's own
  // TensorBoard / W&B run only, "off", or tensorboard:DIR / jsonl:FILE (comma-separated).
  std::string metrics;
  bool metrics_detail = false;
  int flush_ms = 0;            // 0 = the recorder's default
  RecordWindowOptions window;  // --steps/--delay/--duration/--ranks/--max-size/--flight-recorder
  std::string run_dir;         // the flight recorder's run folder (record_window_options.h)
  std::vector<std::string> command;
};

// The default shim, and the one without any NCCL symbol: with --no-nccl nothing of ours sits
// between the program and NCCL.
constexpr const char* kDefaultShim = "libmoescope_inject.so";
constexpr const char* kShimWithoutNccl = "libmoescope_inject_no_nccl.so";

// MOESCOPE_NCCL=0 in the environment of `moescope record` means --no-nccl.
bool nccl_switched_off(const RecordOptions& options) {
  const char* value = std::getenv(trace::environment::kNccl);
  return options.no_nccl || (value && value[0] == '0');
}

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool readable_file(const std::string& path) {
  return ::access(path.c_str(), R_OK) == 0;
}

// The shim variant `file_name` next to this executable (build tree: bin/../lib, install:
// bin/../lib or the configured libdir), or in the folder of MOESCOPE_INJECT_LIBRARY (which names
// the default variant).
std::string find_inject_library(const std::string& file_name, std::vector<std::string>& looked_in) {
  std::vector<std::string> candidates;
  if (const char* forced = std::getenv(trace::environment::kInjectLibrary); forced && *forced) {
    std::string path = forced;
    candidates.push_back(path.substr(path.rfind('/') + 1) == kDefaultShim
                             ? directory_of(path) + "/" + file_name
                             : path);
  } else {
    char self[PATH_MAX];
    ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (length > 0) {
      self[length] = '\0';
      candidates.push_back(directory_of(directory_of(self)) + "/lib/" + file_name);
    }
#ifdef MOESCOPE_INSTALL_LIBDIR
    candidates.push_back(std::string(MOESCOPE_INSTALL_LIBDIR) + "/" + file_name);
#endif
  }
  for (const auto& candidate : candidates) {
    looked_in.push_back(candidate);
    if (readable_file(candidate)) {
      char resolved[PATH_MAX];
      return ::realpath(candidate.c_str(), resolved) ? std::string(resolved) : candidate;
    }
  }
  return {};
}

// moescope's Python folder (`moescope_startup/sitecustomize.py`, and the `moescope` module
// except in a pip install, which puts it in site-packages) next to this executable:
// <prefix>/share/moescope/python, in an installation and (a link to profiler/python) in the
// build tree.
std::string installed_python_module_dir() {
  char self[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) return {};
  self[length] = '\0';
  std::string directory = directory_of(directory_of(self)) + "/share/moescope/python";
  return readable_file(directory + "/moescope_startup/sitecustomize.py") ? directory
                                                                         : std::string();
}

// Python programs: the `moescope` module appended to PYTHONPATH (a copy the program already
// finds keeps precedence), and, unless --no-python, moescope_startup/ first, whose
// sitecustomize turns on the zero-code capture (docs/autocapture.md) and then runs the
// program's own sitecustomize.
void set_python_environment(const RecordOptions& options, const std::string& library) {
  std::string python = installed_python_module_dir();
  if (python.empty()) return;
  const char* existing_value = std::getenv("PYTHONPATH");
  std::string existing = existing_value ? existing_value : "";
  std::string joined = existing.empty() ? python : existing + ":" + python;
  if (!options.no_python) joined = python + "/moescope_startup:" + joined;
  ::setenv("PYTHONPATH", joined.c_str(), 1);
  ::setenv(trace::environment::kAutocapture, options.no_python ? "0" : "1", 1);
  ::setenv(trace::environment::kStepMarker, options.step_marker.c_str(), 1);
  ::setenv(trace::environment::kModuleDepth, std::to_string(options.module_depth).c_str(), 1);
  ::setenv(trace::environment::kTorchOps, options.torch_ops ? "1" : "0", 1);
  ::setenv(trace::environment::kMetrics, options.metrics.c_str(), 1);
  ::setenv(trace::environment::kMetricsDetail, options.metrics_detail ? "1" : "0", 1);
  // The library next to the shim, unless the user named another one. A pip install has none
  // there: the Python side then looks in its per-user build cache (torch_capture_build.py).
  std::string torch_capture = directory_of(library) + "/libmoescope_torch_capture.so";
  if (readable_file(torch_capture)) {
    ::setenv(trace::environment::kTorchCaptureLibrary, torch_capture.c_str(), /*overwrite=*/0);
  }
}

std::string absolute_pattern(const std::string& pattern) {
  if (!pattern.empty() && pattern[0] == '/') return pattern;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof(cwd))) return pattern;
  return std::string(cwd) + "/" + pattern;
}

bool is_sanitizer_runtime(const std::string& library) {
  std::string name = library.substr(library.rfind('/') + 1);
  for (const char* prefix : {"libasan", "libtsan", "libubsan", "liblsan", "libclang_rt."}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// LD_PRELOAD with the shim first (its recorder and interposed functions must win), after a
// sanitizer runtime if one is preloaded (those must come first of all).
std::string preload_with(const std::string& library) {
  std::vector<std::string> first, rest;
  for (const std::string& entry : inject::preload_entries(std::getenv("LD_PRELOAD"))) {
    if (entry != library) (is_sanitizer_runtime(entry) ? first : rest).push_back(entry);
  }
  first.push_back(library);
  first.insert(first.end(), rest.begin(), rest.end());
  std::string joined;
  for (const auto& entry : first) joined += (joined.empty() ? "" : ":") + entry;
  return joined;
}

std::string session_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return std::string(host) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
}

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_stop_summaries = 0;

// Forwards a signal sent to `moescope record` itself (kill, timeout, a job scheduler) to the
// command. A terminal's Ctrl-C already reaches the whole process group: not sent twice. A kill
// of the whole group reaches the command directly too: its shim takes the pair as one
// (shim_signals.cpp, MOESCOPE_RECORD_PID). Once the command has ended, any of these signals
// stops the summaries instead (they are only a convenience; `moescope summarize` makes them).
void forward_signal(int signal_number, siginfo_t* info, void*) {
  bool sent_by_process = info && (info->si_code == SI_USER || info->si_code == SI_QUEUE);
  if (g_child_pid > 0 && sent_by_process) ::kill(g_child_pid, signal_number);
  if (g_child_pid == 0) g_stop_summaries = 1;
}

// Summaries a few at a time: one per core, at most 8 (a node's ranks), each loading one trace.
unsigned summary_parallelism() {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1u : (cores < 8 ? cores : 8u);
}

void install_forwarding() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = &forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    ::sigaction(signal_number, &action, nullptr);
  }
}

std::string glob_of(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      out += pattern[i + 1] == '%' ? "%" : "*";
      ++i;
    } else if (pattern[i] == '*' || pattern[i] == '?' || pattern[i] == '[') {
      out += '\\';
      out += pattern[i];
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Trace files of this run: every expansion of the pattern (and of its per-pid variant) written
// since the run started.
std::vector<std::string> traces_written(const std::string& pattern, time_t since) {
  std::set<std::string> found;
  for (const std::string& variant : {pattern, inject::pattern_with_pid(pattern),
                                     inject::pattern_for_process(pattern, false, true)}) {
    glob_t matches;
    if (::glob(glob_of(variant).c_str(), 0, nullptr, &matches) == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        struct stat info;
        if (::stat(matches.gl_pathv[i], &info) == 0 && S_ISREG(info.st_mode) &&
            info.st_mtime >= since) {
          found.insert(matches.gl_pathv[i]);
        }
      }
    }
    ::globfree(&matches);
  }
  return {found.begin(), found.end()};
}

[[noreturn]] void exec_command(const RecordOptions& options, const std::string& library,
                               const std::string& pattern, const std::string& session) {
  ::setenv("LD_PRELOAD", preload_with(library).c_str(), 1);
  set_python_environment(options, library);
  // --no-nvtx: NVTX finds its tool only through this variable, so leaving it alone keeps the
  // shim out of every NVTX call (and keeps another tool the user set).
  if (!options.no_nvtx) ::setenv("NVTX_INJECTION64_PATH", library.c_str(), 1);
  ::setenv(trace::environment::kOutput, pattern.c_str(), 1);
  // The shim in the command pairs a signal forwarded by us with the same one sent to the group.
  ::setenv(trace::environment::kRecordPid, std::to_string(::getppid()).c_str(), 1);  // in the child
  ::setenv(trace::environment::kFork, options.fork_mode.c_str(), 1);
  ::setenv(trace::environment::kCuda, options.no_cuda ? "0" : "1", 1);
  ::setenv(trace::environment::kNccl, nccl_switched_off(options) ? "0" : "1", 1);
  ::setenv(trace::environment::kNvtx, options.no_nvtx ? "0" : "1", 1);
  ::setenv(trace::environment::kSession, session.c_str(), 1);
  ::setenv(trace::environment::kRootPid, std::to_string(::getpid()).c_str(), 1);
  if (options.flush_ms > 0)
    ::setenv(trace::environment::kFlushMs, std::to_string(options.flush_ms).c_str(), 1);
  export_record_window_environment(options.window, options.run_dir);
  if (options.no_cuda) {
    ::setenv(trace::environment::kCupti, "off", 1);
  } else {
    // The CUDA driver calls the shim's InitializeInjection at cuInit: CUPTI starts early.
    ::setenv("CUDA_INJECTION64_PATH", library.c_str(), 1);
  }
  std::vector<char*> argv;
  for (const auto& argument : options.command) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  int error = errno;
  std::fprintf(stderr, "moescope record: cannot run '%s': %s\n", argv[0], std::strerror(error));
  ::_exit(error == ENOENT ? 127 : 126);
}

int run_record(RecordOptions& options) {
  std::vector<std::string> looked_in;
  const char* shim = nccl_switched_off(options) ? kShimWithoutNccl : kDefaultShim;
  std::string library = find_inject_library(shim, looked_in);
  if (library.empty()) {
    std::string where;
    for (const auto& path : looked_in) where += "\n  " + path;
    std::fprintf(stderr,
                 "moescope record: cannot find %s; looked in:%s\n"
                 "(build the targets moescope_inject and moescope_inject_no_nccl, or set "
                 "MOESCOPE_INJECT_LIBRARY)\n",
                 shim, where.c_str());
    return 2;
  }
  if (const char* nvtx = std::getenv("NVTX_INJECTION64_PATH");
      !options.no_nvtx && nvtx && *nvtx && library != nvtx) {
    std::fprintf(stderr,
                 "moescope record: replacing NVTX_INJECTION64_PATH=%s (only one NVTX tool can "
                 "attach)\n",
                 nvtx);
  }
  std::string pattern = absolute_pattern(options.output);
  if (std::string problem = prepare_trace_output(pattern); !problem.empty()) {
    std::fprintf(stderr, "moescope record: -o %s: %s; not starting the program\n",
                 options.output.c_str(), problem.c_str());
    return 2;
  }
  std::string session = session_id();
  time_t started = ::time(nullptr);
  options.run_dir = make_run_folder(options.window, session, pattern, options.command);
  std::fflush(nullptr);

  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "moescope record: fork failed: %s\n", std::strerror(errno));
    return 2;
  }
  if (child == 0) exec_command(options, library, pattern, session);
  g_child_pid = child;
  install_forwarding();

  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "moescope record: waitpid failed: %s\n", std::strerror(errno));
      return 2;
    }
  }
  g_child_pid = 0;  // reaped: its pid may be reused, and a signal now stops the summaries
  int exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                  : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                        : 1;

  remove_run_folder(options.run_dir);
  std::vector<std::string> traces;
  for (const auto& path : traces_written(pattern, started - 1)) {
    if (!written_by_session(path, session)) continue;  // not a trace of this run
    if (inject::trace_is_empty_helper(path, session)) {
      ::unlink(path.c_str());
    } else {
      traces.push_back(path);
    }
  }
  if (traces.empty() && !options.window.flight.empty()) {
    std::fprintf(stderr, "moescope record: flight recorder: no trigger fired, nothing written\n");
  } else if (traces.empty()) {
    std::fprintf(stderr, "moescope record: no trace written (pattern %s)\n", pattern.c_str());
  } else {
    std::fprintf(stderr, "moescope record: %zu trace%s written:\n", traces.size(),
                 traces.size() == 1 ? "" : "s");
    for (const auto& path : traces) std::fprintf(stderr, "  %s\n", path.c_str());
  }
  // Flight-recorder dumps are traces of this run too: they get their summaries the same way.
  if (!options.no_summary) {
    std::fflush(stderr);
    write_summaries_beside(traces, summary_parallelism(), &g_stop_summaries);
  }
  return exit_code;
}

}  // namespace

void add_record_command(CLI::App& app) {
  auto options = std::make_shared<RecordOptions>();
  auto* command = app.add_subcommand(
      "record", "Run a command with NVTX/CUDA/NCCL capture; one trace per process");
  command->add_option("-o,--output", options->output,
                      "Trace path pattern: %r rank, %p pid, %h host (default "
                      "moescope.%r.moetrace)");
  command
      ->add_option("--fork", options->fork_mode,
                   "Forked children: 'trace' (own trace, pid in its name) or 'skip'")
      ->check(CLI::IsMember({"trace", "skip"}));
  command->add_flag("--no-cuda", options->no_cuda, "Do not capture CUDA activity (CUPTI)");
  command->add_flag("--no-nccl", options->no_nccl,
                    "Leave NCCL alone: no NCCL records, no NCCL symbol of moescope in the "
                    "process (also MOESCOPE_NCCL=0)");
  command->add_flag("--no-nvtx", options->no_nvtx,
                    "Do not attach to NVTX (NVTX_INJECTION64_PATH is left as it is)");
  command->add_flag("--no-python", options->no_python,
                    "No zero-code capture of Python programs (steps, phases, modules, "
                    "collectives, expert load)");
  command
      ->add_option("--metrics", options->metrics,
                   "Python programs: MoE health scalars also to tensorboard:DIR or "
                   "jsonl:FILE (comma-separated), or 'off'; by default they go only into the "
                   "program's own SummaryWriter / wandb run")
      ->check(CLI::Validator(
          [](const std::string& spec) -> std::string {
            if (spec == "off") return "";
            size_t begin = 0;
            while (begin <= spec.size()) {
              size_t end = spec.find(',', begin);
              std::string part = spec.substr(begin, end == std::string::npos ? end : end - begin);
              bool tensorboard = part.rfind("tensorboard:", 0) == 0 && part.size() > 12;
              bool jsonl = part.rfind("jsonl:", 0) == 0 && part.size() > 6;
              if (!tensorboard && !jsonl) {
                return "expected tensorboard:DIR, jsonl:FILE or off, got '" + part + "'";
              }
              if (end == std::string::npos) break;
              begin = end + 1;
            }
            return "";
          },
          "SINK"));
  command->add_flag("--metrics-detail", options->metrics_detail,
                    "With the live metrics: each expert's share of tokens per layer too");
  command
      ->add_option("--step-marker", options->step_marker,
                   "What a training step is in a Python program: module:NAME (each forward "
                   "of that module path or class) or function:MODULE:QUALNAME (each call); "
                   "default: optimizer steps, or torch.profiler steps when the program "
                   "makes them")
      ->check(CLI::Validator(
          [](const std::string& marker) -> std::string {
            bool module = marker.rfind("module:", 0) == 0 && marker.size() > 7;
            bool function =
                marker.rfind("function:", 0) == 0 && marker.find(':', 9) != std::string::npos;
            return module || function ? "" : "expected module:NAME or function:MODULE:QUALNAME";
          },
          "MARKER"));
  command
      ->add_option("--module-depth", options->module_depth,
                   "Module spans down to this depth below a repeated block (-1: none)")
      ->check(CLI::Range(-1, 16));
  command->add_flag("--torch-ops", options->torch_ops,
                    "Every ATen operator as a span with its input shapes (slower)");
  command
      ->add_option("--flush-ms", options->flush_ms,
                   "Write buffered events at least this often (1..200 ms, default 100)")
      ->check(CLI::Range(1, 200));
  command->add_flag("--no-summary", options->no_summary,
                    "Write no rank summary (TRACE.moesummary, what `moescope summarize` writes) "
                    "beside each trace when the command has ended");
  add_record_window_options(*command, options->window);
  // Everything after "--" is the command, passed on untouched ("--" may be left out when the
  // command has no options of its own).
  auto positional = std::make_shared<std::vector<std::string>>();
  command->add_option("command", *positional, "The command to run and its arguments");

  command->footer(
      "Example: moescope record -o run.%r.moetrace -- torchrun --nproc_per_node 2 train.py");
  command->callback([options, positional] {
    options->command = *positional;
    if (options->command.empty()) {
      throw CLI::ValidationError("record",
                                 "no command given (moescope record [options] -- COMMAND ...)");
    }
    int code = run_record(*options);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace moescope::cli

#include "capture_test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace moescope::testing {

// The environment wins (set by CTest); the directories this binary was configured with are the
// fallback, so a test runs the same from any working directory.
std::string build_dir() {
  const char* dir = std::getenv("MOESCOPE_BUILD_DIR");
  return dir && *dir ? dir : MOESCOPE_TEST_BUILD_DIR;
}

std::string source_dir() {
  const char* dir = std::getenv("MOESCOPE_SOURCE_DIR");
  return dir && *dir ? dir : MOESCOPE_TEST_SOURCE_DIR;
}

std::string moescope_binary() {
  return build_dir() + "/bin/moescope";
}

std::vector<std::string> record_command(const std::string& pattern,
                                        const std::vector<std::string>& command,
                                        const std::vector<std::string>& record_flags) {
  std::vector<std::string> argv = {moescope_binary(), "record", "-o", pattern};
  argv.insert(argv.end(), record_flags.begin(), record_flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

namespace {

double now_seconds() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const RunOptions& options,
                             int out_fd, int err_fd) {
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  for (const auto& name : options.unset_environment) unsetenv(name.c_str());
  for (const auto& [name, value] : options.environment) setenv(name.c_str(), value.c_str(), 1);
#ifdef MOESCOPE_TEST_SANITIZER_RUNTIME
  // Sanitizer builds: the shim is instrumented, so every program it enters needs the runtime
  // loaded first (`moescope record` keeps it in front); leaks of the hosts are not ours.
  std::string preload = MOESCOPE_TEST_SANITIZER_RUNTIME;
  if (const char* existing = getenv("LD_PRELOAD"); existing && *existing) {
    preload += std::string(":") + existing;
  }
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
#endif
  if (options.file_size_limit >= 0) {
    struct rlimit limit = {static_cast<rlim_t>(options.file_size_limit),
                           static_cast<rlim_t>(options.file_size_limit)};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  // Own process group: a signal the test sends reaches only what it targets.
  setpgid(0, 0);
  std::vector<char*> args;
  for (const auto& argument : argv) args.push_back(const_cast<char*>(argument.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

}  // namespace

RunResult run_program(const std::vector<std::string>& argv, const RunOptions& options) {
  RunResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  pid_t child = fork();
  if (child == 0) exec_child(argv, options, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  bool signal_sent = false;
  double deadline = now_seconds() + options.timeout_seconds;
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_pipes = 2;
  while (open_pipes > 0) {
    int ready = poll(fds, 2, 100);
    if (now_seconds() > deadline) {
      kill(child, SIGKILL);
      result.timed_out = true;
      break;
    }
    if (ready <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buffer[4096];
      ssize_t got = read(fds[i].fd, buffer, sizeof(buffer));
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      (i == 0 ? result.out : result.err).append(buffer, got);
    }
    if (!signal_sent && options.signal_number && !options.signal_after_output.empty() &&
        result.out.find(options.signal_after_output) != std::string::npos) {
      if (options.signal_delay_ms > 0) {
        struct timespec pause = {options.signal_delay_ms / 1000,
                                 (options.signal_delay_ms % 1000) * 1000000L};
        nanosleep(&pause, nullptr);
      }
      kill(options.signal_process_group ? -child : child, options.signal_number);
      signal_sent = true;
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  waitpid(child, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

RunResult run_torchrun_program(const std::vector<std::string>& argv, const RunOptions& options) {
  static const std::string kTeardownAbort = "terminate called without an active exception";
  RunResult first = run_program(argv, options);
  if (first.exit_code == 0 || first.err.find(kTeardownAbort) == std::string::npos) return first;
  std::fprintf(stderr, "note: a rank aborted in torch's teardown (%s); running once more\n",
               kTeardownAbort.c_str());
  return run_program(argv, options);
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/moescope_capture_XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  path_ = mkdtemp(buffer.data()) ? buffer.data() : "";
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty() && !std::getenv("MOESCOPE_KEEP_TEST_FILES")) {
    std::filesystem::remove_all(path_, ignored);
  }
}

std::vector<std::string> TempDir::files(const std::string& suffix) const {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(path_, error)) {
    std::string name = entry.path().string();
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found.push_back(name);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string name_of(const LoadedTrace& trace, uint32_t id) {
  if (id == 0) return "";
  auto it = trace.strings.find(id);
  return it == trace.strings.end() ? "<undefined " + std::to_string(id) + ">" : it->second;
}

size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

bool python_has_module(const std::string& module) {
  RunResult result = run_program({"python3", "-c", "import " + module});
  return result.exit_code == 0;
}

std::vector<RebuiltSpan> rebuild_spans(const LoadedTrace& trace) {
  std::vector<RebuiltSpan> spans;
  std::map<uint32_t, std::vector<size_t>> open;  // stream -> indices into spans
  for (const auto& record : trace.records) {
    if (record.kind() == trace::RecordKind::kSpanBegin) {
      auto begin = record.as<trace::SpanBeginRecord>();
      auto& stack = open[record.stream];
      RebuiltSpan span{record.stream,
                       name_of(trace, begin.header.name),
                       name_of(trace, begin.domain),
                       static_cast<int>(stack.size()),
                       stack.empty() ? "" : spans[stack.back()].name,
                       false};
      stack.push_back(spans.size());
      spans.push_back(span);
    } else if (record.kind() == trace::RecordKind::kSpanEnd) {
      auto& stack = open[record.stream];
      if (stack.empty()) continue;
      spans[stack.back()].closed = true;
      stack.pop_back();
    }
  }
  return spans;
}

std::map<uint32_t, std::string> thread_names(const LoadedTrace& trace) {
  std::map<uint32_t, std::string> names;
  for (const auto& record : trace.of_kind(trace::RecordKind::kThreadInfo)) {
    names[record.stream] = name_of(trace, record.header().name);
  }
  return names;
}

}  // namespace moescope::testing

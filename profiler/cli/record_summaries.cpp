// `moescope record`'s summaries after the run (see record_summaries.h).
#include "record_summaries.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "moescope/analysis/rank_summary.h"

namespace moescope::cli {
namespace {

struct Summarizer {
  pid_t pid = -1;
  std::string trace;
  std::FILE* errors = nullptr;  // the child's stderr, read when it has ended
};

// This very program, for the summarizing children: through /proc/self/exe, which stays this
// binary after its file was replaced or deleted (a rebuild or an upgrade while a days-long job
// ran), where the file's path would name the new binary or nothing.
constexpr const char* kThisExecutable = "/proc/self/exe";

// The first line the child wrote to stderr, without its "moescope summarize: " prefix.
std::string first_error_line(std::FILE* errors) {
  if (!errors) return {};
  std::rewind(errors);
  char line[1024];
  if (!std::fgets(line, sizeof(line), errors)) return {};
  std::string text = line;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const std::string prefix = "moescope summarize: ";
  if (text.rfind(prefix, 0) == 0) text.erase(0, prefix.size());
  return text;
}

// Starts `moescope summarize -q TRACE` with stdin and stdout on /dev/null (the terminal and the
// pipes the user reads are the program's alone) and stderr into a temporary file.
Summarizer start(const std::string& trace) {
  Summarizer child;
  child.trace = trace;
  child.errors = std::tmpfile();
  std::fflush(nullptr);
  child.pid = ::fork();
  if (child.pid != 0) return child;  // the parent, or fork failed (pid -1)
  const int null_device = ::open("/dev/null", O_RDWR);
  if (null_device >= 0) {
    ::dup2(null_device, STDIN_FILENO);
    ::dup2(null_device, STDOUT_FILENO);
  }
  ::dup2(child.errors ? fileno(child.errors) : null_device, STDERR_FILENO);
  // Terminal signals stay with `record`, which stops its children itself (record_command.cpp).
  ::setpgid(0, 0);
  const char* argv[] = {"moescope", "summarize", "-q", trace.c_str(), nullptr};
  ::execv(kThisExecutable, const_cast<char* const*>(argv));
  std::fprintf(stderr, "cannot run moescope (%s): %s\n", kThisExecutable, std::strerror(errno));
  ::_exit(127);
}

// Says in one line why `child`, which ended with `status`, wrote no summary; false then.
bool report_result(const Summarizer& child, int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  std::string why = first_error_line(child.errors);
  if (WIFSIGNALED(status)) {
    why = "moescope summarize ended by signal " + std::to_string(WTERMSIG(status)) +
          (why.empty() ? "" : " (" + why + ")");
  } else if (why.empty()) {
    why = "moescope summarize exited with status " + std::to_string(WEXITSTATUS(status));
  }
  std::fprintf(stderr, "moescope record: no summary for %s: %s\n", child.trace.c_str(),
               why.c_str());
  return false;
}

void close_errors(Summarizer& child) {
  if (child.errors) std::fclose(child.errors);
  child.errors = nullptr;
}

void sleep_briefly() {
  struct timespec pause = {0, 10 * 1000 * 1000};
  ::nanosleep(&pause, nullptr);
}

}  // namespace

size_t write_summaries_beside(const std::vector<std::string>& traces, unsigned parallel,
                              const volatile sig_atomic_t* stop) {
  if (traces.empty()) return 0;
  if (::access(kThisExecutable, X_OK) != 0) {
    std::fprintf(stderr,
                 "moescope record: no summaries: cannot find the moescope executable "
                 "(/proc/self/exe); run `moescope summarize` on the traces\n");
    return 0;
  }
  if (parallel == 0) parallel = 1;
  size_t next = 0, written = 0;
  std::vector<Summarizer> running;
  // Polled rather than a blocking wait: `record`'s signal handlers restart system calls, and a
  // signal must stop the summaries within moments.
  while (next < traces.size() || !running.empty()) {
    if (*stop) {
      for (Summarizer& child : running) ::kill(child.pid, SIGTERM);
      for (Summarizer& child : running) {
        int status = 0;
        while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
        }
        ::unlink((analysis::summary_path_for(child.trace) + ".partial").c_str());
        close_errors(child);
      }
      const size_t left = traces.size() - written;
      std::fprintf(stderr,
                   "moescope record: stopped by a signal: %zu trace%s without a summary "
                   "(moescope summarize writes them)\n",
                   left, left == 1 ? "" : "s");
      return written;
    }
    while (running.size() < parallel && next < traces.size()) {
      Summarizer child = start(traces[next++]);
      if (child.pid < 0) {
        std::fprintf(stderr, "moescope record: no summary for %s: fork failed: %s\n",
                     child.trace.c_str(), std::strerror(errno));
        close_errors(child);
        continue;
      }
      running.push_back(child);
    }
    bool any_ended = false;
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      const pid_t ended = ::waitpid(running[i].pid, &status, WNOHANG);
      if (ended == 0 || (ended < 0 && errno == EINTR)) {
        ++i;
        continue;
      }
      any_ended = true;
      if (ended < 0) status = W_EXITCODE(127, 0);  // cannot happen: the child is ours
      written += report_result(running[i], status);
      close_errors(running[i]);
      running.erase(running.begin() + std::ptrdiff_t(i));
    }
    if (!any_ended && !running.empty()) sleep_briefly();
  }
  return written;
}

}  // namespace moescope::cli

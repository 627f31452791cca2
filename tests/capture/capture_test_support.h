// Running programs under `moescope record` in tests: spawn with pipes, optional signal once the
// program printed a marker, resource limits, and reading the traces back.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "trace_test_reading.h"

namespace moescope::testing {

struct RunOptions {
  std::map<std::string, std::string> environment;  // added to (or replacing) the parent's
  std::vector<std::string> unset_environment;
  // When stdout contains `signal_after_output`, send `signal_number` to the spawned process.
  std::string signal_after_output;
  int signal_number = 0;
  int signal_delay_ms = 0;            // wait this long after the marker before signalling
  bool signal_process_group = false;  // signal the whole group (e.g. SIGKILL: nothing forwards)
  long file_size_limit = -1;  // RLIMIT_FSIZE in bytes for the spawned process, -1 = unchanged
  int timeout_seconds = 60;   // then SIGKILL, and the result says so
};

struct RunResult {
  int exit_code = -1;  // exit status, or 128 + signal when killed
  bool timed_out = false;
  std::string out;
  std::string err;
};

RunResult run_program(const std::vector<std::string>& argv, const RunOptions& options = {});
// run_program for a torchrun job on Gloo: torch's Gloo teardown sometimes aborts a rank at exit
// ("terminate called without an active exception"), with or without moescope (about 1 run in 10
// here). That abort, and only that, earns the job one more run.
RunResult run_torchrun_program(const std::vector<std::string>& argv, const RunOptions& options);

std::string build_dir();
std::string source_dir();
std::string moescope_binary();
// argv of `moescope record -o <pattern> <record_flags...> -- <command...>`.
std::vector<std::string> record_command(const std::string& pattern,
                                        const std::vector<std::string>& command,
                                        const std::vector<std::string>& record_flags = {});

// A fresh empty directory, removed with its files by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // Files in the directory whose name ends with `suffix`, sorted.
  std::vector<std::string> files(const std::string& suffix = ".moetrace") const;

 private:
  std::string path_;
};

// Strings of a loaded trace by id, with "" for 0.
std::string name_of(const LoadedTrace& trace, uint32_t id);
// Occurrences of `needle` in `text`.
size_t count_occurrences(const std::string& text, const std::string& needle);
bool python_has_module(const std::string& module);

// A span rebuilt from begin/end records of one stream.
struct RebuiltSpan {
  uint32_t stream;
  std::string name;
  std::string domain;
  int depth;           // 0 = outermost
  std::string parent;  // name of the enclosing span, "" at depth 0
  bool closed;
};
std::vector<RebuiltSpan> rebuild_spans(const LoadedTrace& trace);
// Thread names per stream (the last ThreadInfo record of each stream).
std::map<uint32_t, std::string> thread_names(const LoadedTrace& trace);

}  // namespace moescope::testing

// The ends of a process's life under `moescope record`: fork (trace / skip), exit() from another
// thread, SIGTERM/SIGINT, exit codes, a full disk, an unwritable path, setuid programs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "capture_test_support.h"

namespace moescope::testing {
namespace {

using trace::RecordKind;

std::string life_program() {
  return build_dir() + "/tests/capture_life_program";
}

int count_spans(const LoadedTrace& trace, const std::string& name) {
  int count = 0;
  for (const auto& span : rebuild_spans(trace)) count += span.name == name && span.closed;
  return count;
}

nlohmann::json metadata_of(const LoadedTrace& trace) {
  return nlohmann::json::parse(trace.metadata_json);
}

TEST(CaptureProcessLife, ForkTraceGivesTheChildItsOwnTrace) {
  TempDir dir;
  RunResult run =
      run_program(record_command(dir / "run.moetrace", {life_program(), "fork"}, {"--fork=trace"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  int parent_pid = 0, child_pid = 0, child_status = -1;
  ASSERT_EQ(std::sscanf(run.out.c_str(), "parent %d child %d status %d", &parent_pid, &child_pid,
                        &child_status),
            3)
      << run.out;
  EXPECT_EQ(child_status, 0);
  // The parent keeps the name asked for; the child's name gets its pid before the extension.
  std::vector<std::string> expected = {dir / "run.moetrace",
                                       dir / ("run." + std::to_string(child_pid) + ".moetrace")};
  std::sort(expected.begin(), expected.end());
  ASSERT_EQ(dir.files(), expected) << run.err;

  LoadedTrace parent = load_trace(dir / "run.moetrace");
  LoadedTrace child = load_trace(dir / ("run." + std::to_string(child_pid) + ".moetrace"));
  EXPECT_TRUE(parent.complete);
  EXPECT_TRUE(child.complete);
  EXPECT_EQ(count_spans(parent, "parent_work"), 1);
  EXPECT_EQ(count_spans(parent, "child_work"), 0);
  EXPECT_EQ(count_spans(child, "child_work"), 1);
  // The child's pop of the parent's range leaves no unmatched end in the child's trace.
  EXPECT_EQ(child.of_kind(RecordKind::kSpanEnd).size(),
            child.of_kind(RecordKind::kSpanBegin).size());
  EXPECT_EQ(metadata_of(parent)["pid"], parent_pid);
  EXPECT_EQ(metadata_of(child)["pid"], child_pid);
  EXPECT_EQ(metadata_of(child)["capture"]["forked_child"], true);
  EXPECT_EQ(metadata_of(child)["capture"]["gpu"]["cupti_detail"],
            "forked child (CUDA does not survive fork)");
}

// Children forked while the parent's flush thread drains (every 1 ms, always with work) must
// neither hang nor lose their trace. A fork copies only the forking thread: a lock another
// thread held at that moment (the allocator's, under a sanitizer) stays held in the child.
TEST(CaptureProcessLife, ForksDuringFlushesNeverHangAChild) {
  TempDir dir;
  constexpr int kChildren = 40;
  RunResult run = run_program(
      record_command(dir / "run.moetrace", {life_program(), "fork-many", std::to_string(kChildren)},
                     {"--fork=trace", "--flush-ms", "1"}));
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.out, "forked " + std::to_string(kChildren) + " hung 0\n");
  auto files = dir.files();
  ASSERT_EQ(files.size(), kChildren + 1u) << run.err;
  int children_complete = 0;
  for (const auto& file : files) {
    if (file == dir / "run.moetrace") continue;  // the parent's
    LoadedTrace child = load_trace(file);
    EXPECT_TRUE(child.complete) << file;
    EXPECT_EQ(count_spans(child, "child_work"), 1) << file;
    EXPECT_EQ(count_spans(child, "busy"), 0) << file;  // the parent's ranges stay in its trace
    children_complete += child.complete;
  }
  EXPECT_EQ(children_complete, kChildren);
  LoadedTrace parent = load_trace(dir / "run.moetrace");
  EXPECT_TRUE(parent.complete);
  EXPECT_GT(count_spans(parent, "busy"), 0);
}

TEST(CaptureProcessLife, ForkSkipRecordsOnlyTheParent) {
  TempDir dir;
  RunResult run =
      run_program(record_command(dir / "run.moetrace", {life_program(), "fork"}, {"--fork=skip"}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(dir.files(), std::vector<std::string>{dir / "run.moetrace"});
  LoadedTrace parent = load_trace(dir / "run.moetrace");
  EXPECT_TRUE(parent.complete);
  EXPECT_EQ(count_spans(parent, "parent_work"), 1);
  EXPECT_EQ(count_spans(parent, "child_work"), 0);
}

TEST(CaptureProcessLife, ExitFromAnotherThreadCompletesTheTrace) {
  TempDir dir;
  RunResult run =
      run_program(record_command(dir / "run.moetrace", {life_program(), "exit-from-thread"}));
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(run.out, "exiting from a thread\n");
  LoadedTrace trace = load_trace(dir / "run.moetrace");
  EXPECT_TRUE(trace.complete) << "no closing chunk";
  EXPECT_TRUE(trace.errors.empty());
  EXPECT_GE(count_spans(trace, "main_loop"), 1);
  bool last_words = false;
  for (const auto& mark : trace.of_kind(RecordKind::kInstant)) {
    last_words |= name_of(trace, mark.header().name) == "last_words";
  }
  EXPECT_TRUE(last_words);
}

// The summary `record` writes beside the trace once the program ended changes neither its exit
// status nor its output; --no-summary writes none.
TEST(CaptureProcessLife, SummaryBesideTheTraceUnlessNoSummary) {
  TempDir dir;
  RunResult run =
      run_program(record_command(dir / "run.moetrace", {life_program(), "exit-from-thread"}));
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(run.out, "exiting from a thread\n");
  EXPECT_EQ(dir.files(".moesummary"), std::vector<std::string>{dir / "run.moesummary"});
  EXPECT_EQ(count_occurrences(run.err, "no summary"), 0) << run.err;
  // A readable summary of that trace: `report` takes it given alone.
  RunResult report = run_program({moescope_binary(), "report", "-q", dir / "run.moesummary"});
  EXPECT_EQ(report.exit_code, 0) << report.err;

  TempDir without;
  RunResult plain = run_program(record_command(
      without / "run.moetrace", {life_program(), "exit-from-thread"}, {"--no-summary"}));
  EXPECT_EQ(plain.exit_code, 3);
  EXPECT_EQ(plain.out, "exiting from a thread\n");
  EXPECT_EQ(without.files(), std::vector<std::string>{without / "run.moetrace"});
  EXPECT_EQ(without.files(".moesummary"), std::vector<std::string>{});
}

// The moescope that started the run writes the summaries even when its file was deleted while
// the program ran (a rebuild or an upgrade during a days-long job): the children run this very
// binary, not whatever its path names by then.
TEST(CaptureProcessLife, SummariesAfterTheMoescopeFileWasDeleted) {
  TempDir dir;
  // A moescope of its own, with the shim where it looks (bin/../lib), that the program deletes.
  std::filesystem::create_directory(dir / "bin");
  const std::string copy = dir / "bin/moescope";
  std::filesystem::copy_file(moescope_binary(), copy);
  std::filesystem::create_directory_symlink(build_dir() + "/lib", dir / "lib");
  std::vector<std::string> argv = record_command(
      dir / "run.%p.moetrace",
      {"/bin/sh", "-c", "rm " + copy + " && " + life_program() + " exit-from-thread"});
  argv[0] = copy;
  RunResult run = run_program(argv);
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_FALSE(std::filesystem::exists(copy));
  EXPECT_EQ(count_occurrences(run.err, "no summary"), 0) << run.err;
  const std::vector<std::string> traces = dir.files(".moetrace");
  ASSERT_FALSE(traces.empty()) << run.err;
  EXPECT_EQ(dir.files(".moesummary").size(), traces.size()) << run.err;
}

// A summary that cannot be written (a folder stands where it goes) is one line on stderr naming
// the trace and why; the program's exit status and output stay its own.
TEST(CaptureProcessLife, SummaryThatCannotBeWrittenIsOneLineOnStderr) {
  TempDir dir;
  std::filesystem::create_directory(dir / "run.moesummary");
  std::filesystem::create_directory(dir / "run.moesummary/in_the_way");
  RunResult run =
      run_program(record_command(dir / "run.moetrace", {life_program(), "exit-from-thread"}));
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_EQ(run.out, "exiting from a thread\n");
  EXPECT_EQ(count_occurrences(run.err, "no summary"), 1) << run.err;
  EXPECT_NE(run.err.find("moescope record: no summary for " + dir / "run.moetrace" + ": "),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("cannot rename"), std::string::npos) << run.err;
  EXPECT_EQ(dir.files(".partial"), std::vector<std::string>{});
  EXPECT_TRUE(load_trace(dir / "run.moetrace").complete);
}

void expect_signal_completes_trace(int signal_number) {
  TempDir dir;
  RunOptions options;
  options.signal_after_output = "ready\n";
  options.signal_number = signal_number;
  RunResult run = run_program(
      record_command(dir / "run.moetrace", {life_program(), "wait-for-signal"}), options);
  EXPECT_FALSE(run.timed_out);
  // `moescope record` forwarded the signal, the program died of it, the code says which.
  EXPECT_EQ(run.exit_code, 128 + signal_number) << run.err;
  EXPECT_EQ(run.out, "ready\n");
  LoadedTrace trace = load_trace(dir / "run.moetrace");
  EXPECT_TRUE(trace.complete) << "no closing chunk after signal " << signal_number;
  EXPECT_TRUE(trace.errors.empty());
  EXPECT_GE(count_spans(trace, "busy"), 1);
}

TEST(CaptureProcessLife, SigtermCompletesTheTraceThenTerminates) {
  expect_signal_completes_trace(SIGTERM);
}

TEST(CaptureProcessLife, SigintCompletesTheTraceThenTerminates) {
  expect_signal_completes_trace(SIGINT);
}

TEST(CaptureProcessLife, SigkillLeavesEveryFlushedChunkReadable) {
  TempDir dir;
  RunOptions options;
  options.signal_after_output = "ready\n";
  options.signal_number = SIGKILL;
  options.signal_delay_ms = 500;  // several flush intervals (100 ms) of work
  options.signal_process_group = true;
  RunResult run = run_program(
      record_command(dir / "run.moetrace", {life_program(), "wait-for-signal"}), options);
  EXPECT_FALSE(run.timed_out);
  LoadedTrace trace = load_trace(dir / "run.moetrace");
  ASSERT_TRUE(trace.opened);
  EXPECT_FALSE(trace.complete);  // nothing ran at the kill: no closing chunk
  EXPECT_TRUE(trace.errors.empty()) << trace.errors[0].to_string();
  EXPECT_GE(count_spans(trace, "busy"), 10);  // ~2 ms each, flushed during 500 ms
}

TEST(CaptureProcessLife, OutputAndExitCodePassThrough) {
  TempDir dir;
  RunResult plain = run_program({life_program(), "lines", "5", "7"});
  RunResult recorded =
      run_program(record_command(dir / "run.moetrace", {life_program(), "lines", "5", "7"}));
  EXPECT_EQ(plain.exit_code, 7);
  EXPECT_EQ(recorded.exit_code, 7);
  EXPECT_EQ(recorded.out, plain.out);
  EXPECT_EQ(count_spans(load_trace(dir / "run.moetrace"), "line"), 5);
}

TEST(CaptureProcessLife, FullDiskWarnsOnceAndTheProgramRunsOn) {
  TempDir dir;
  RunOptions options;
  options.file_size_limit = 4096;  // RLIMIT_FSIZE: writes past 4 KB fail with EFBIG
  const std::string lines = "20000";
  RunResult plain = run_program({life_program(), "lines", lines});
  RunResult recorded =
      run_program(record_command(dir / "run.moetrace", {life_program(), "lines", lines}), options);
  EXPECT_EQ(recorded.exit_code, 0) << recorded.err;  // not killed by SIGXFSZ
  EXPECT_EQ(recorded.out, plain.out);
  EXPECT_EQ(count_occurrences(recorded.err, "moescope: cannot write trace"), 1u) << recorded.err;
  struct stat info;
  ASSERT_EQ(stat((dir / "run.moetrace").c_str(), &info), 0);
  EXPECT_LE(info.st_size, 4096);
  // What was written is still readable.
  EXPECT_TRUE(load_trace(dir / "run.moetrace").opened);
}

TEST(CaptureProcessLife, UnwritablePathWarnsOnceAndTheProgramRunsOn) {
  TempDir dir;
  // `record` creates missing folders, so the shim is made to fail where only it can: a file
  // name longer than NAME_MAX (open fails with ENAMETOOLONG as the program starts).
  std::string long_name(300, 'x');
  std::string pattern = dir / (long_name + ".moetrace");
  RunResult plain = run_program({life_program(), "lines", "3", "5"});
  RunResult recorded = run_program(record_command(pattern, {life_program(), "lines", "3", "5"}));
  EXPECT_EQ(recorded.exit_code, 5);
  EXPECT_EQ(recorded.out, plain.out);
  EXPECT_EQ(count_occurrences(recorded.err, "moescope: not recording"), 1u) << recorded.err;
  EXPECT_NE(recorded.err.find(long_name), std::string::npos) << recorded.err;
  EXPECT_NE(recorded.err.find("no trace written"), std::string::npos) << recorded.err;
}

TEST(CaptureProcessLife, SetuidProgramIsLeftAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a test program another owner";
#ifdef MOESCOPE_TEST_SANITIZER_RUNTIME
  GTEST_SKIP() << "sanitizer runtimes do not run setuid programs (LeakSanitizer needs ptrace)";
#endif
  TempDir dir;
  // World-writable, so a missing trace means the shim declined, not that it could not write.
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  std::string program = dir / "setuid_life_program";
  std::filesystem::copy_file(life_program(), program);
  ASSERT_EQ(chown(program.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod(program.c_str(), 04755), 0);
  RunResult plain = run_program({program, "lines", "3"});
  RunResult recorded = run_program(record_command(dir / "run.moetrace", {program, "lines", "3"}));
  EXPECT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_EQ(recorded.out, plain.out);
  EXPECT_TRUE(dir.files().empty()) << recorded.err;
}

}  // namespace
}  // namespace moescope::testing

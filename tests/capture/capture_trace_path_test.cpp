// Which file each recorded process writes (profiler/inject/shim_trace_path.h).
#include <gtest/gtest.h>

#include "moescope/trace/trace_writer.h"
#include "shim_trace_path.h"
#include "trace_test_reading.h"

namespace moescope::inject {
namespace {

TEST(CaptureTracePath, PlaceholdersAreFoundButNotEscapedPercents) {
  EXPECT_TRUE(pattern_has_placeholder("run.%r.moetrace", 'r'));
  EXPECT_FALSE(pattern_has_placeholder("run.%%r.moetrace", 'r'));
  EXPECT_TRUE(pattern_has_placeholder("run.%%%r.moetrace", 'r'));
  EXPECT_FALSE(pattern_has_placeholder("run.moetrace%", 'r'));
}

TEST(CaptureTracePath, PidGoesBeforeTheExtension) {
  EXPECT_EQ(pattern_with_pid("/t/run.moetrace"), "/t/run.%p.moetrace");
  EXPECT_EQ(pattern_with_pid("/t/run.%r.moetrace"), "/t/run.%r.%p.moetrace");
  EXPECT_EQ(pattern_with_pid("/t.d/run"), "/t.d/run.%p");      // a dot in a directory name
  EXPECT_EQ(pattern_with_pid("/t/.hidden"), "/t/.hidden.%p");  // a leading dot is no extension
  EXPECT_EQ(pattern_with_pid("/t/run.%p.moetrace"), "/t/run.%p.moetrace");
}

TEST(CaptureTracePath, ProcessesWithoutRankOrForkedGetTheirPid) {
  EXPECT_EQ(pattern_for_process("/t/run.%r.moetrace", true, false), "/t/run.%r.moetrace");
  EXPECT_EQ(pattern_for_process("/t/run.%r.moetrace", false, false), "/t/run.norank.%p.moetrace");
  EXPECT_EQ(pattern_for_process("/t/run.%r.moetrace", true, true), "/t/run.%r.%p.moetrace");
  // No %r in the pattern: a process without rank keeps the name the user gave.
  EXPECT_EQ(pattern_for_process("/t/out.moetrace", false, false), "/t/out.moetrace");
  EXPECT_EQ(pattern_for_process("/t/%%r.%r.moetrace", false, false), "/t/%%r.norank.%p.moetrace");
}

void write_trace(const std::string& path, const std::string& metadata, bool with_event) {
  trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(path, metadata));
  trace::RecordBuffer records;
  records.define_string(1, "moescope");
  records.define_string(2, "gpu capture off");
  auto& note = records.append<trace::InstantRecord>(trace::RecordKind::kInstant, 10, 2);
  note.domain = 1;  // the shim's own note: not an event of the program
  if (with_event) records.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, 20, 2);
  ASSERT_TRUE(writer.write_chunk(1, records.bytes()));
  writer.close();
}

TEST(CaptureTracePath, SessionOwnershipAndEmptyHelpers) {
  std::string path = testing::temp_path("session.moetrace");
  write_trace(path, R"({"session":"s1","pid":100,"capture":{"primary_path":false}})", false);
  EXPECT_TRUE(trace_taken_by_session(path, "s1", 200));   // a sibling of this run
  EXPECT_FALSE(trace_taken_by_session(path, "s1", 100));  // this pid before exec()
  EXPECT_FALSE(trace_taken_by_session(path, "s0", 200));  // an older run
  EXPECT_FALSE(trace_has_events(path));
  EXPECT_TRUE(trace_is_empty_helper(path, "s1"));
  EXPECT_FALSE(trace_is_empty_helper(path, "s0"));

  write_trace(path, R"({"session":"s1","pid":100,"capture":{"primary_path":false}})", true);
  EXPECT_TRUE(trace_has_events(path));
  EXPECT_FALSE(trace_is_empty_helper(path, "s1"));

  write_trace(path, R"({"session":"s1","pid":100,"capture":{"primary_path":true}})", false);
  EXPECT_FALSE(trace_is_empty_helper(path, "s1"));  // the name the user asked for stays
  std::remove(path.c_str());
  EXPECT_FALSE(trace_taken_by_session(path, "s1", 200));
}

}  // namespace
}  // namespace moescope::inject

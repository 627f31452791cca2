// The flight recorder's ring and the capture window (profiler/recorder/flight_ring.h,
// capture_window.h): eviction by cap and by time, both ways of writing a dump, and the step
// window's filter.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "capture_window.h"
#include "flight_ring.h"
#include "moescope/recorder.h"
#include "trace_test_reading.h"

namespace moescope::recorder {
namespace {

using testing::load_trace;
using testing::temp_path;

// `count` span_complete records at times first_ns, first_ns + step_ns, ...
std::vector<uint8_t> spans(uint64_t first_ns, uint64_t step_ns, int count) {
  trace::RecordBuffer buffer;
  for (int i = 0; i < count; ++i) {
    auto& span = buffer.append<trace::SpanCompleteRecord>(trace::RecordKind::kSpanComplete,
                                                          first_ns + i * step_ns, 1);
    span.end_time = first_ns + i * step_ns + 10;
  }
  return buffer.bytes();
}

std::vector<uint8_t> step_marker(uint64_t time_ns, int64_t step, uint32_t name = 0) {
  trace::RecordBuffer buffer;
  buffer.append<trace::StepRecord>(trace::RecordKind::kStep, time_ns, name).step = step;
  return buffer.bytes();
}

std::vector<uint8_t> strings() {
  trace::RecordBuffer buffer;
  buffer.define_string(1, "work");
  buffer.define_string(2, "end");
  return buffer.bytes();
}

TEST(FlightDuration, ParsesSecondsAndSteps) {
  uint64_t window_ns = 0;
  uint32_t steps = 0;
  EXPECT_TRUE(parse_flight_duration("30", window_ns, steps));
  EXPECT_EQ(window_ns, 30'000'000'000ull);
  EXPECT_TRUE(parse_flight_duration("2.5", window_ns, steps));
  EXPECT_EQ(window_ns, 2'500'000'000ull);
  EXPECT_TRUE(parse_flight_duration("200steps", window_ns, steps));
  EXPECT_EQ(steps, 200u);
  EXPECT_EQ(window_ns, 0u);
  for (const char* bad : {"", "0", "-1", "steps", "0steps", "3 steps", "ten"}) {
    EXPECT_FALSE(parse_flight_duration(bad, window_ns, steps)) << bad;
  }
}

TEST(FlightRing, StaysWithinItsCap) {
  FlightOptions options;
  options.enabled = true;
  options.window_ns = 1'000'000'000'000ull;  // the cap decides
  options.cap_bytes = 64 * 1024;
  FlightRing ring;
  ring.reset(options, 2);
  for (int piece = 0; piece < 200; ++piece) {
    ring.append(1, spans(piece * 1000'000ull, 1000, 100));  // 3.2 KB each
    EXPECT_LE(ring.bytes(), options.cap_bytes);
  }
  EXPECT_GT(ring.bytes(), options.cap_bytes - 4096);
  EXPECT_GT(ring.evicted_bytes(), 0u);
}

TEST(FlightRing, KeepsTheLastDuration) {
  FlightOptions options;
  options.enabled = true;
  options.window_ns = 1'000'000;  // 1 ms
  FlightRing ring;
  ring.reset(options, 2);
  for (int piece = 0; piece < 50; ++piece) ring.append(1, spans(piece * 100'000ull, 1000, 10));
  // Pieces ending before newest - 1 ms are gone: the first kept starts at most ~1.1 ms back.
  uint64_t newest = 49 * 100'000ull + 9 * 1000;
  EXPECT_GE(ring.first_time_ns() + 1'100'000, newest);
  EXPECT_LT(ring.first_time_ns(), newest);
}

TEST(FlightRing, KeepsTheLastSteps) {
  FlightOptions options;
  options.enabled = true;
  options.window_steps = 3;
  FlightRing ring;
  ring.reset(options, 2);
  for (int step = 0; step < 10; ++step) {
    ring.append(1, step_marker(step * 1'000'000ull, step));
    ring.append(1, spans(step * 1'000'000ull + 10, 1000, 20));
  }
  EXPECT_GE(ring.first_time_ns(), 7 * 1'000'000ull);  // steps 7, 8, 9
  uint64_t current = 0, median = 0;
  ring.step_timing(current, median);
  EXPECT_EQ(current, 9 * 1'000'000ull);
  EXPECT_EQ(median, 1'000'000ull);
  EXPECT_EQ(ring.last_progress_ns(), 9 * 1'000'000ull);
}

TEST(FlightRing, DumpReadsBackWithTheTrigger) {
  FlightOptions options;
  options.enabled = true;
  options.window_ns = 1'000'000'000ull;
  FlightRing ring;
  ring.reset(options, 2);
  ring.append_strings(strings());
  ring.append(1, spans(1000, 1000, 30));
  ring.append(2, spans(1500, 1000, 30));
  trace::RecordBuffer trigger;
  auto& record = trigger.append<trace::TriggerRecord>(trace::RecordKind::kTrigger, 99'000, 0);
  record.reason = MOESCOPE_TRIGGER_HANG;
  record.origin_rank = 3;
  ring.append_trigger(trigger.bytes());

  std::string path = temp_path("flight_ring_dump.moetrace");
  trace::TraceWriter writer;
  ASSERT_TRUE(writer.open(path, "{\"flight_recorder\":{}}"));
  trace::RecordBuffer end;
  end.append<trace::StatsRecord>(trace::RecordKind::kStats, 100'000);
  ring.write(writer, end.bytes());
  writer.close();
  auto loaded = load_trace(path);
  ASSERT_TRUE(loaded.opened);
  EXPECT_TRUE(loaded.complete);
  EXPECT_TRUE(loaded.errors.empty());
  EXPECT_EQ(loaded.of_kind(trace::RecordKind::kSpanComplete).size(), 60u);
  auto triggers = loaded.of_kind(trace::RecordKind::kTrigger);
  ASSERT_EQ(triggers.size(), 1u);
  EXPECT_EQ(triggers[0].as<trace::TriggerRecord>().reason, uint32_t{MOESCOPE_TRIGGER_HANG});
  EXPECT_EQ(triggers[0].as<trace::TriggerRecord>().origin_rank, 3);
  EXPECT_EQ(loaded.strings.at(1), "work");
  ::unlink(path.c_str());
}

TEST(FlightRing, SignalHandlerDumpIsReadable) {
  FlightOptions options;
  options.enabled = true;
  options.window_ns = 1'000'000'000ull;
  FlightRing ring;
  ring.reset(options, 2);
  ring.append_strings(strings());
  ring.append(1, spans(1000, 1000, 25));
  std::string metadata = "{\"flight_recorder\":{\"written_by\":\"fatal signal handler\"}}";
  trace::FileHeader header{};
  std::memcpy(header.magic, trace::kFileMagic, sizeof(header.magic));
  header.version = trace::kFormatVersion;
  header.metadata_bytes = static_cast<uint32_t>(metadata.size());
  std::string prefix(reinterpret_cast<const char*>(&header), sizeof(header));
  prefix += metadata;
  trace::RecordBuffer end;
  auto& trigger = end.append<trace::TriggerRecord>(trace::RecordKind::kTrigger, 50'000, 0);
  trigger.reason = MOESCOPE_TRIGGER_CRASH;
  trigger.code = 11;
  end.append<trace::StatsRecord>(trace::RecordKind::kStats, 50'000);

  std::string path = temp_path("flight_ring_crash.moetrace");
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ring.write_from_signal_handler(fd, prefix, end.bytes().data(), end.size());
  ::close(fd);
  auto loaded = load_trace(path);
  ASSERT_TRUE(loaded.opened);
  EXPECT_TRUE(loaded.complete);
  EXPECT_TRUE(loaded.errors.empty());
  EXPECT_EQ(loaded.of_kind(trace::RecordKind::kSpanComplete).size(), 25u);
  auto triggers = loaded.of_kind(trace::RecordKind::kTrigger);
  ASSERT_EQ(triggers.size(), 1u);
  EXPECT_EQ(triggers[0].as<trace::TriggerRecord>().code, 11);
  ::unlink(path.c_str());
}

TEST(CaptureWindow, KeepsStepsAToBInclusive) {
  CaptureWindowOptions options;
  options.first_step = 3;
  options.last_step = 4;
  CaptureWindow window;
  window.reset(options, 0, /*end_marker_name=*/2);
  std::vector<uint8_t> records;
  auto add = [&](const std::vector<uint8_t>& more) {
    records.insert(records.end(), more.begin(), more.end());
  };
  for (int step = 0; step < 8; ++step) {
    add(step_marker(step * 1000 + 1, step));
    add(spans(step * 1000 + 10, 100, 3));
    add(step_marker(step * 1000 + 900, step, 2));
  }
  window.observe(records);
  window.filter(records);
  std::vector<int64_t> starts;
  size_t spans_kept = 0;
  for (size_t offset = 0; offset < records.size();) {
    auto* header = reinterpret_cast<const trace::RecordHeader*>(records.data() + offset);
    if (header->kind == uint8_t(trace::RecordKind::kStep) && header->name == 0) {
      starts.push_back(reinterpret_cast<const trace::StepRecord*>(header)->step);
    }
    if (header->kind == uint8_t(trace::RecordKind::kSpanComplete)) ++spans_kept;
    offset += header->size;
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(spans_kept, 6u);
  EXPECT_TRUE(window.closed(100'000));
}

TEST(CaptureWindow, ParsesStepWindows) {
  int64_t first = 0, last = 0;
  EXPECT_TRUE(parse_step_window("100:110", first, last));
  EXPECT_EQ(first, 100);
  EXPECT_EQ(last, 110);
  for (const char* bad : {"", "5", ":5", "5:", "7:3", "a:b", "-1:3", "1:2x"}) {
    EXPECT_FALSE(parse_step_window(bad, first, last)) << bad;
  }
}

}  // namespace
}  // namespace moescope::recorder

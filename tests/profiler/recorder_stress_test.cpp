// Many threads recording at once: nothing lost, each thread's order kept, threads that exit
// mid-recording still fully written.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>
#include <vector>

#include "moescope/recorder.h"
#include "trace_test_reading.h"

namespace moescope {
namespace {

using trace::RecordKind;

TEST(RecorderStress, ThreadsTimesEventsNothingLostOrderKept) {
  constexpr int kThreads = 8;
  constexpr int kEventsPerThread = 150'000;
  std::string path = testing::temp_path("stress.moetrace");
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      std::string name = "worker " + std::to_string(t);
      moescope_thread_name(name.c_str());
      moescope_name_t span = moescope_intern(name.c_str());
      moescope_name_t counter = moescope_intern("sequence");
      for (int i = 0; i < kEventsPerThread; ++i) {
        moescope_span_begin(0, span);
        moescope_counter(counter, t * 1e9 + i);  // encodes thread and position
        moescope_span_end();
      }
    });
  }
  for (auto& thread : threads) thread.join();  // threads exit while recording
  moescope_recorder_stop();

  auto trace = testing::load_trace(path);
  ASSERT_TRUE(trace.complete);
  ASSERT_TRUE(trace.errors.empty());
  auto stats = trace.of_kind(RecordKind::kStats);
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.back().as<trace::StatsRecord>().dropped_events, 0u);

  // Per stream: all counters of one thread, in order, each between a begin and an end.
  std::map<uint32_t, std::vector<double>> counters_per_stream;
  std::map<uint32_t, int> depth;
  std::map<uint32_t, uint64_t> last_time;
  for (const auto& record : trace.records) {
    if (record.stream == 0) continue;
    uint64_t time = record.header().time;
    if (record.kind() != RecordKind::kThreadInfo) {
      EXPECT_GE(time, last_time[record.stream]);  // timestamps never go back within a thread
      last_time[record.stream] = time;
    }
    switch (record.kind()) {
      case RecordKind::kSpanBegin:
        ASSERT_EQ(depth[record.stream]++, 0);
        break;
      case RecordKind::kSpanEnd:
        ASSERT_EQ(--depth[record.stream], 0);
        break;
      case RecordKind::kCounter:
        ASSERT_EQ(depth[record.stream], 1);
        counters_per_stream[record.stream].push_back(record.as<trace::CounterRecord>().value);
        break;
      default:
        break;
    }
  }
  ASSERT_EQ(counters_per_stream.size(), size_t{kThreads});
  std::set<int> threads_seen;
  for (const auto& [stream, values] : counters_per_stream) {
    ASSERT_EQ(values.size(), size_t{kEventsPerThread});
    int thread = static_cast<int>(values[0] / 1e9);
    threads_seen.insert(thread);
    for (int i = 0; i < kEventsPerThread; ++i) ASSERT_EQ(values[i], thread * 1e9 + i);
  }
  EXPECT_EQ(threads_seen.size(), size_t{kThreads});
  std::remove(path.c_str());
}

TEST(RecorderStress, BoundedBuffersDropAndCountInsteadOfGrowing) {
  // First a recording with the default budget (256 MB), as a program that records twice does:
  // its blocks stay in the process's pool. The budget set below must hold all the same (it used
  // to be fixed by the first recording, so this test failed whenever it did not run alone).
  std::string earlier = testing::temp_path("bounded_earlier.moetrace");
  ASSERT_EQ(moescope_recorder_start(earlier.c_str(), nullptr), 0);
  for (int i = 0; i < 200'000; ++i) moescope_counter(1, i);  // 4.8 MB of blocks
  moescope_recorder_stop();
  std::remove(earlier.c_str());

  // 1 MB of buffers and a long flush interval: a burst overflows, and the loss is counted.
  setenv("MOESCOPE_BUFFER_MB", "1", 1);
  setenv("MOESCOPE_FLUSH_MS", "200", 1);
  std::string path = testing::temp_path("bounded.moetrace");
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  constexpr int kEvents = 400'000;  // 400k x 24 B = 9.6 MB, far over 1 MB
  for (int i = 0; i < kEvents; ++i) moescope_counter(1, i);
  moescope_recorder_stop();
  unsetenv("MOESCOPE_BUFFER_MB");
  unsetenv("MOESCOPE_FLUSH_MS");
  auto trace = testing::load_trace(path);
  size_t kept = trace.of_kind(RecordKind::kCounter).size();
  uint64_t dropped =
      trace.of_kind(RecordKind::kStats).back().as<trace::StatsRecord>().dropped_events;
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(kept + dropped, size_t{kEvents});
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moescope

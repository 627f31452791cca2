// The flight recorder's ring (moescope record --flight-recorder DURATION): the last DURATION
// (seconds, or N steps) of encoded records, kept in memory and written only when something
// fires (docs/flight-recorder.md).
//
//   flush thread: drain -> ticks to ns -> append(stream, records) -> evict what is too old or
//                 beyond the cap
//   trigger:      write(writer, ...)            (a thread: zstd-compressed chunks)
//                 write_from_signal_handler()   (a fatal signal: raw chunks, no allocation)
//
// Pieces are whole drains of one stream, so eviction keeps every stream's records in order.
// Strings, thread names and trigger records are kept for good (small, and needed to read the
// rest). Memory is bounded by the cap plus the strings.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "moescope/trace/trace_writer.h"

namespace moescope::recorder {

// Default and largest ring per process (MOESCOPE_FLIGHT_MB): 64 MB and 4096 MB.
inline constexpr size_t kDefaultFlightRingBytes = size_t{64} << 20;
inline constexpr size_t kMaxFlightRingBytes = size_t{4096} << 20;

struct FlightOptions {
  bool enabled = false;
  uint64_t window_ns = 0;     // MOESCOPE_FLIGHT=30 (seconds) ...
  uint32_t window_steps = 0;  // ... or MOESCOPE_FLIGHT=20steps
  size_t cap_bytes = kDefaultFlightRingBytes;
  static FlightOptions from_environment();
};

// "30", "2.5", "20steps"; false when malformed.
bool parse_flight_duration(const std::string& text, uint64_t& window_ns, uint32_t& window_steps);

class FlightRing {
 public:
  void reset(const FlightOptions& options, uint32_t step_end_name);
  // Keeps one drain of `stream` (ns times), then evicts what falls out of the window.
  void append(uint32_t stream, const std::vector<uint8_t>& records);
  // String records (stream 0): kept for good.
  void append_strings(const std::vector<uint8_t>& records);
  // A trigger record: kept for good, written with every later dump.
  void append_trigger(const std::vector<uint8_t>& record);

  // Writes the ring as a trace's chunks to an open writer; `end_records` (a stats record)
  // closes it. Called on the flush thread.
  void write(trace::TraceWriter& writer, std::vector<uint8_t> end_records);
  // From a fatal signal's handler: writes `prefix` (file header + metadata) and the ring as
  // raw chunks to `fd`, then `end_record`. Only async-signal-safe calls; gives up on the events
  // (not the header and the strings) when the flush thread holds the ring for longer than 50 ms.
  void write_from_signal_handler(int fd, const std::string& prefix, const uint8_t* end_record,
                                 size_t end_bytes);

  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t evicted_bytes() const { return evicted_bytes_; }
  uint64_t first_time_ns() const;
  // Last step or collective seen in a drain (ns; 0 = none yet).
  uint64_t last_progress_ns() const { return last_progress_ns_.load(std::memory_order_relaxed); }
  // Start of the step in progress and the median duration of the last steps (0 when fewer than
  // 5 steps were seen); for the slow-step trigger.
  void step_timing(uint64_t& current_start_ns, uint64_t& median_ns) const;
  // True between a step's start marker and its end marker (the hang watchdog's "busy").
  bool in_step() const { return in_step_.load(std::memory_order_relaxed); }

 private:
  struct Piece {
    uint32_t stream;
    uint64_t last_time;
    std::vector<uint8_t> records;
  };
  void scan(uint32_t stream, const std::vector<uint8_t>& records, uint64_t& last_time);
  void evict();
  bool claim();  // false while a signal handler writes the ring
  void release() { busy_.store(0, std::memory_order_release); }

  FlightOptions options_;
  uint32_t step_end_name_ = 0;
  std::deque<Piece> pieces_;
  std::vector<uint8_t> strings_;
  std::vector<uint8_t> triggers_;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> thread_names_;  // stream, record
  std::atomic<size_t> bytes_{0};
  uint64_t evicted_bytes_ = 0;
  uint64_t newest_ns_ = 0;
  std::atomic<uint64_t> last_progress_ns_{0};
  std::atomic<bool> in_step_{false};
  mutable std::mutex step_mutex_;
  std::deque<uint64_t> step_starts_;  // the last starts, oldest first
  // 0 free, 1 the flush thread changes the ring, 2 a signal handler writes it.
  std::atomic<int> busy_{0};
};

}  // namespace moescope::recorder

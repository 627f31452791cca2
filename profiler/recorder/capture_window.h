// Capture windows (moescope record --steps A:B, --delay, --duration, --max-size): which of the
// recorded events reach the trace.
//
// The recorder records as always; the flush thread keeps only the records whose time falls in
// the window. A step window is placed by the step markers the program (or the zero-code capture)
// records with moescope_step / moescope_step_end, the markers the report's step detection uses
// first (step_detection.h): it opens at the start marker of step A and closes at the end marker
// of step B (or, without one, at the start marker of the first later step). Strings, thread
// names, clock-sync points and statistics are always kept, so the window's trace reads like any
// other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::recorder {

struct CaptureWindowOptions {
  int64_t first_step = -1;  // MOESCOPE_STEPS=A:B (inclusive); -1 = no step window
  int64_t last_step = -1;
  uint64_t delay_ns = 0;     // MOESCOPE_DELAY_S: from the recorder's start
  uint64_t duration_ns = 0;  // MOESCOPE_DURATION_S: 0 = until the end
  uint64_t max_bytes = 0;    // MOESCOPE_MAX_SIZE (bytes of trace file); 0 = unbounded
  bool any_window() const { return first_step >= 0 || delay_ns || duration_ns; }
  // Reads the variables above; a bad value warns once and is ignored.
  static CaptureWindowOptions from_environment();
};

// Parses "A:B" (0 <= A <= B); false when malformed.
bool parse_step_window(const std::string& text, int64_t& first, int64_t& last);

class CaptureWindow {
 public:
  // `start_ns`: the recording's start; `end_marker_name`: the string id of step end markers.
  void reset(const CaptureWindowOptions& options, uint64_t start_ns, uint32_t end_marker_name);
  // Places the step window's edges from the step markers among `records` (ns times, one
  // drain of one stream). Call for every stream of a drain before filter().
  void observe(const std::vector<uint8_t>& records);
  // Removes, in place, the records outside the window.
  void filter(std::vector<uint8_t>& records) const;
  // True once the window has closed for good (nothing later is kept).
  bool closed(uint64_t now_ns) const;

 private:
  bool keeps(uint8_t kind, uint64_t time) const;

  CaptureWindowOptions options_;
  bool active_ = false;
  uint32_t end_marker_name_ = 0;
  uint64_t begin_ns_ = UINT64_MAX;  // UINT64_MAX: not open yet
  uint64_t end_ns_ = UINT64_MAX;    // exclusive; UINT64_MAX: not closed yet
};

}  // namespace moescope::recorder

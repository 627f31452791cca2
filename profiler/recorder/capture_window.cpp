#include "capture_window.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "moescope/trace/recording_environment.h"
#include "moescope/trace/trace_format.h"

namespace moescope::recorder {
namespace {

// Seconds as a decimal number ("2", "0.5") into ns; false when malformed or negative.
bool parse_seconds(const char* text, uint64_t& out_ns) {
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  if (!end || *end || !(seconds >= 0) || seconds > 1e7) return false;
  out_ns = static_cast<uint64_t>(seconds * 1e9);
  return true;
}

void warn_ignored(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "moescope: ignoring %s=%s (expected %s)\n", name, value, expected);
}

}  // namespace

bool parse_step_window(const std::string& text, int64_t& first, int64_t& last) {
  size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= text.size()) return false;
  char* end = nullptr;
  long long a = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + colon) return false;
  long long b = std::strtoll(text.c_str() + colon + 1, &end, 10);
  if (*end || a < 0 || b < a) return false;
  first = a;
  last = b;
  return true;
}

CaptureWindowOptions CaptureWindowOptions::from_environment() {
  CaptureWindowOptions options;
  if (const char* steps = std::getenv(trace::environment::kSteps); steps && *steps) {
    if (!parse_step_window(steps, options.first_step, options.last_step)) {
      warn_ignored(trace::environment::kSteps, steps, "A:B with 0 <= A <= B");
      options.first_step = options.last_step = -1;
    }
  }
  if (const char* delay = std::getenv(trace::environment::kDelayS); delay && *delay) {
    if (!parse_seconds(delay, options.delay_ns))
      warn_ignored(trace::environment::kDelayS, delay, "seconds");
  }
  if (const char* duration = std::getenv(trace::environment::kDurationS); duration && *duration) {
    if (!parse_seconds(duration, options.duration_ns)) {
      warn_ignored(trace::environment::kDurationS, duration, "seconds");
    }
  }
  if (const char* size = std::getenv(trace::environment::kMaxSize); size && *size) {
    char* end = nullptr;
    unsigned long long bytes = std::strtoull(size, &end, 10);
    if (!end || *end || bytes < 4096) {
      warn_ignored(trace::environment::kMaxSize, size, "bytes, at least 4096");
    } else {
      options.max_bytes = bytes;
    }
  }
  return options;
}

void CaptureWindow::reset(const CaptureWindowOptions& options, uint64_t start_ns,
                          uint32_t end_marker_name) {
  options_ = options;
  active_ = options.any_window();
  end_marker_name_ = end_marker_name;
  begin_ns_ = UINT64_MAX;
  end_ns_ = UINT64_MAX;
  if (!active_) return;
  if (options.first_step < 0) {  // a time window only
    begin_ns_ = start_ns + options.delay_ns;
    if (options.duration_ns) end_ns_ = begin_ns_ + options.duration_ns;
  }
}

void CaptureWindow::observe(const std::vector<uint8_t>& records) {
  if (!active_ || options_.first_step < 0) return;
  size_t offset = 0;
  while (offset + sizeof(trace::RecordHeader) <= records.size()) {
    const auto* header = reinterpret_cast<const trace::RecordHeader*>(records.data() + offset);
    if (header->size == 0) break;
    if (header->kind == static_cast<uint8_t>(trace::RecordKind::kStep) &&
        offset + sizeof(trace::StepRecord) <= records.size()) {
      const auto* step = reinterpret_cast<const trace::StepRecord*>(header);
      bool is_end = header->name != 0 && header->name == end_marker_name_;
      if (!is_end && step->step == options_.first_step && begin_ns_ == UINT64_MAX) {
        begin_ns_ = header->time + options_.delay_ns;
        if (options_.duration_ns) end_ns_ = begin_ns_ + options_.duration_ns;
      }
      if (is_end && step->step == options_.last_step) {
        end_ns_ = std::min(end_ns_, header->time + 1);  // the end marker itself is in
      } else if (!is_end && step->step > options_.last_step && begin_ns_ != UINT64_MAX) {
        end_ns_ = std::min(end_ns_, header->time);
      }
    }
    offset += header->size;
  }
}

bool CaptureWindow::keeps(uint8_t kind, uint64_t time) const {
  switch (static_cast<trace::RecordKind>(kind)) {
    case trace::RecordKind::kString:
    case trace::RecordKind::kThreadInfo:
    case trace::RecordKind::kClockSync:
    case trace::RecordKind::kStats:
    case trace::RecordKind::kTrigger:
      return true;
    default:
      return time >= begin_ns_ && time < end_ns_;
  }
}

void CaptureWindow::filter(std::vector<uint8_t>& records) const {
  if (!active_) return;
  size_t read = 0, write = 0;
  while (read + sizeof(trace::RecordHeader) <= records.size()) {
    const auto* header = reinterpret_cast<const trace::RecordHeader*>(records.data() + read);
    uint16_t size = header->size;
    if (size == 0 || read + size > records.size()) break;
    if (keeps(header->kind, header->time)) {
      if (write != read) std::memmove(records.data() + write, records.data() + read, size);
      write += size;
    }
    read += size;
  }
  records.resize(write);
}

bool CaptureWindow::closed(uint64_t now_ns) const {
  return active_ && end_ns_ != UINT64_MAX && now_ns > end_ns_;
}

}  // namespace moescope::recorder

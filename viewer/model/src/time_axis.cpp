#include "moescope/viewer/time_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace moescope::viewer {

TimeAxis::TimeAxis(double start_ns, double end_ns, double width_px)
    : start_ns_(start_ns),
      end_ns_(std::max(end_ns, start_ns + kMinDurationNs)),
      width_px_(std::max(width_px, 1.0)),
      bounds_first_(start_ns),
      bounds_last_(std::max(end_ns, start_ns + kMinDurationNs)) {}

void TimeAxis::set_bounds(double first_ns, double last_ns) {
  bounds_first_ = first_ns;
  bounds_last_ = std::max(last_ns, first_ns + kMinDurationNs);
  clamp_to_bounds();
}

void TimeAxis::set_width(double width_px) {
  width_px_ = std::max(width_px, 1.0);
}

void TimeAxis::zoom_around(double anchor_x, double factor) {
  if (!(factor > 0.0)) return;
  double anchor_ns = x_to_time(anchor_x);
  double new_duration = std::max(duration_ns() / factor, kMinDurationNs);
  // The anchor keeps its fraction of the width, so it stays under the cursor.
  double fraction = std::clamp(anchor_x / width_px_, 0.0, 1.0);
  start_ns_ = anchor_ns - fraction * new_duration;
  end_ns_ = start_ns_ + new_duration;
  clamp_to_bounds();
}

void TimeAxis::pan_pixels(double dx_px) {
  double shift = -dx_px * ns_per_px();
  start_ns_ += shift;
  end_ns_ += shift;
  clamp_to_bounds();
}

bool TimeAxis::box_zoom(double x0, double x1) {
  if (x1 < x0) std::swap(x0, x1);
  if (x1 - x0 < 2.0) return false;
  double first = x_to_time(x0);
  double last = x_to_time(x1);
  start_ns_ = first;
  end_ns_ = std::max(last, first + kMinDurationNs);
  clamp_to_bounds();
  return true;
}

void TimeAxis::show_range(double first_ns, double last_ns, double margin) {
  double length = std::max(last_ns - first_ns, kMinDurationNs);
  start_ns_ = first_ns - margin * length;
  end_ns_ = first_ns + length + margin * length;
  clamp_to_bounds();
}

void TimeAxis::clamp_to_bounds() {
  double bound_length = bounds_last_ - bounds_first_;
  double length = std::min(end_ns_ - start_ns_, bound_length);
  length = std::max(length, kMinDurationNs);
  // A view longer than the trace shows the whole trace; otherwise slide it back inside.
  if (start_ns_ < bounds_first_) start_ns_ = bounds_first_;
  if (start_ns_ + length > bounds_last_) start_ns_ = std::max(bounds_first_, bounds_last_ - length);
  end_ns_ = start_ns_ + length;
}

RulerTicks ruler_ticks(const TimeAxis& axis, double min_spacing_px, double origin_ns) {
  RulerTicks ticks;
  double min_step = std::max(min_spacing_px * axis.ns_per_px(), 1.0);
  double power = std::pow(10.0, std::floor(std::log10(min_step)));
  for (double multiple : {1.0, 2.0, 5.0, 10.0}) {
    if (multiple * power >= min_step) {
      ticks.step_ns = multiple * power;
      break;
    }
  }
  double first =
      origin_ns + std::ceil((axis.start_ns() - origin_ns) / ticks.step_ns) * ticks.step_ns;
  for (double t = first; t <= axis.end_ns() && ticks.times_ns.size() < 1000; t += ticks.step_ns) {
    ticks.times_ns.push_back(t);
  }
  return ticks;
}

void format_duration(double ns, char* out, int out_size) {
  double magnitude = std::fabs(ns);
  if (magnitude < 1e3) {
    std::snprintf(out, static_cast<size_t>(out_size), "%.0f ns", ns);
  } else if (magnitude < 1e6) {
    std::snprintf(out, static_cast<size_t>(out_size), "%.3g us", ns / 1e3);
  } else if (magnitude < 1e9) {
    std::snprintf(out, static_cast<size_t>(out_size), "%.3g ms", ns / 1e6);
  } else {
    std::snprintf(out, static_cast<size_t>(out_size), "%.3g s", ns / 1e9);
  }
}

void format_tick(double ns, double step_ns, char* out, int out_size) {
  // The unit of the time itself; as many decimals as the step needs to tell neighbours apart.
  const double magnitude = std::fabs(ns);
  const double unit = magnitude < 1e3 ? 1.0 : magnitude < 1e6 ? 1e3 : magnitude < 1e9 ? 1e6 : 1e9;
  const char* name = unit == 1.0 ? "ns" : unit == 1e3 ? "us" : unit == 1e6 ? "ms" : "s";
  int decimals = 0;
  if (step_ns > 0 && step_ns < unit) {
    decimals = std::min(9, static_cast<int>(std::ceil(-std::log10(step_ns / unit) - 1e-9)));
  }
  std::snprintf(out, static_cast<size_t>(out_size), "%.*f %s", decimals, ns / unit, name);
}

}  // namespace moescope::viewer

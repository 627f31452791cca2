// The timeline's horizontal axis: which nanoseconds are visible and how they map to pixels.
// Plain maths with no ImGui, so tests and the benchmark drive it without a window.
#pragma once

#include <cstdint>
#include <vector>

namespace moescope::viewer {

// Visible time range [start_ns, end_ns) drawn over `width_px` pixels starting at pixel 0 of the
// timeline area. Times are absolute trace nanoseconds; doubles keep sub-ns precision when zoomed
// far in (2^53 ns is ~104 days, far beyond any trace).
class TimeAxis {
 public:
  TimeAxis() = default;
  TimeAxis(double start_ns, double end_ns, double width_px);

  double start_ns() const { return start_ns_; }
  double end_ns() const { return end_ns_; }
  double duration_ns() const { return end_ns_ - start_ns_; }
  double width_px() const { return width_px_; }
  double ns_per_px() const { return duration_ns() / width_px_; }
  double px_per_ns() const { return width_px_ / duration_ns(); }

  double time_to_x(double time_ns) const { return (time_ns - start_ns_) * px_per_ns(); }
  double x_to_time(double x_px) const { return start_ns_ + x_px * ns_per_px(); }

  // The range the view may move in (the trace's time span); zoom and pan stay inside it.
  void set_bounds(double first_ns, double last_ns);
  // Resizing keeps the visible time range (more pixels = more detail).
  void set_width(double width_px);

  // Zooms by `factor` (> 1 zooms in) keeping the time under pixel `anchor_x` fixed.
  void zoom_around(double anchor_x, double factor);
  // Moves the view by `dx_px` pixels (positive moves content right, i.e. earlier times).
  void pan_pixels(double dx_px);
  // Zooms to the pixel interval between x0 and x1 (either order); ignores slivers < 2 px.
  bool box_zoom(double x0, double x1);
  // Shows [first_ns, last_ns] with `margin` (fraction of the length) on each side.
  void show_range(double first_ns, double last_ns, double margin = 0.05);
  void show_all() { show_range(bounds_first_, bounds_last_, 0.0); }

  // Smallest visible duration: zooming stops at 10 ns over the whole width.
  static constexpr double kMinDurationNs = 10.0;

 private:
  void clamp_to_bounds();

  double start_ns_ = 0.0;
  double end_ns_ = 1.0;
  double width_px_ = 1.0;
  double bounds_first_ = 0.0;
  double bounds_last_ = 1.0;
};

// Ruler ticks: a "nice" step (1, 2 or 5 x 10^k ns) giving at least `min_spacing_px` between
// ticks, and the tick times inside the visible range, at whole steps from `origin_ns` (the
// trace start, so labels relative to it read 0, 2 ms, 4 ms...).
struct RulerTicks {
  double step_ns = 0.0;
  std::vector<double> times_ns;
};
RulerTicks ruler_ticks(const TimeAxis& axis, double min_spacing_px, double origin_ns = 0.0);

// "1.25 ms", "340 ns", "2.5 s": a duration with a unit that keeps 3 significant digits.
void format_duration(double ns, char* out, int out_size);

// A ruler label: the time in its own unit with the decimals `step_ns` needs, so neighbouring
// ticks never read alike ("10.85 s", "10.90 s" for a 50 ms step, where format_duration says
// "10.8 s" and "10.9 s").
void format_tick(double ns, double step_ns, char* out, int out_size);

}  // namespace moescope::viewer

// Zoom, pan and box-zoom maths of the timeline's time axis.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "moescope/viewer/time_axis.h"

namespace moescope::viewer {
namespace {

TEST(TimeAxis, MapsTimeToPixelsAndBack) {
  TimeAxis axis(1000.0, 2000.0, 500.0);
  EXPECT_DOUBLE_EQ(axis.time_to_x(1000.0), 0.0);
  EXPECT_DOUBLE_EQ(axis.time_to_x(2000.0), 500.0);
  EXPECT_DOUBLE_EQ(axis.time_to_x(1500.0), 250.0);
  EXPECT_DOUBLE_EQ(axis.x_to_time(100.0), 1200.0);
  EXPECT_DOUBLE_EQ(axis.ns_per_px(), 2.0);
}

TEST(TimeAxis, ZoomKeepsTheTimeUnderTheCursorFixed) {
  TimeAxis axis(0.0, 1e9, 1000.0);
  double cursor_x = 730.0;
  double before = axis.x_to_time(cursor_x);
  axis.zoom_around(cursor_x, 4.0);
  EXPECT_NEAR(axis.duration_ns(), 0.25e9, 1.0);
  EXPECT_NEAR(axis.x_to_time(cursor_x), before, 1e-3);
  axis.zoom_around(cursor_x, 0.5);  // zoom out again around the same point
  EXPECT_NEAR(axis.duration_ns(), 0.5e9, 1.0);
  EXPECT_NEAR(axis.x_to_time(cursor_x), before, 1e-3);
}

TEST(TimeAxis, ZoomOutStopsAtTheTraceBoundsAndZoomInAtTheMinimum) {
  TimeAxis axis(0.0, 1e6, 1000.0);
  axis.zoom_around(10.0, 0.01);
  EXPECT_DOUBLE_EQ(axis.start_ns(), 0.0);
  EXPECT_DOUBLE_EQ(axis.end_ns(), 1e6);
  for (int i = 0; i < 100; ++i) axis.zoom_around(500.0, 10.0);
  EXPECT_DOUBLE_EQ(axis.duration_ns(), TimeAxis::kMinDurationNs);
  EXPECT_GE(axis.start_ns(), 0.0);
}

TEST(TimeAxis, PanMovesByPixelsAndClampsAtTheEdges) {
  TimeAxis axis(0.0, 1e6, 1000.0);
  axis.zoom_around(0.0, 10.0);  // [0, 1e5]
  axis.pan_pixels(-100.0);      // drag left: later times come into view
  EXPECT_NEAR(axis.start_ns(), 1e4, 1e-6);
  EXPECT_NEAR(axis.duration_ns(), 1e5, 1e-6);
  axis.pan_pixels(5000.0);  // far right: clamps at the trace start
  EXPECT_DOUBLE_EQ(axis.start_ns(), 0.0);
  axis.pan_pixels(-1e6);
  EXPECT_DOUBLE_EQ(axis.end_ns(), 1e6);
  EXPECT_NEAR(axis.duration_ns(), 1e5, 1e-6);
}

TEST(TimeAxis, BoxZoomShowsTheDraggedInterval) {
  TimeAxis axis(0.0, 1000.0, 100.0);
  EXPECT_TRUE(axis.box_zoom(60.0, 20.0));  // either drag direction
  EXPECT_DOUBLE_EQ(axis.start_ns(), 200.0);
  EXPECT_DOUBLE_EQ(axis.end_ns(), 600.0);
  EXPECT_FALSE(axis.box_zoom(10.0, 11.0));  // a click, not a drag
  EXPECT_DOUBLE_EQ(axis.start_ns(), 200.0);
}

TEST(TimeAxis, ShowRangeAddsMarginsInsideBounds) {
  TimeAxis axis(0.0, 1e6, 800.0);
  axis.show_range(1000.0, 3000.0, 0.25);
  EXPECT_DOUBLE_EQ(axis.start_ns(), 500.0);
  EXPECT_DOUBLE_EQ(axis.end_ns(), 3500.0);
  axis.show_range(0.0, 2000.0, 0.25);  // would start before the trace: slides inside
  EXPECT_DOUBLE_EQ(axis.start_ns(), 0.0);
  EXPECT_DOUBLE_EQ(axis.duration_ns(), 3000.0);
}

TEST(RulerTicks, NiceStepsWithMinimumSpacing) {
  TimeAxis axis(0.0, 1e6, 1000.0);  // 1000 ns per px
  RulerTicks ticks = ruler_ticks(axis, 80.0);
  EXPECT_DOUBLE_EQ(ticks.step_ns, 1e5);  // 80 us needed -> 100 us
  ASSERT_EQ(ticks.times_ns.size(), 11u);
  EXPECT_DOUBLE_EQ(ticks.times_ns[3], 3e5);
  ticks = ruler_ticks(axis, 150.0);  // 150 us -> 200 us
  EXPECT_DOUBLE_EQ(ticks.step_ns, 2e5);
  ticks = ruler_ticks(axis, 80.0, 33.0);  // whole steps from the trace start
  EXPECT_DOUBLE_EQ(ticks.times_ns[0], 33.0);
  EXPECT_DOUBLE_EQ(ticks.times_ns[1], 1e5 + 33.0);
}

TEST(FormatDuration, PicksUnits) {
  char text[32];
  format_duration(340, text, sizeof(text));
  EXPECT_STREQ(text, "340 ns");
  format_duration(1.25e6, text, sizeof(text));
  EXPECT_STREQ(text, "1.25 ms");
  format_duration(2.5e9, text, sizeof(text));
  EXPECT_STREQ(text, "2.5 s");
}

TEST(FormatTick, NeighbouringTicksNeverReadAlike) {
  char text[32];
  format_tick(10.85e9, 5e7, text, sizeof(text));  // 50 ms step, 10.85 s into the trace
  EXPECT_STREQ(text, "10.85 s");
  format_tick(10.9e9, 1e8, text, sizeof(text));
  EXPECT_STREQ(text, "10.9 s");
  format_tick(500e6, 1e8, text, sizeof(text));  // whole milliseconds need no decimals
  EXPECT_STREQ(text, "500 ms");
  format_tick(12e9, 2e9, text, sizeof(text));
  EXPECT_STREQ(text, "12 s");
  // Every tick of a 50 ms ruler from 10.8 s on has its own label (format_duration's 3 digits
  // gave "10.8 s" three times).
  std::set<std::string> labels;
  for (int i = 0; i < 8; ++i) {
    format_tick(10.8e9 + i * 5e7, 5e7, text, sizeof(text));
    labels.insert(text);
  }
  EXPECT_EQ(labels.size(), 8u);
}

}  // namespace
}  // namespace moescope::viewer

// Track stacking, collapse, hit testing by height, heatmap grid and colour scale.
#include <gtest/gtest.h>

#include <cstdlib>

#include "moescope/viewer/heatmap_layout.h"
#include "moescope/viewer/run_comparison.h"
#include "moescope/viewer/track_layout.h"

namespace moescope::viewer {
namespace {

TEST(TrackLayout, StacksTracksAndCollapsingRemovesTheirLanes) {
  TrackMetrics metrics;  // header 18, lane 18, plot 48, gap 4
  std::vector<TrackShape> shapes{{3, false, false}, {1, true, false}, {2, false, false}};
  auto rows = layout_tracks(shapes, metrics);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_FLOAT_EQ(rows[0].bottom, 18.0f + 3 * 18.0f);
  EXPECT_FLOAT_EQ(rows[1].top, rows[0].bottom + 4.0f);
  EXPECT_FLOAT_EQ(rows[1].bottom, rows[1].top + 18.0f + 48.0f);
  float expanded_height = tracks_height(rows);
  shapes[0].collapsed = true;
  rows = layout_tracks(shapes, metrics);
  EXPECT_FLOAT_EQ(rows[0].bottom, 18.0f);
  EXPECT_FLOAT_EQ(tracks_height(rows), expanded_height - 3 * 18.0f);
}

TEST(TrackLayout, HitTestFindsTrackAndLane) {
  TrackMetrics metrics;
  std::vector<TrackShape> shapes{{3, false, false}, {1, true, false}};
  auto rows = layout_tracks(shapes, metrics);
  EXPECT_EQ(hit_test_tracks(rows, shapes, metrics, 5.0f).track, 0);
  EXPECT_EQ(hit_test_tracks(rows, shapes, metrics, 5.0f).lane, -1);  // header
  TrackHit hit = hit_test_tracks(rows, shapes, metrics, 18.0f + 18.0f * 2 + 1.0f);
  EXPECT_EQ(hit.track, 0);
  EXPECT_EQ(hit.lane, 2);
  EXPECT_EQ(hit_test_tracks(rows, shapes, metrics, rows[0].bottom + 1.0f).track, -1);  // gap
  hit = hit_test_tracks(rows, shapes, metrics, rows[1].content_top + 10.0f);
  EXPECT_EQ(hit.track, 1);
  EXPECT_EQ(hit.lane, -1);  // plots have no lanes
}

TEST(HeatColour, IsMonotonicInBrightnessAndClamped) {
  auto brightness = [](Rgb c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b; };
  double previous = -1.0;
  for (int i = 0; i <= 100; ++i) {
    double b = brightness(heat_colour(i / 100.0));
    EXPECT_GT(b, previous) << "at " << i;
    previous = b;
  }
  Rgb top = heat_colour(1.0), beyond = heat_colour(7.0);
  EXPECT_EQ(top.r, beyond.r);
  EXPECT_EQ(top.g, beyond.g);
  EXPECT_EQ(top.b, beyond.b);
  EXPECT_EQ(packed_rgba({1, 2, 3}), 0xff030201u);
}

TEST(DeltaColour, GreyAtZeroRedForMoreBlueForFewerAndClamped) {
  const Rgb zero = delta_colour(0.0), more = delta_colour(1.0), fewer = delta_colour(-1.0);
  EXPECT_LT(std::abs(int(zero.r) - int(zero.g)), 16);  // grey
  EXPECT_GT(more.r, more.b + 100);
  EXPECT_GT(fewer.b, fewer.r + 100);
  // Stronger with the size of the difference, and clamped beyond +-1.
  EXPECT_GT(delta_colour(0.8).r, delta_colour(0.4).r);
  EXPECT_GT(delta_colour(-0.8).b, delta_colour(-0.4).b);
  EXPECT_EQ(packed_rgba(delta_colour(5.0)), packed_rgba(more));
  EXPECT_EQ(packed_rgba(delta_colour(-5.0)), packed_rgba(fewer));
}

TEST(GridLayout, CellsFitAndHitTestInverts) {
  GridLayout grid = layout_grid(10.0f, 20.0f, 500.0f, 300.0f, 4, 16, 60.0f, 20.0f, 40.0f);
  EXPECT_FLOAT_EQ(grid.left, 70.0f);
  EXPECT_FLOAT_EQ(grid.top, 40.0f);
  EXPECT_FLOAT_EQ(grid.cell_width, 27.0f);   // floor(440 / 16)
  EXPECT_FLOAT_EQ(grid.cell_height, 40.0f);  // capped
  int row = -1, column = -1;
  ASSERT_TRUE(grid.cell_at(grid.centre_x(13), grid.centre_y(2), row, column));
  EXPECT_EQ(row, 2);
  EXPECT_EQ(column, 13);
  EXPECT_FALSE(grid.cell_at(grid.left - 1.0f, grid.top + 1.0f, row, column));
  EXPECT_FALSE(grid.cell_at(grid.cell_x(16) + 1.0f, grid.top + 1.0f, row, column));
}

}  // namespace
}  // namespace moescope::viewer

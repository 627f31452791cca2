// Visible-range search, folding of tiny spans, hit testing and lane assignment.
#include <gtest/gtest.h>

#include <random>

#include "moescope/viewer/lane_layout.h"

namespace moescope::viewer {
namespace {

Lane lane_of(std::initializer_list<std::pair<int64_t, int64_t>> spans) {
  Lane lane;
  uint32_t i = 0;
  for (auto [start, end] : spans) lane.push(start, end, i++);
  return lane;
}

TEST(VisibleSlots, FindsExactlyTheOverlappingSpans) {
  Lane lane = lane_of({{0, 10}, {20, 30}, {40, 50}, {60, 70}});
  SlotRange range = visible_slots(lane, 25.0, 45.0);
  EXPECT_EQ(range.first, 1u);
  EXPECT_EQ(range.last, 3u);
  range = visible_slots(lane, 10.0, 20.0);  // touches both ends only: nothing visible
  EXPECT_EQ(range.first, range.last);
  range = visible_slots(lane, -100.0, 1000.0);
  EXPECT_EQ(range.first, 0u);
  EXPECT_EQ(range.last, 4u);
}

TEST(VisibleSlots, AgreesWithALinearScanOnRandomLanes) {
  std::mt19937 random(7);
  Lane lane;
  int64_t t = 0;
  for (int i = 0; i < 2000; ++i) {
    t += random() % 50;
    int64_t end = t + 1 + random() % 40;
    lane.push(t, end, static_cast<uint32_t>(i));
    t = end;
  }
  for (int trial = 0; trial < 200; ++trial) {
    double a = random() % t, b = a + random() % 2000;
    SlotRange range = visible_slots(lane, a, b);
    size_t expected_first = lane.size(), expected_last = 0;
    for (size_t i = 0; i < lane.size(); ++i) {
      if (lane.end_ns[i] > a && lane.start_ns[i] < b) {
        expected_first = std::min(expected_first, i);
        expected_last = i + 1;
      }
    }
    if (expected_last == 0) {
      EXPECT_EQ(range.first, range.last);
    } else {
      EXPECT_EQ(range.first, expected_first);
      EXPECT_EQ(range.last, expected_last);
    }
  }
}

TEST(Folding, WideSpansAreDrawnOneByOne) {
  Lane lane = lane_of({{0, 100}, {200, 300}, {400, 500}});
  TimeAxis axis(0.0, 1000.0, 1000.0);  // 1 ns per px
  std::vector<LaneDrawItem> items;
  build_lane_draw_items(lane, axis, 3.0, items);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_FLOAT_EQ(items[1].x0, 200.0f);
  EXPECT_FLOAT_EQ(items[1].x1, 300.0f);
  EXPECT_EQ(items[1].count, 1u);
}

TEST(Folding, RunsOfTinySpansFoldIntoOneItemWithTheirCount) {
  // 1000 spans of 1 ns every 2 ns, then a gap, then a wide span; 1 px = 10 ns.
  Lane lane;
  for (uint32_t i = 0; i < 1000; ++i) lane.push(2 * i, 2 * i + 1, i);
  lane.push(5000, 8000, 1000);
  TimeAxis axis(0.0, 10000.0, 1000.0);
  std::vector<LaneDrawItem> items;
  build_lane_draw_items(lane, axis, 3.0, items);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(items[0].folded());
  EXPECT_EQ(items[0].first_slot, 0u);
  EXPECT_EQ(items[0].count, 1000u);
  EXPECT_NEAR(items[0].x1, 199.9f, 0.01f);  // ends where the last folded span ends
  EXPECT_EQ(items[1].count, 1u);
  EXPECT_EQ(items[1].first_slot, 1000u);
}

TEST(Folding, AGapWiderThanTheFoldWidthSplitsFolds) {
  Lane lane = lane_of({{0, 1}, {2, 3}, {100, 101}, {102, 103}});
  TimeAxis axis(0.0, 1000.0, 1000.0);  // 1 ns per px, fold 3 px = 3 ns
  std::vector<LaneDrawItem> items;
  build_lane_draw_items(lane, axis, 3.0, items);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].count, 2u);
  EXPECT_EQ(items[1].first_slot, 2u);
  EXPECT_EQ(items[1].count, 2u);
}

TEST(Folding, AWideSpanRightAfterTinyOnesIsNotSwallowed) {
  Lane lane = lane_of({{0, 1}, {2, 3}, {4, 500}});
  TimeAxis axis(0.0, 1000.0, 1000.0);
  std::vector<LaneDrawItem> items;
  build_lane_draw_items(lane, axis, 3.0, items);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].count, 2u);
  EXPECT_EQ(items[1].first_slot, 2u);
  EXPECT_EQ(items[1].count, 1u);
}

TEST(Folding, EverySpanIsCoveredExactlyOnce) {
  std::mt19937 random(11);
  Lane lane;
  int64_t t = 0;
  for (uint32_t i = 0; i < 50000; ++i) {
    t += random() % 30;
    int64_t end = t + 1 + (random() % 100 == 0 ? 5000 : random() % 20);
    lane.push(t, end, i);
    t = end;
  }
  for (double width : {100.0, 1000.0, 4000.0}) {
    TimeAxis axis(0.0, static_cast<double>(t), width);
    std::vector<LaneDrawItem> items;
    build_lane_draw_items(lane, axis, 3.0, items);
    size_t next = 0;
    for (const LaneDrawItem& item : items) {
      ASSERT_EQ(item.first_slot, next);
      next += item.count;
      if (item.folded()) {
        EXPECT_GE(item.x1 - item.x0, 3.0f - 1e-3f);
      }
    }
    EXPECT_EQ(next, lane.size());
    EXPECT_LT(items.size(), static_cast<size_t>(width));  // bounded by pixels, not spans
  }
}

TEST(HitTest, FindsTheSpanUnderTheCursorOrTheNearestWithinTolerance) {
  Lane lane = lane_of({{0, 10}, {20, 21}, {40, 50}});
  EXPECT_EQ(hit_test_lane(lane, 5.0, 0.0), 0);
  EXPECT_EQ(hit_test_lane(lane, 22.0, 2.0), 1);  // 1 ns span, clicked 1 ns beside it
  EXPECT_EQ(hit_test_lane(lane, 30.0, 2.0), -1);
  EXPECT_EQ(hit_test_lane(lane, 45.0, 2.0), 2);
}

TEST(AssignLanes, NestedSpansGetTheirDepthAndConcurrentOnesAnExtraLane) {
  // A [0,100) contains B [10,50) which contains C [20,30); D [60,90) is inside A after B.
  std::vector<int64_t> starts{0, 10, 20, 60, 200, 210};
  std::vector<int64_t> ends{100, 50, 30, 90, 300, 250};
  std::vector<uint32_t> lanes = assign_lanes(starts, ends);
  EXPECT_EQ(lanes, (std::vector<uint32_t>{0, 1, 2, 1, 0, 1}));
}

}  // namespace
}  // namespace moescope::viewer

namespace moescope::viewer {
namespace {

TEST(Folding, TheFoldIndexGivesTheSameItemsAsBinarySearches) {
  std::mt19937 random(5);
  Lane plain;
  int64_t t = 0;
  for (uint32_t i = 0; i < 300000; ++i) {
    t += random() % 1000 == 0 ? 200000 : random() % 30;  // occasional wide gaps
    int64_t end = t + 1 + (random() % 500 == 0 ? 100000 : random() % 20);
    plain.push(t, end, i);
    t = end;
  }
  Lane indexed = plain;
  indexed.build_fold_index();
  for (double width : {300.0, 1600.0, 20000.0}) {
    for (double zoom : {1.0, 7.0, 300.0}) {
      TimeAxis axis(0.0, static_cast<double>(t), width);
      axis.zoom_around(width * 0.37, zoom);
      std::vector<LaneDrawItem> expected, actual;
      build_lane_draw_items(plain, axis, 3.0, expected);
      build_lane_draw_items(indexed, axis, 3.0, actual);
      ASSERT_EQ(expected.size(), actual.size()) << width << " px, zoom " << zoom;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(expected[i].first_slot, actual[i].first_slot);
        EXPECT_EQ(expected[i].count, actual[i].count);
      }
    }
  }
}

TEST(Folding, FirstFoldBreakSkipsBlocksExactly) {
  Lane lane;
  for (uint32_t i = 0; i < 10000; ++i) lane.push(2 * i, 2 * i + 1, i);  // keys: 1
  lane.start_ns[7777] += 0;  // keep sorted; make slot 7777 wide instead
  lane.end_ns[7777] = lane.start_ns[7777] + 1;
  lane.start_ns[9000] = lane.end_ns[8999] + 50;  // a 50 ns gap before slot 9000
  lane.end_ns[9000] = lane.start_ns[9000] + 1;
  for (uint32_t i = 9001; i < 10000; ++i) {
    lane.start_ns[i] = lane.end_ns[i - 1] + 1;
    lane.end_ns[i] = lane.start_ns[i] + 1;
  }
  lane.build_fold_index();
  EXPECT_EQ(first_fold_break(lane, 1, 10.0), 9000u);
  EXPECT_EQ(first_fold_break(lane, 9000, 10.0), 9000u);
  EXPECT_EQ(first_fold_break(lane, 9001, 10.0), lane.size());
  EXPECT_EQ(first_fold_break(lane, 0, 1.0), 0u);  // width 1 reaches a 1 ns threshold
}

}  // namespace
}  // namespace moescope::viewer

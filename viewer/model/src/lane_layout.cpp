#include "moescope/viewer/lane_layout.h"

#include <algorithm>
#include <cmath>

namespace moescope::viewer {

void Lane::build_fold_index() {
  size_t n = size();
  fold_key_max_64.assign((n + 63) / 64, 0.0f);
  fold_key_max_4096.assign((n + 4095) / 4096, 0.0f);
  for (size_t slot = 0; slot < n; ++slot) {
    // Round up so a block's maximum never understates a key (float has 24 mantissa bits).
    float key = static_cast<float>(fold_key(slot)) * (1.0f + 1e-6f);
    fold_key_max_64[slot / 64] = std::max(fold_key_max_64[slot / 64], key);
    fold_key_max_4096[slot / 4096] = std::max(fold_key_max_4096[slot / 4096], key);
  }
}

size_t first_fold_break(const Lane& lane, size_t from, double threshold_ns) {
  const size_t n = lane.size();
  size_t slot = from;
  if (lane.fold_key_max_64.size() != (n + 63) / 64 ||
      lane.fold_key_max_4096.size() != (n + 4095) / 4096) {
    while (slot < n && lane.fold_key(slot) < threshold_ns) ++slot;  // no index: plain scan
    return slot;
  }
  auto scan_to = [&](size_t limit) {
    for (; slot < limit && slot < n; ++slot) {
      if (lane.fold_key(slot) >= threshold_ns) return true;
    }
    return false;
  };
  // Finish the current 64-block, then 64-blocks up to a 4096 boundary, then 4096-blocks,
  // descending into the first block whose maximum reaches the threshold.
  if (scan_to((slot + 63) / 64 * 64)) return slot;
  while (slot < n && slot % 4096 != 0) {
    if (lane.fold_key_max_64[slot / 64] >= threshold_ns && scan_to(slot + 64)) return slot;
    slot = std::min(slot / 64 * 64 + 64, n);
  }
  while (slot < n) {
    if (lane.fold_key_max_4096[slot / 4096] >= threshold_ns) {
      size_t block_end = std::min(slot + 4096, n);
      while (slot < block_end) {
        if (lane.fold_key_max_64[slot / 64] >= threshold_ns && scan_to(slot + 64)) return slot;
        slot = std::min(slot + 64, block_end);
      }
    } else {
      slot = std::min(slot + 4096, n);
    }
  }
  return n;
}

SlotRange visible_slots(const Lane& lane, double view_start_ns, double view_end_ns) {
  // Ends are sorted: the first visible span is the first one ending after the view start.
  auto first = std::upper_bound(lane.end_ns.begin(), lane.end_ns.end(), view_start_ns,
                                [](double t, int64_t end) { return t < static_cast<double>(end); });
  size_t first_index = static_cast<size_t>(first - lane.end_ns.begin());
  auto last = std::lower_bound(
      lane.start_ns.begin() + static_cast<std::ptrdiff_t>(first_index), lane.start_ns.end(),
      view_end_ns, [](int64_t start, double t) { return static_cast<double>(start) < t; });
  return {first_index, static_cast<size_t>(last - lane.start_ns.begin())};
}

namespace {

// First slot in [from, size) whose start is >= time_ns.
size_t first_start_at_or_after(const Lane& lane, size_t from, double time_ns) {
  auto it = std::lower_bound(
      lane.start_ns.begin() + static_cast<std::ptrdiff_t>(from), lane.start_ns.end(), time_ns,
      [](int64_t start, double t) { return static_cast<double>(start) < t; });
  return static_cast<size_t>(it - lane.start_ns.begin());
}

}  // namespace

void build_lane_draw_items(const Lane& lane, const TimeAxis& axis, double fold_px,
                           std::vector<LaneDrawItem>& out) {
  SlotRange range = visible_slots(lane, axis.start_ns(), axis.end_ns());
  const double fold_ns = fold_px * axis.ns_per_px();
  const size_t size = lane.size();
  size_t slot = range.first;
  while (slot < range.last) {
    double start = static_cast<double>(lane.start_ns[slot]);
    double end = static_cast<double>(lane.end_ns[slot]);
    if (end - start >= fold_ns) {
      out.push_back({static_cast<float>(axis.time_to_x(start)),
                     static_cast<float>(axis.time_to_x(end)), static_cast<uint32_t>(slot), 1});
      ++slot;
      continue;
    }
    // A fold: absorb every following narrow span that starts within fold_ns of the fold's end.
    // Each search either ends the fold or moves its end by at least fold_ns within two rounds,
    // so a fold costs O(its width in fold_px x log n).
    size_t last_in_fold = slot;
    double fold_end = end;
    if (!lane.fold_key_max_64.empty()) {
      // With the fold index: the fold runs up to the first wide span or wide gap.
      last_in_fold = first_fold_break(lane, slot + 1, fold_ns) - 1;
      fold_end = static_cast<double>(lane.end_ns[last_in_fold]);
    }
    while (lane.fold_key_max_64.empty()) {
      size_t next = first_start_at_or_after(lane, last_in_fold + 1, fold_end + fold_ns);
      // Slots (last_in_fold, next) start within reach; only the last of them can be wide,
      // because all earlier ones end before the start of a later one, inside the reach.
      if (next == last_in_fold + 1) break;
      size_t candidate = next - 1;
      double candidate_width =
          static_cast<double>(lane.end_ns[candidate] - lane.start_ns[candidate]);
      if (candidate_width >= fold_ns) candidate -= 1;  // leave the wide span to be drawn alone
      if (candidate == last_in_fold) break;
      last_in_fold = candidate;
      fold_end = static_cast<double>(lane.end_ns[candidate]);
      if (last_in_fold + 1 >= size) break;
    }
    uint32_t count = static_cast<uint32_t>(last_in_fold - slot + 1);
    double x0 = axis.time_to_x(start);
    // A fold is drawn at least fold_px wide so it stays visible.
    double x1 = std::max(axis.time_to_x(fold_end), x0 + fold_px);
    out.push_back(
        {static_cast<float>(x0), static_cast<float>(x1), static_cast<uint32_t>(slot), count});
    slot = last_in_fold + 1;
  }
}

int64_t hit_test_lane(const Lane& lane, double time_ns, double tolerance_ns) {
  if (lane.size() == 0) return -1;
  SlotRange range = visible_slots(lane, time_ns - tolerance_ns, time_ns + tolerance_ns);
  int64_t best = -1;
  double best_distance = tolerance_ns;
  for (size_t slot = range.first; slot < range.last; ++slot) {
    double start = static_cast<double>(lane.start_ns[slot]);
    double end = static_cast<double>(lane.end_ns[slot]);
    if (time_ns >= start && time_ns <= end) return static_cast<int64_t>(slot);
    double distance = time_ns < start ? start - time_ns : time_ns - end;
    if (distance <= best_distance) {
      best_distance = distance;
      best = static_cast<int64_t>(slot);
    }
    if (slot - range.first > 64) break;  // a fold of thousands: the nearest is among the first
  }
  return best;
}

std::vector<uint32_t> assign_lanes(std::span<const int64_t> start_ns,
                                   std::span<const int64_t> end_ns) {
  std::vector<uint32_t> lane_of(start_ns.size());
  std::vector<int64_t> lane_end;  // end of the last span placed in each lane
  for (size_t i = 0; i < start_ns.size(); ++i) {
    uint32_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > start_ns[i]) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0);
    lane_end[lane] = end_ns[i];
    lane_of[i] = lane;
  }
  return lane_of;
}

}  // namespace moescope::viewer

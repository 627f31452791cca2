#include "moescope/analysis/intervals.h"

#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {

IntervalSet IntervalSet::union_of(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.end <= i.start; });
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  IntervalSet set;
  for (const Interval& interval : intervals) {
    if (!set.intervals_.empty() && interval.start <= set.intervals_.back().end) {
      set.intervals_.back().end = std::max(set.intervals_.back().end, interval.end);
    } else {
      set.intervals_.push_back(interval);
    }
  }
  return set;
}

TimeNs IntervalSet::covered() const {
  TimeNs total = 0;
  for (const Interval& interval : intervals_) {
    total = trace::saturating_add(total, trace::saturating_duration(interval.start, interval.end));
  }
  return total;
}

IntervalSet IntervalSet::intersect(const IntervalSet& other) const {
  IntervalSet result;
  size_t i = 0, j = 0;
  const auto& a = intervals_;
  const auto& b = other.intervals_;
  while (i < a.size() && j < b.size()) {
    TimeNs start = std::max(a[i].start, b[j].start);
    TimeNs end = std::min(a[i].end, b[j].end);
    if (start < end) result.intervals_.push_back({start, end});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return result;
}

IntervalSet IntervalSet::subtract(const IntervalSet& other) const {
  IntervalSet result;
  size_t j = 0;
  const auto& b = other.intervals_;
  for (Interval piece : intervals_) {
    while (j < b.size() && b[j].end <= piece.start) ++j;
    size_t k = j;
    while (k < b.size() && b[k].start < piece.end) {
      if (b[k].start > piece.start) result.intervals_.push_back({piece.start, b[k].start});
      piece.start = std::max(piece.start, b[k].end);
      if (piece.start >= piece.end) break;
      ++k;
    }
    if (piece.start < piece.end) result.intervals_.push_back(piece);
  }
  return result;
}

IntervalSet IntervalSet::unite(const IntervalSet& other) const {
  std::vector<Interval> all = intervals_;
  all.insert(all.end(), other.intervals_.begin(), other.intervals_.end());
  return union_of(std::move(all));
}

}  // namespace moescope::analysis

// Unions of time intervals: the arithmetic behind the breakdowns (covered time, overlap).
#pragma once

#include <algorithm>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct Interval {
  TimeNs start = 0, end = 0;
};

// Sorted, disjoint, non-empty intervals.
class IntervalSet {
 public:
  IntervalSet() = default;
  // Builds the union of `intervals` (any order, empty ones dropped).
  static IntervalSet union_of(std::vector<Interval> intervals);
  TimeNs covered() const;
  IntervalSet intersect(const IntervalSet& other) const;
  IntervalSet subtract(const IntervalSet& other) const;
  IntervalSet unite(const IntervalSet& other) const;
  const std::vector<Interval>& intervals() const { return intervals_; }

 private:
  std::vector<Interval> intervals_;
};

}  // namespace moescope::analysis

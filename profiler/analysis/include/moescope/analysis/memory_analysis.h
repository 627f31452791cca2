// Memory per rank: usage over time by category, the peak and what was live at it, and the
// device capacity when the metadata names it ("gpus": [{"total_memory_bytes": N}] or
// "device_memory_bytes": N).
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct LiveAllocation {
  uint64_t address = 0;
  int64_t bytes = 0;
  int32_t device = -1;
  uint16_t category = 0;
  TimeNs allocated_at = 0;
};

struct RankMemory {
  int32_t rank = 0;
  int64_t peak_bytes = 0;
  TimeNs peak_time = 0;
  int64_t peak_by_category[kNumMemoryCategories] = {};  // in use at the peak
  std::vector<LiveAllocation> largest_at_peak;          // largest first
  size_t live_at_peak = 0;                              // allocations live at the peak
  uint64_t allocations = 0, frees = 0, unmatched_frees = 0;
  uint64_t capacity_bytes = 0;  // 0 = unknown
  int64_t final_bytes = 0;      // in use after the last event
};

// One process (the viewer's memory panel), listing up to `max_largest` live allocations.
RankMemory analyze_rank_memory(const ProcessTrack& process, size_t max_largest = 10);

// Every process, in model order (the report).
std::vector<RankMemory> analyze_memory(const TraceModel& model);

}  // namespace moescope::analysis

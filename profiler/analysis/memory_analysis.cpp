// Memory peaks and what was live there (see memory_analysis.h).
#include "moescope/analysis/memory_analysis.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

namespace moescope::analysis {
namespace {

uint64_t capacity_from_metadata(const std::string& json_text) {
  auto meta = nlohmann::json::parse(json_text, nullptr, false);
  if (!meta.is_object()) return 0;
  if (meta.contains("device_memory_bytes") && meta["device_memory_bytes"].is_number()) {
    return meta["device_memory_bytes"].get<uint64_t>();
  }
  if (meta.contains("gpus") && meta["gpus"].is_array()) {
    for (const auto& gpu : meta["gpus"]) {
      if (gpu.is_object() && gpu.contains("total_memory_bytes") &&
          gpu["total_memory_bytes"].is_number()) {
        return gpu["total_memory_bytes"].get<uint64_t>();
      }
    }
  }
  return 0;
}

}  // namespace

RankMemory analyze_rank_memory(const ProcessTrack& process, size_t max_largest) {
  RankMemory memory;
  memory.rank = process.rank;
  memory.capacity_bytes = capacity_from_metadata(process.metadata_json);
  const auto& usage = process.memory_usage;
  size_t peak_index = 0;
  for (size_t i = 0; i < usage.total.size(); ++i) {
    if (usage.total[i] > memory.peak_bytes) memory.peak_bytes = usage.total[i], peak_index = i;
  }
  if (!usage.total.empty()) {
    memory.peak_time = usage.times[peak_index];
    memory.final_bytes = usage.total.back();
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      memory.peak_by_category[c] = usage.by_category[c][peak_index];
    }
  }
  // Replay to the peak for what was live there.
  std::unordered_map<uint64_t, LiveAllocation> live;
  for (size_t i = 0; i < process.memory_events.size(); ++i) {
    const MemoryEvent& event = process.memory_events[i];
    uint64_t key =
        event.address ^ (static_cast<uint64_t>(static_cast<uint32_t>(event.device)) << 48);
    if (event.is_free) {
      ++memory.frees;
      memory.unmatched_frees += event.unmatched;
      if (i <= peak_index) live.erase(key);
    } else {
      ++memory.allocations;
      if (i <= peak_index) {
        live[key] = {event.address, event.bytes, event.device, event.category, event.time};
      }
    }
  }
  if (!usage.total.empty()) {
    memory.live_at_peak = live.size();
    for (const auto& [key, allocation] : live) memory.largest_at_peak.push_back(allocation);
    std::sort(memory.largest_at_peak.begin(), memory.largest_at_peak.end(),
              [](const LiveAllocation& a, const LiveAllocation& b) {
                return a.bytes != b.bytes ? a.bytes > b.bytes : a.address < b.address;
              });
    if (memory.largest_at_peak.size() > max_largest) memory.largest_at_peak.resize(max_largest);
  }
  return memory;
}

std::vector<RankMemory> analyze_memory(const TraceModel& model) {
  std::vector<RankMemory> result;
  for (const auto& process : model.processes) result.push_back(analyze_rank_memory(process));
  return result;
}

}  // namespace moescope::analysis

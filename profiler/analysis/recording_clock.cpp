// Wall clocks of recordings (recording_clock.h).
#include "recording_clock.h"

#include <nlohmann/json.hpp>

#include "moescope/analysis/kineto_import.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

// Timestamps past this (2001-01-01) are unix times, not times since the profiler started.
constexpr TimeNs kUnixTimesFrom = 978'307'200'000'000'000;

std::optional<int64_t> integer_at(const nlohmann::json& meta, const char* key) {
  if (!meta.is_object()) return std::nullopt;
  const auto found = meta.find(key);
  if (found == meta.end() || !found->is_number_integer()) return std::nullopt;
  return found->get<int64_t>();
}

// A Kineto trace's offset to unix time: its base time, or 0 where its ts are unix times.
std::optional<TimeNs> kineto_unix_offset(const ProcessTrack& process) {
  const auto meta = nlohmann::json::parse(process.metadata_json, nullptr, false);
  if (const auto base = integer_at(meta, kKinetoBaseTimeKey)) return *base;
  if (process.begin > kUnixTimesFrom) return 0;
  return std::nullopt;
}

}  // namespace

std::optional<TimeNs> moetrace_unix_offset(const ProcessTrack& process) {
  const auto meta = nlohmann::json::parse(process.metadata_json, nullptr, false);
  const auto unix_start = integer_at(meta, "start_unix_ns");
  const auto trace_start = integer_at(meta, "start_ns");
  if (!unix_start || !trace_start) return std::nullopt;
  return trace::saturating_sub(*unix_start, *trace_start);
}

std::optional<std::pair<TimeNs, TimeNs>> recorded_wall_range(const ProcessTrack& process) {
  const auto offset = process.source_format == "kineto" ? kineto_unix_offset(process)
                                                        : moetrace_unix_offset(process);
  if (!offset) return std::nullopt;
  return std::make_pair(trace::saturating_add(process.begin, *offset),
                        trace::saturating_add(process.end, *offset));
}

}  // namespace moescope::analysis

// Clock alignment across hosts (see clock_alignment.h for the order of methods).
#include "moescope/analysis/clock_alignment.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "file_load.h"
#include "moescope/trace/time_arithmetic.h"
#include "recording_clock.h"

namespace moescope::analysis {
namespace {

bool is_collective(uint32_t kind) {
  switch (kind) {
    case 1:  // all-reduce
    case 2:  // all-gather
    case 3:  // reduce-scatter
    case 6:  // all-to-all
    case 9:  // barrier
      return true;
    default:
      return false;
  }
}

// For keyed events seen on several hosts: per host, the median difference to the reference
// host over the keys both have. Returns false when some host shares no key with the reference.
bool offsets_from_keys(const std::vector<std::map<uint64_t, std::vector<TimeNs>>>& by_host,
                       std::vector<TimeNs>& host_offsets) {
  host_offsets.assign(by_host.size(), 0);
  const auto& reference = by_host[0];
  for (size_t h = 1; h < by_host.size(); ++h) {
    std::vector<TimeNs> differences;
    for (const auto& [key, times] : by_host[h]) {
      auto found = reference.find(key);
      if (found == reference.end()) continue;
      differences.push_back(median(found->second) - median(times));
    }
    if (differences.empty()) return false;
    host_offsets[h] = median(differences);
  }
  return true;
}

// One collective (the n-th of a communicator) as the processes of one host ran it: the latest
// entry and the earliest end of any of them.
struct CollectiveSpan {
  TimeNs latest_entry = std::numeric_limits<TimeNs>::min();
  TimeNs earliest_end = std::numeric_limits<TimeNs>::max();
};

// Every collective of every process, keyed alike on every host: the ends (for the offsets) and
// the spans (for the error bounds), per host.
struct HostCollectives {
  std::vector<std::map<uint64_t, std::vector<TimeNs>>> ends;
  std::vector<std::map<uint64_t, CollectiveSpan>> spans;
};

HostCollectives collectives_by_host(const TraceModel& model, const std::vector<size_t>& host_of,
                                    size_t num_hosts) {
  HostCollectives result{std::vector<std::map<uint64_t, std::vector<TimeNs>>>(num_hosts),
                         std::vector<std::map<uint64_t, CollectiveSpan>>(num_hosts)};
  for (size_t p = 0; p < model.processes.size(); ++p) {
    // Every rank issues the collectives of one communicator in the same order, so the n-th
    // collective of a communicator is the same operation everywhere (sequence numbers are not
    // always recorded).
    for (const auto& comm : model.processes[p].communicators) {
      uint64_t ordinal = 0;
      for (const CommOp& op : comm.ops) {
        if (!is_collective(op.kind)) continue;
        uint64_t key = comm.comm_id * 0x9E3779B97F4A7C15ull ^ (ordinal++ << 1);
        if (op.flags & kCommEndUnknown) continue;
        result.ends[host_of[p]][key].push_back(op.end);
        CollectiveSpan& span = result.spans[host_of[p]][key];
        const TimeNs entry = op.enqueue != 0 ? std::min(op.enqueue, op.start) : op.start;
        span.latest_entry = std::max(span.latest_entry, entry);
        span.earliest_end = std::min(span.earliest_end, op.end);
      }
    }
  }
  return result;
}

// The causality interval of a host's offset against the reference host (HostClock in
// trace_model.h) and the error bound of `offset` within it.
HostClock bound_offset(const std::map<uint64_t, CollectiveSpan>& reference,
                       const std::map<uint64_t, CollectiveSpan>& host, TimeNs offset) {
  HostClock clock;
  clock.offset = offset;
  TimeNs lowest = std::numeric_limits<TimeNs>::min();
  TimeNs highest = std::numeric_limits<TimeNs>::max();
  for (const auto& [key, here] : host) {
    auto there = reference.find(key);
    if (there == reference.end()) continue;
    highest =
        std::min(highest, trace::saturating_sub(there->second.earliest_end, here.latest_entry));
    lowest = std::max(lowest, trace::saturating_sub(there->second.latest_entry, here.earliest_end));
    ++clock.bounding_collectives;
  }
  if (clock.bounding_collectives == 0 || lowest > highest) return clock;
  clock.lowest_offset = lowest;
  clock.highest_offset = highest;
  clock.error_bound =
      std::max(trace::saturating_sub(offset, lowest), trace::saturating_sub(highest, offset));
  return clock;
}

}  // namespace

ClockAlignment compute_clock_alignment(const TraceModel& model) {
  ClockAlignment result;
  const size_t n = model.processes.size();
  result.offsets.assign(n, 0);
  if (n == 0) return result;
  // Host of each process; processes with no host name are taken to share the first's.
  std::vector<std::string> hosts;
  std::vector<size_t> host_of(n);
  for (size_t p = 0; p < n; ++p) {
    std::string host =
        model.processes[p].host.empty() ? model.processes[0].host : model.processes[p].host;
    auto found = std::find(hosts.begin(), hosts.end(), host);
    host_of[p] = static_cast<size_t>(found - hosts.begin());
    if (found == hosts.end()) hosts.push_back(host);
  }
  if (hosts.size() == 1) return result;

  const HostCollectives collectives = collectives_by_host(model, host_of, hosts.size());
  std::vector<TimeNs> host_offsets;
  std::vector<std::map<uint64_t, std::vector<TimeNs>>> syncs(hosts.size());
  for (size_t p = 0; p < n; ++p) {
    for (const auto& point : model.processes[p].clock_sync_points) {
      syncs[host_of[p]][point.sync_id].push_back(point.time);
    }
  }
  if (offsets_from_keys(syncs, host_offsets)) {
    result.method = ClockAlignmentMethod::kClockSync;
  } else {
    if (offsets_from_keys(collectives.ends, host_offsets)) {
      result.method = ClockAlignmentMethod::kCollectiveEnds;
    } else {
      // Wall clock: unix = trace time + (start_unix_ns - start_ns) per process.
      std::vector<TimeNs> to_unix(n, 0);
      bool known = true;
      for (size_t p = 0; p < n; ++p) {
        const std::optional<TimeNs> offset = moetrace_unix_offset(model.processes[p]);
        if (!offset) {
          known = false;
          break;
        }
        to_unix[p] = *offset;
      }
      if (!known) {
        result.method = ClockAlignmentMethod::kNone;
        return result;
      }
      for (size_t p = 0; p < n; ++p)
        result.offsets[p] = trace::saturating_sub(to_unix[p], to_unix[0]);
      result.method = ClockAlignmentMethod::kWallClock;
      // A host's offset is its first process's (the others' differ by their start stamps'
      // error, which the bound below does not see).
      host_offsets.assign(hosts.size(), 0);
      for (size_t p = n; p-- > 0;) host_offsets[host_of[p]] = result.offsets[p];
    }
  }
  if (result.method != ClockAlignmentMethod::kWallClock) {
    for (size_t p = 0; p < n; ++p) result.offsets[p] = host_offsets[host_of[p]];
  }
  for (size_t h = 1; h < hosts.size(); ++h) {
    result.hosts.push_back(
        bound_offset(collectives.spans[0], collectives.spans[h], host_offsets[h]));
    result.hosts.back().host = hosts[h];
  }
  return result;
}

// shift_process_times: process_finalize.cpp

void align_clocks(TraceModel& model) {
  ClockAlignment alignment = compute_clock_alignment(model);
  model.clock_alignment = alignment.method;
  model.host_clocks = alignment.hosts;
  for (size_t p = 0; p < model.processes.size(); ++p) {
    TimeNs offset = alignment.offsets[p];
    if (offset == 0) continue;
    // Every time of a process is within +-2^62 ns (record_validation.cpp): an offset of less
    // than 2^62 cannot overflow; one that would move the process's range past 2^62 comes from
    // damaged clocks and is not applied.
    const ProcessTrack& process = model.processes[p];
    if (!(offset > -trace::kMaxPlausibleTimeNs && offset < trace::kMaxPlausibleTimeNs) ||
        !trace::plausible_time(process.begin + offset) ||
        !trace::plausible_time(process.end + offset)) {
      model.errors.push_back({process.file, 0,
                              "clock alignment offset of " + std::to_string(offset) +
                                  " ns would move this rank's times past +-2^62 ns: not applied"});
      continue;
    }
    shift_process_times(model.processes[p], offset);
    for_each_sample_array([&](const auto& array) {
      for (auto& sample : model.*array.samples) {
        if (sample.process == p) sample.time = trace::saturating_add(sample.time, offset);
      }
    });
    for (auto& flow : model.flows) {
      if (flow.from.process == p) flow.from_time = trace::saturating_add(flow.from_time, offset);
      if (flow.to.process == p) flow.to_time = trace::saturating_add(flow.to_time, offset);
    }
  }
  if (!model.processes.empty()) update_model_time_range(model);
}

}  // namespace moescope::analysis

// Per rank and step time breakdown (definitions in time_breakdown.h).
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <map>

#include "moescope/analysis/intervals.h"
#include "moescope/analysis/visible_range.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

constexpr double kMsPerNs = 1e-6;

// The fields of a StepBreakdown that add up over steps, by how a rank's mean per step is made of
// their total: times divide, counts divide and round to a whole number (allocated_bytes, the
// one 64-bit count, saturates instead).
constexpr double StepBreakdown::*kMillisecondFields[] = {
    &StepBreakdown::step_ms,
    &StepBreakdown::compute_ms,
    &StepBreakdown::communication_ms,
    &StepBreakdown::exposed_communication_ms,
    &StepBreakdown::overlapped_communication_ms,
    &StepBreakdown::memcpy_ms,
    &StepBreakdown::idle_ms,
    &StepBreakdown::host_sync_ms,
    &StepBreakdown::launch_gap_ms};
constexpr uint32_t StepBreakdown::*kCountFields[] = {
    &StepBreakdown::host_syncs, &StepBreakdown::blocking_d2h_copies, &StepBreakdown::allocations};

bool is_communication_kernel(const std::string& name) {
  return name.rfind("nccl", 0) == 0 || name.find("ncclKernel") != std::string::npos;
}

void clip_into(std::vector<Interval>& out, TimeNs start, TimeNs end, TimeNs t0, TimeNs t1) {
  start = std::max(start, t0);
  end = std::min(end, t1);
  if (start < end) out.push_back({start, end});
}

}  // namespace

StepBreakdown breakdown_interval(const TraceModel& model, const ProcessTrack& process, TimeNs t0,
                                 TimeNs t1) {
  StepBreakdown result;
  result.rank = process.rank;
  result.start = t0;
  result.end = t1;
  result.step_ms = double(t1 - t0) * kMsPerNs;
  std::vector<Interval> compute, communication, memcpy, syncs, launch_waits;
  bool has_kernels = false;
  for (const auto& stream : process.gpu_streams) {
    IndexRange range = visible_range(stream, t0, t1);
    const GpuOp* previous = nullptr;
    for (size_t i = range.begin; i < range.end; ++i) {
      const GpuOp& op = stream.ops[i];
      if (op.end <= t0 && op.start < t0) continue;
      switch (op.kind) {
        case GpuOpKind::kKernel:
          has_kernels = true;
          clip_into(is_communication_kernel(model.name(op.name)) ? communication : compute,
                    op.start, op.end, t0, t1);
          break;
        case GpuOpKind::kMemcpy:
        case GpuOpKind::kMemset:
          clip_into(memcpy, op.start, op.end, t0, t1);
          break;
        case GpuOpKind::kSync:
          clip_into(syncs, op.start, op.end, t0, t1);
          ++result.host_syncs;
          break;
      }
      if (op.kind == GpuOpKind::kSync || stream.stream == kAllStreams) continue;
      // The GPU went idle and the next op's launch call ended after that: launch-bound gap.
      if (previous && op.start > previous->end && op.launch_thread != kNoIndex && op.start >= t0) {
        const ApiCall& call = process.threads[op.launch_thread].api_calls[op.launch_call];
        if (call.end > previous->end) {
          launch_waits.push_back({previous->end, std::min(op.start, call.end)});
        }
      }
      previous = &op;
    }
  }
  for (const auto& comm : process.communicators) {
    IndexRange range = visible_range(comm, t0, t1);
    for (size_t i = range.begin; i < range.end; ++i) {
      clip_into(communication, comm.ops[i].start, comm.ops[i].end, t0, t1);
    }
  }
  IntervalSet communication_set = IntervalSet::union_of(std::move(communication));
  IntervalSet compute_set;
  if (has_kernels) {
    compute_set = IntervalSet::union_of(std::move(compute));
  } else {
    // CPU run: the CPU spans are the work, except ranges that contain the whole step.
    for (const auto& thread : process.threads) {
      for (size_t depth = 0; depth < thread.spans_by_depth.size(); ++depth) {
        IndexRange range = visible_spans(thread, depth, t0, t1);
        for (size_t k = range.begin; k < range.end; ++k) {
          const Span& span = thread.spans[thread.spans_by_depth[depth][k]];
          if (span.start <= t0 && span.end >= t1) continue;
          clip_into(compute, span.start, span.end, t0, t1);
        }
      }
    }
    compute_set = IntervalSet::union_of(std::move(compute)).subtract(communication_set);
  }
  IntervalSet memcpy_set = IntervalSet::union_of(std::move(memcpy));
  IntervalSet sync_set = IntervalSet::union_of(std::move(syncs));
  const IntervalSet busy = compute_set.unite(communication_set);
  const TimeNs overlapped = communication_set.intersect(compute_set).covered();
  result.compute_ms = double(compute_set.covered()) * kMsPerNs;
  result.communication_ms = double(communication_set.covered()) * kMsPerNs;
  result.overlapped_communication_ms = double(overlapped) * kMsPerNs;
  result.exposed_communication_ms = result.communication_ms - result.overlapped_communication_ms;
  result.memcpy_ms = double(memcpy_set.subtract(busy).covered()) * kMsPerNs;
  result.idle_ms = double((t1 - t0) - busy.unite(memcpy_set).covered()) * kMsPerNs;
  result.host_sync_ms = double(sync_set.covered()) * kMsPerNs;
  // A stream waiting for its launch only starves the GPU when nothing else runs meanwhile
  // (a kernel waiting for an all-to-all on another stream was launched in time).
  result.launch_gap_ms = double(IntervalSet::union_of(std::move(launch_waits))
                                    .subtract(busy.unite(memcpy_set))
                                    .covered()) *
                         kMsPerNs;
  // Device-to-host copies the host was waiting for: the blocking copies before all-to-alls.
  if (!sync_set.intervals().empty()) {
    for (const auto& stream : process.gpu_streams) {
      IndexRange range = visible_range(stream, t0, t1);
      for (size_t i = range.begin; i < range.end; ++i) {
        const GpuOp& op = stream.ops[i];
        if (op.kind != GpuOpKind::kMemcpy || op.copy_kind != 2 /*DtoH*/) continue;
        IntervalSet copy = IntervalSet::union_of({{op.start, op.end}});
        if (copy.intersect(sync_set).covered() > 0) ++result.blocking_d2h_copies;
      }
    }
  }
  const auto& events = process.memory_events;
  auto first = std::lower_bound(events.begin(), events.end(), t0,
                                [](const MemoryEvent& e, TimeNs t) { return e.time < t; });
  for (auto it = first; it != events.end() && it->time < t1; ++it) {
    if (it->is_free) continue;
    ++result.allocations;
    result.allocated_bytes += static_cast<uint64_t>(it->bytes);
  }
  return result;
}

StepBreakdown RankBreakdown::mean() const {
  StepBreakdown mean = total;
  double n = steps.empty() ? 1.0 : double(steps.size());
  for (double StepBreakdown::*field : kMillisecondFields) mean.*field /= n;
  for (uint32_t StepBreakdown::*field : kCountFields) {
    mean.*field = static_cast<uint32_t>(total.*field / n + 0.5);
  }
  mean.allocated_bytes = trace::saturating_uint64(double(total.allocated_bytes) / n);
  return mean;
}

StepBreakdown TimeBreakdown::mean_over_ranks() const {
  StepBreakdown mean;
  mean.rank = -1;
  if (ranks.empty()) return mean;
  const double n = double(ranks.size());
  double counts[std::size(kCountFields)] = {};
  double allocated_bytes = 0;
  for (const RankBreakdown& rank : ranks) {
    const StepBreakdown one = rank.mean();
    for (double StepBreakdown::*field : kMillisecondFields) mean.*field += one.*field / n;
    for (size_t i = 0; i < std::size(kCountFields); ++i) counts[i] += one.*kCountFields[i] / n;
    allocated_bytes += double(one.allocated_bytes) / n;
  }
  for (size_t i = 0; i < std::size(kCountFields); ++i) {
    mean.*kCountFields[i] = static_cast<uint32_t>(counts[i] + 0.5);
  }
  mean.allocated_bytes = trace::saturating_uint64(allocated_bytes);
  return mean;
}

RankBreakdown compute_rank_breakdown(const TraceModel& model, const ProcessTrack& process) {
  RankBreakdown rank;
  rank.rank = process.rank;
  if (process.steps.empty()) {
    rank.steps.push_back(breakdown_interval(model, process, process.begin, process.end));
  } else {
    for (const StepInterval& step : process.steps) {
      StepBreakdown breakdown = breakdown_interval(model, process, step.start, step.end);
      breakdown.step = step.step;
      rank.steps.push_back(breakdown);
    }
  }
  StepBreakdown& total = rank.total;
  total.rank = process.rank;
  total.step = -1;
  for (const StepBreakdown& step : rank.steps) {
    for (double StepBreakdown::*field : kMillisecondFields) total.*field += step.*field;
    for (uint32_t StepBreakdown::*field : kCountFields) total.*field += step.*field;
    total.allocated_bytes += step.allocated_bytes;
  }
  if (!rank.steps.empty()) {
    total.start = rank.steps.front().start;
    total.end = rank.steps.back().end;
  }
  return rank;
}

std::map<int64_t, std::vector<const StepBreakdown*>> steps_by_number(
    const TimeBreakdown& breakdown) {
  std::map<int64_t, std::vector<const StepBreakdown*>> by_step;
  for (const RankBreakdown& rank : breakdown.ranks) {
    for (const StepBreakdown& step : rank.steps) {
      if (step.step >= 0) by_step[step.step].push_back(&step);
    }
  }
  return by_step;
}

StepSeries mean_over_ranks_by_step(const TimeBreakdown& breakdown, double StepBreakdown::*part) {
  return mean_over_ranks_by_step(steps_by_number(breakdown), part);
}

StepSeries mean_over_ranks_by_step(
    const std::map<int64_t, std::vector<const StepBreakdown*>>& by_step,
    double StepBreakdown::*part) {
  StepSeries series;
  for (const auto& [step, ranks] : by_step) {
    double sum = 0;
    for (const StepBreakdown* rank : ranks) sum += rank->*part;
    series.steps.push_back(step);
    series.values.push_back(sum / double(ranks.size()));
  }
  return series;
}

std::vector<StepSpread> compute_step_spread(const std::vector<RankBreakdown>& ranks,
                                            const std::vector<bool>& has_steps) {
  std::map<int64_t, std::vector<std::pair<int32_t, const StepBreakdown*>>> by_step;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i >= has_steps.size() || !has_steps[i]) continue;
    for (const StepBreakdown& step : ranks[i].steps)
      by_step[step.step].push_back({ranks[i].rank, &step});
  }
  std::vector<StepSpread> result;
  for (auto& [step, entries] : by_step) {
    if (entries.size() != ranks.size()) continue;
    StepSpread spread;
    spread.step = step;
    spread.min_ms = 1e300;
    std::vector<double> busy;
    for (const auto& [rank, breakdown] : entries) {
      spread.min_ms = std::min(spread.min_ms, breakdown->step_ms);
      spread.max_ms = std::max(spread.max_ms, breakdown->step_ms);
      spread.mean_ms += breakdown->step_ms / double(entries.size());
      busy.push_back(breakdown->busy_ms());
      if (breakdown->busy_ms() > spread.max_busy_ms) {
        spread.max_busy_ms = breakdown->busy_ms();
        spread.slowest_rank = rank;
      }
    }
    spread.median_busy_ms = median(std::move(busy));
    result.push_back(spread);
  }
  return result;
}

TimeBreakdown compute_time_breakdown(const TraceModel& model) {
  TimeBreakdown result;
  std::vector<bool> has_steps;
  for (const auto& process : model.processes) {
    result.ranks.push_back(compute_rank_breakdown(model, process));
    has_steps.push_back(!process.steps.empty());
  }
  result.spread = compute_step_spread(result.ranks, has_steps);
  return result;
}

}  // namespace moescope::analysis

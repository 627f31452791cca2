// The rules about time and memory per rank: a straggler, communication left exposed, host
// syncs, launch-bound GPUs, memory pressure and allocation churn (docs/analysis.md).
#include <algorithm>
#include <map>
#include <string>

#include "finding_rules.h"
#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/statistics.h"
#include "moescope/trace/time_arithmetic.h"
#include "printf_string.h"

namespace moescope::analysis {
namespace {

// The kinds of collective a run's communication is made of, largest total time first, e.g.
// {"all_gather", "reduce_scatter"}; what the exposed-communication advice is about.
std::vector<std::string> communication_kinds(const TraceModel& model) {
  std::map<uint32_t, TimeNs> time_by_kind;
  for (const auto& process : model.processes) {
    for (const auto& comm : process.communicators) {
      for (const CommOp& op : comm.ops) {
        TimeNs& time = time_by_kind[op.kind];
        time = trace::saturating_add(time, std::max<TimeNs>(0, op.duration()));
      }
    }
  }
  std::vector<std::pair<TimeNs, uint32_t>> order;
  for (const auto& [kind, time] : time_by_kind) order.push_back({time, kind});
  std::sort(order.rbegin(), order.rend());
  std::vector<std::string> kinds;
  for (const auto& [time, kind] : order) kinds.push_back(comm_kind_name(kind));
  return kinds;
}

bool has_kind(const std::vector<std::string>& kinds, const char* kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == words.size() ? " and " : ", ") + words[i];
  }
  return text;
}

// Advice for exposed communication made of `kinds`: about the collectives the run has.
std::string overlap_advice(const std::vector<std::string>& kinds) {
  std::string advice;
  if (has_kind(kinds, "all_to_all")) {
    advice +=
        "Overlap the all-to-all with compute: split the batch into chunks and pipeline "
        "dispatch / experts / combine, run shared experts during dispatch, or use a faster "
        "all-to-all (intranode NVLink kernels); check bytes sent with the all-to-all matrix. ";
  }
  if (has_kind(kinds, "all_gather") || has_kind(kinds, "reduce_scatter")) {
    advice +=
        "Overlap the parameter all_gather and gradient reduce_scatter (FSDP/ZeRO) with "
        "compute: prefetch the next block's all_gather (FSDP2 set_modules_to_forward_prefetch "
        "/ backward_prefetch), keep the last blocks unsharded after forward "
        "(reshard_after_forward=False), or shard over fewer ranks (HSDP). ";
  }
  if (has_kind(kinds, "all_reduce")) {
    advice +=
        "Overlap the gradient all_reduce with backward: DDP's buckets (bucket_cap_mb) start "
        "reducing while backward runs; with gradient accumulation skip it on the inner steps "
        "(no_sync). ";
  }
  if (advice.empty()) {
    advice = "Overlap the " + (kinds.empty() ? std::string("communication") : joined(kinds)) +
             " with compute (issue it asynchronously and wait only where the result is used). ";
  }
  advice.pop_back();
  return advice;
}

}  // namespace

void FindingRules::straggler_rank() {
  if (means_.size() < 2) return;
  std::vector<double> busy;
  for (const auto& mean : means_) busy.push_back(mean.busy_ms());
  for (size_t r = 0; r < means_.size(); ++r) {
    const double typical = median_of_others(busy, r);
    const double excess = straggler_excess(busy, r);
    if (!worth_a_finding(excess, limits_.straggler_min_ms, limits_.straggler_excess, typical)) {
      continue;
    }
    Finding& finding = add("straggler_rank", excess);
    finding.where.ranks = {means_[r].rank};
    finding.process = int32_t(r);
    finding.evidence = printf_string(
        "rank %d is busy %.2f ms per step vs a median of %.2f ms on the other ranks "
        "(+%.0f%%); its compute %.2f ms vs the others' waiting in communication",
        means_[r].rank, means_[r].busy_ms(), typical, 100.0 * excess / std::max(typical, 1e-9),
        means_[r].compute_ms);
    finding.metrics = {{"busy_ms", means_[r].busy_ms()},
                       {"median_busy_ms_others", typical},
                       {"compute_ms", means_[r].compute_ms}};
    // Name only what this run has: experts and an all-to-all matrix, or neither.
    const bool all_to_all = has_kind(communication_kinds(model_), "all_to_all");
    finding.suggestion =
        std::string("Look at what this rank does more: ") +
        (!experts_.layers.empty()
             ? (all_to_all ? "hot experts placed on it (see expert_imbalance and the "
                             "all-to-all matrix), "
                           : "hot experts placed on it (see expert_imbalance), ")
             : "") +
        "a slower GPU or host, or extra work (logging, checkpoints).";
  }
}

void FindingRules::exposed_communication() {
  // Exposed time every rank has: waiting for a straggler shows up only on the fast ranks.
  std::map<int64_t, double> common;
  std::map<int64_t, int> seen;
  for (const auto& rank : breakdown_.ranks) {
    for (const auto& step : rank.steps) {
      auto [it, inserted] = common.try_emplace(step.step, step.exposed_communication_ms);
      if (!inserted) it->second = std::min(it->second, step.exposed_communication_ms);
      ++seen[step.step];
    }
  }
  double exposed = 0, total_comm = 0, overlapped = 0;
  int steps = 0;
  for (const auto& [step, value] : common) {
    if (seen[step] != int(breakdown_.ranks.size())) continue;
    exposed += value;
    ++steps;
  }
  if (steps == 0) return;
  exposed /= steps;
  for (const auto& mean : means_)
    total_comm += mean.communication_ms, overlapped += mean.overlapped_communication_ms;
  total_comm /= double(means_.size());
  overlapped /= double(means_.size());
  const double step_ms = mean_step_ms();
  if (!worth_a_finding(exposed, limits_.exposed_comm_min_ms, limits_.exposed_comm_share, step_ms)) {
    return;
  }
  Finding& finding = add("exposed_communication", exposed);
  const std::vector<std::string> kinds = communication_kinds(model_);
  finding.evidence = printf_string(
      "%.2f ms per step of communication (%s) is not overlapped with compute on any rank "
      "(%.0f%% of a %.2f ms step); communication %.2f ms per step, %.2f ms of it overlapped",
      exposed, kinds.empty() ? "GPU communication kernels" : joined(kinds).c_str(),
      100.0 * exposed / std::max(step_ms, 1e-9), step_ms, total_comm, overlapped);
  finding.metrics = {{"exposed_ms", exposed},
                     {"step_ms", step_ms},
                     {"communication_ms", total_comm},
                     {"overlapped_ms", overlapped}};
  finding.suggestion = overlap_advice(kinds);
}

template <typename Describe>
void FindingRules::add_for_ranks_losing(const char* kind, double StepBreakdown::*lost_ms,
                                        double min_ms, double share, Describe describe) {
  for (const auto& mean : means_) {
    if (!worth_a_finding(mean.*lost_ms, min_ms, share, mean.step_ms)) continue;
    describe(add_for_rank(kind, mean, mean.*lost_ms), mean,
             100.0 * mean.*lost_ms / std::max(mean.step_ms, 1e-9));
  }
}

void FindingRules::host_sync_stall() {
  add_for_ranks_losing(
      "host_sync_stall", &StepBreakdown::host_sync_ms, limits_.host_sync_min_ms,
      limits_.host_sync_share, [](Finding& finding, const StepBreakdown& mean, double percent) {
        finding.evidence = printf_string(
            "rank %d: the host waits %.2f ms per step in %u synchronizations per step (%u "
            "blocking device-to-host copies per step), %.0f%% of the step",
            mean.rank, mean.host_sync_ms, mean.host_syncs, mean.blocking_d2h_copies, percent);
        finding.metrics = {{"host_sync_ms", mean.host_sync_ms},
                           {"syncs_per_step", double(mean.host_syncs)},
                           {"blocking_d2h_per_step", double(mean.blocking_d2h_copies)}};
        finding.suggestion =
            "Avoid host round trips on the hot path: keep token counts on the GPU (device-side "
            "all-to-all sizes, at::_grouped_mm with offsets), use non_blocking copies into "
            "pinned memory and synchronise on events only where the host needs the value.";
      });
}

void FindingRules::launch_bound() {
  add_for_ranks_losing(
      "launch_bound", &StepBreakdown::launch_gap_ms, limits_.launch_gap_min_ms,
      limits_.launch_gap_share, [](Finding& finding, const StepBreakdown& mean, double percent) {
        finding.evidence = printf_string(
            "rank %d: the GPU waits %.2f ms per step for kernel launches that end after the "
            "previous kernel finished (%.0f%% of the step)",
            mean.rank, mean.launch_gap_ms, percent);
        finding.metrics = {{"launch_gap_ms", mean.launch_gap_ms}};
        finding.suggestion =
            "Reduce launches: fuse small kernels, use grouped GEMM instead of a loop over "
            "experts, capture the step in a CUDA graph, or move Python overhead out of the loop.";
      });
}

void FindingRules::memory_pressure() {
  for (size_t p = 0; p < memory_.size(); ++p) {
    const RankMemory& rank = memory_[p];
    if (!rank.capacity_bytes) continue;
    double share = double(rank.peak_bytes) / double(rank.capacity_bytes);
    if (share < limits_.memory_pressure_share) continue;
    Finding& finding = add("memory_pressure", 0.0, share >= limits_.memory_critical_share);
    finding.where.ranks = {rank.rank};
    finding.process = int32_t(p);
    finding.start = finding.end = rank.peak_time;
    int biggest = 0;
    for (int c = 1; c < kNumMemoryCategories; ++c) {
      if (rank.peak_by_category[c] > rank.peak_by_category[biggest]) biggest = c;
    }
    finding.evidence = printf_string(
        "rank %d peaks at %.2f GiB of %.2f GiB (%.0f%%); largest category at the peak: %s "
        "%.2f GiB",
        rank.rank, double(rank.peak_bytes) / (1 << 30), double(rank.capacity_bytes) / (1 << 30),
        100.0 * share, memory_category_name(biggest),
        double(rank.peak_by_category[biggest]) / (1 << 30));
    finding.metrics = {{"peak_bytes", double(rank.peak_bytes)},
                       {"capacity_bytes", double(rank.capacity_bytes)}};
    finding.suggestion =
        "Lower the peak: cap dispatch buffers with a capacity factor, recompute activations, "
        "shard optimizer state, or rebalance experts so one rank does not receive most tokens.";
  }
}

void FindingRules::allocation_churn() {
  for (const auto& mean : means_) {
    if (mean.allocations < limits_.churn_allocations_per_step) continue;
    double est = mean.allocations * limits_.allocation_cost_ms;
    Finding& finding = add_for_rank("allocation_churn", mean, est);
    finding.evidence = printf_string(
        "rank %d allocates %u times per step (%.1f MiB per step) and frees as much again",
        mean.rank, mean.allocations, double(mean.allocated_bytes) / (1 << 20));
    finding.metrics = {{"allocations_per_step", double(mean.allocations)},
                       {"allocated_bytes_per_step", double(mean.allocated_bytes)}};
    finding.suggestion =
        "Reuse buffers across steps: preallocate dispatch/combine buffers at the maximum "
        "size (moescope memory manager), or let the caching allocator keep them.";
  }
}

}  // namespace moescope::analysis

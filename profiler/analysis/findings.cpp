// The bottleneck rules (thresholds in findings.h, explanations in docs/analysis.md).
#include "moescope/analysis/findings.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/finding_links.h"
#include "moescope/trace/time_arithmetic.h"
#include "printf_string.h"

namespace moescope::analysis {
namespace {

bool contains_lowercase(const std::string& text, const char* word) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find(word) != std::string::npos;
}

}  // namespace

double expert_ms_per_step(const TraceModel& model, const ProcessTrack& process) {
  std::vector<int8_t> is_expert(model.strings.size(), -1);
  auto matches = [&](StringId id) {
    if (is_expert[id] < 0) {
      const std::string& name = model.name(id);
      is_expert[id] = contains_lowercase(name, "expert") && !contains_lowercase(name, "shared");
    }
    return is_expert[id] == 1;
  };
  double total_ms = 0;
  bool from_kernels = false;
  for (const auto& stream : process.gpu_streams) {
    for (const GpuOp& op : stream.ops) {
      if (op.kind == GpuOpKind::kKernel && matches(op.name)) {
        total_ms += double(op.duration()) * 1e-6;
        from_kernels = true;
      }
    }
  }
  if (!from_kernels) {
    for (const auto& thread : process.threads) {
      for (const Span& span : thread.spans) {
        if (matches(span.name)) total_ms += double(span.duration()) * 1e-6;
      }
    }
  }
  size_t steps = std::max<size_t>(1, process.steps.size());
  return total_ms / double(steps);
}

namespace {

struct StepRange {
  int64_t first = -1, last = -1;
};

StepRange step_range(const TraceModel& model) {
  StepRange range;
  for (const auto& process : model.processes) {
    for (const auto& step : process.steps) {
      range.first = range.first < 0 ? step.step : std::min(range.first, step.step);
      range.last = std::max(range.last, step.step);
    }
  }
  return range;
}

// Upper regularized incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a): a series below a + 1,
// Lentz's continued fraction above (Numerical Recipes' split; relative error ~1e-12).
double upper_regularized_gamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::fabs(term) > std::fabs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefactor));
  }
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-15) break;
  }
  return std::min(1.0, std::exp(log_prefactor) * h);
}

// Pearson's chi-square test of "every expert is equally likely" on a layer's token counts
// summed over the run (docs/analysis.md): the statistic, its p-value with num_experts - 1
// degrees of freedom, and whether the test is valid (at least kMinExpectedPerExpert expected
// tokens per expert; fewer tokens never make evidence).
struct UniformTest {
  double chi_square = 0, p_value = 1;
  bool valid = false;
};
constexpr double kMinExpectedPerExpert = 5.0;

UniformTest test_against_uniform(const std::vector<double>& tokens) {
  UniformTest test;
  double total = 0;
  for (double count : tokens) total += count;
  if (tokens.size() < 2 || total <= 0) return test;
  const double expected = total / double(tokens.size());
  test.valid = expected >= kMinExpectedPerExpert;
  for (double count : tokens) test.chi_square += (count - expected) * (count - expected) / expected;
  test.p_value = upper_regularized_gamma(0.5 * double(tokens.size() - 1), 0.5 * test.chi_square);
  return test;
}

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

class Rules {
 public:
  Rules(const TraceModel& model, const TimeBreakdown& breakdown, const ExpertLoadAnalysis& experts,
        const std::vector<RankMemory>& memory, const FindingThresholds& thresholds,
        const std::vector<double>* expert_ms)
      : model_(model),
        breakdown_(breakdown),
        experts_(experts),
        memory_(memory),
        limits_(thresholds),
        expert_ms_(expert_ms),
        steps_(step_range(model)) {
    for (const auto& rank : breakdown.ranks) means_.push_back(rank.mean());
    // With no step known, the whole trace counts as one step (as est_ms_per_step does).
    reference_step_ms_ = mean_step_ms();
    if (reference_step_ms_ <= 0) reference_step_ms_ = double(model.end - model.begin) * 1e-6;
  }

  std::vector<Finding> run() {
    expert_imbalance();
    straggler_rank();
    exposed_communication();
    host_sync_stall();
    launch_bound();
    memory_pressure();
    allocation_churn();
    token_dropping();
    dead_experts();
    router_collapse();
    nan_inf();
    std::stable_sort(findings_.begin(), findings_.end(), [](const Finding& a, const Finding& b) {
      if (a.est_ms_per_step != b.est_ms_per_step) return a.est_ms_per_step > b.est_ms_per_step;
      return a.severity > b.severity;
    });
    return std::move(findings_);
  }

 private:
  // `threatens_run`: the finding endangers the run itself (see severity_of).
  Finding& add(const char* kind, double est_ms, bool threatens_run = false) {
    Finding finding;
    finding.kind = kind;
    finding.severity = severity_of(est_ms, reference_step_ms_, threatens_run);
    finding.est_ms_per_step = est_ms;
    finding.step_share = reference_step_ms_ > 0 ? est_ms / reference_step_ms_ : 0.0;
    finding.where.first_step = steps_.first;
    finding.where.last_step = steps_.last;
    finding.start = model_.begin;
    finding.end = model_.end;
    findings_.push_back(std::move(finding));
    return findings_.back();
  }

  double mean_step_ms() const {
    std::vector<double> steps;
    for (const auto& mean : means_) steps.push_back(mean.step_ms);
    return median(steps);
  }

  void expert_imbalance() {
    if (experts_.layers.empty()) return;
    double expert_ms = 0;
    for (size_t p = 0; p < model_.processes.size(); ++p) {
      expert_ms += expert_ms_ && p < expert_ms_->size()
                       ? (*expert_ms_)[p]
                       : expert_ms_per_step(model_, model_.processes[p]);
    }
    expert_ms /= double(std::max<size_t>(1, model_.processes.size()));
    const double per_layer_ms = expert_ms / double(experts_.layers.size());
    const ExpertLoadMatrix totals = expert_load_matrix(model_);
    for (const LayerLoad& layer : experts_.layers) {
      if (layer.max_over_mean < limits_.imbalance_max_over_mean) continue;
      // Evidence first: a few tokens make a large max/mean by chance.
      const int row = totals.row_of(layer.layer);
      if (row < 0) continue;
      const auto first = totals.tokens.begin() + std::ptrdiff_t(row) * totals.num_experts;
      const UniformTest uniform =
          test_against_uniform(std::vector<double>(first, first + layer.num_experts));
      if (!uniform.valid || uniform.p_value >= limits_.imbalance_significance) continue;
      double est = per_layer_ms * (1.0 - 1.0 / layer.max_over_mean);
      Finding& finding = add("expert_imbalance", est);
      finding.where.layer = int32_t(layer.layer);
      finding.where.experts = layer.hot_experts;
      finding.where.first_step = layer.first_step;
      finding.where.last_step = layer.last_step;
      std::string hot;
      for (uint32_t e : layer.hot_experts) {
        hot += printf_string("%s%u (%.0f%%)", hot.empty() ? "" : ", ", e, 100.0 * layer.share[e]);
      }
      finding.evidence = printf_string(
          "layer %u: max/mean tokens per expert %.2f (CV %.2f, utilization %.0f%%) over %u "
          "steps; hot experts: %s; ideal share %.1f%%; uniform routing rejected (chi-square "
          "%.1f on %u df, p %.2g < %.2g, %.0f tokens)",
          layer.layer, layer.max_over_mean, layer.cv, 100.0 * layer.utilization, layer.num_steps,
          hot.empty() ? "none" : hot.c_str(), 100.0 / layer.num_experts, uniform.chi_square,
          layer.num_experts - 1, uniform.p_value, limits_.imbalance_significance,
          totals.layer_total(row));
      finding.metrics = {
          {"max_over_mean", layer.max_over_mean}, {"cv", layer.cv},
          {"utilization", layer.utilization},     {"expert_ms_per_layer_step", per_layer_ms},
          {"chi_square", uniform.chi_square},     {"p_value", uniform.p_value}};
      finding.suggestion =
          "Rebalance: replicate or move the hot experts (moescope plan), raise the aux-loss "
          "coefficient or enable aux-loss-free bias updates; check the router's initialisation.";
    }
  }

  void straggler_rank() {
    if (means_.size() < 2) return;
    std::vector<double> busy;
    for (const auto& mean : means_) busy.push_back(mean.busy_ms());
    for (size_t r = 0; r < means_.size(); ++r) {
      const double typical = median_of_others(busy, r);
      const double excess = straggler_excess(busy, r);
      if (excess < std::max(limits_.straggler_min_ms, limits_.straggler_excess * typical)) continue;
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

  void exposed_communication() {
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
    if (exposed < std::max(limits_.exposed_comm_min_ms, limits_.exposed_comm_share * step_ms))
      return;
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

  void host_sync_stall() {
    for (const auto& mean : means_) {
      if (mean.host_sync_ms <
          std::max(limits_.host_sync_min_ms, limits_.host_sync_share * mean.step_ms))
        continue;
      Finding& finding = add("host_sync_stall", mean.host_sync_ms);
      finding.where.ranks = {mean.rank};
      finding.process = model_.process_of_rank(mean.rank);
      finding.evidence = printf_string(
          "rank %d: the host waits %.2f ms per step in %u synchronizations per step (%u blocking "
          "device-to-host copies per step), %.0f%% of the step",
          mean.rank, mean.host_sync_ms, mean.host_syncs, mean.blocking_d2h_copies,
          100.0 * mean.host_sync_ms / std::max(mean.step_ms, 1e-9));
      finding.metrics = {{"host_sync_ms", mean.host_sync_ms},
                         {"syncs_per_step", double(mean.host_syncs)},
                         {"blocking_d2h_per_step", double(mean.blocking_d2h_copies)}};
      finding.suggestion =
          "Avoid host round trips on the hot path: keep token counts on the GPU (device-side "
          "all-to-all sizes, at::_grouped_mm with offsets), use non_blocking copies into pinned "
          "memory and synchronise on events only where the host needs the value.";
    }
  }

  void launch_bound() {
    for (const auto& mean : means_) {
      if (mean.launch_gap_ms <
          std::max(limits_.launch_gap_min_ms, limits_.launch_gap_share * mean.step_ms))
        continue;
      Finding& finding = add("launch_bound", mean.launch_gap_ms);
      finding.where.ranks = {mean.rank};
      finding.process = model_.process_of_rank(mean.rank);
      finding.evidence = printf_string(
          "rank %d: the GPU waits %.2f ms per step for kernel launches that end after the "
          "previous kernel finished (%.0f%% of the step)",
          mean.rank, mean.launch_gap_ms, 100.0 * mean.launch_gap_ms / std::max(mean.step_ms, 1e-9));
      finding.metrics = {{"launch_gap_ms", mean.launch_gap_ms}};
      finding.suggestion =
          "Reduce launches: fuse small kernels, use grouped GEMM instead of a loop over experts, "
          "capture the step in a CUDA graph, or move Python overhead out of the loop.";
    }
  }

  void memory_pressure() {
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

  void allocation_churn() {
    for (const auto& mean : means_) {
      if (mean.allocations < limits_.churn_allocations_per_step) continue;
      double est = mean.allocations * limits_.allocation_cost_ms;
      Finding& finding = add("allocation_churn", est);
      finding.where.ranks = {mean.rank};
      finding.process = model_.process_of_rank(mean.rank);
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

  void token_dropping() {
    for (const LayerLoad& layer : experts_.layers) {
      if (layer.dropped_fraction < limits_.dropped_fraction) continue;
      Finding& finding =
          add("token_dropping", 0.0, layer.dropped_fraction >= limits_.dropped_critical_fraction);
      finding.where.layer = int32_t(layer.layer);
      finding.where.first_step = layer.first_step;
      finding.where.last_step = layer.last_step;
      finding.where.experts = layer.hot_experts;
      finding.evidence = printf_string(
          "layer %u drops %.1f%% of routed tokens (%llu of %llu)", layer.layer,
          100.0 * layer.dropped_fraction, static_cast<unsigned long long>(layer.dropped_tokens),
          static_cast<unsigned long long>(layer.dropped_tokens + layer.total_tokens));
      finding.metrics = {{"dropped_fraction", layer.dropped_fraction},
                         {"dropped_tokens", double(layer.dropped_tokens)}};
      finding.suggestion =
          "Raise the capacity factor or fix the imbalance that overflows the hot experts; "
          "dropped tokens skip the MoE layer and hurt quality.";
    }
  }

  void dead_experts() {
    for (const LayerLoad& layer : experts_.layers) {
      if (layer.dead_experts.empty() || layer.num_experts < 2) continue;
      // Evidence: under uniform routing, the chance that some expert gets none of the layer's
      // tokens (union bound E (1 - 1/E)^N) must be below the significance level; a few tokens
      // leave experts empty by chance (docs/analysis.md).
      const double experts = double(layer.num_experts);
      const double chance = experts * std::pow(1.0 - 1.0 / experts, double(layer.total_tokens));
      if (chance >= limits_.imbalance_significance) continue;
      Finding& finding = add("dead_experts", 0.0);
      finding.where.layer = int32_t(layer.layer);
      finding.where.experts = layer.dead_experts;
      finding.where.first_step = layer.first_step;
      finding.where.last_step = layer.last_step;
      finding.evidence =
          printf_string("layer %u: %zu of %u experts received no token in %u steps", layer.layer,
                        layer.dead_experts.size(), layer.num_experts, layer.num_steps);
      finding.metrics = {{"dead_experts", double(layer.dead_experts.size())},
                         {"num_experts", double(layer.num_experts)}};
      finding.suggestion =
          "Dead experts waste memory and capacity: add load-balancing loss or bias updates, "
          "re-initialise them from a live expert, or check the router for a masking bug.";
    }
  }

  void router_collapse() {
    for (const LayerLoad& layer : experts_.layers) {
      if (layer.num_experts < 4 || layer.num_steps < 2) continue;
      bool by_load =
          layer.effective_experts_last <= limits_.collapse_effective_share * layer.num_experts &&
          layer.effective_experts_last < 0.75 * layer.effective_experts_first;
      bool by_entropy =
          std::isfinite(layer.router_entropy_first) && std::isfinite(layer.router_entropy_last) &&
          layer.router_entropy_first > 0 &&
          layer.router_entropy_last < limits_.collapse_entropy_ratio * layer.router_entropy_first;
      if (!by_load && !by_entropy) continue;
      Finding& finding = add("router_collapse", 0.0, true);
      finding.where.layer = int32_t(layer.layer);
      finding.where.experts = layer.hot_experts;
      finding.where.first_step = layer.first_step;
      finding.where.last_step = layer.last_step;
      finding.evidence = printf_string(
          "layer %u: effective experts (exp of the load entropy) fell from %.1f to %.1f of %u; "
          "router entropy %.3f -> %.3f nats",
          layer.layer, layer.effective_experts_first, layer.effective_experts_last,
          layer.num_experts, layer.router_entropy_first, layer.router_entropy_last);
      finding.metrics = {{"effective_experts_first", layer.effective_experts_first},
                         {"effective_experts_last", layer.effective_experts_last}};
      finding.suggestion =
          "The router is concentrating on a few experts: increase the balancing loss, add "
          "z-loss, lower the learning rate of the router, or use aux-loss-free bias balancing.";
    }
  }

  void nan_inf() {
    const LayerStatsSample* first = nullptr;
    uint64_t bad_samples = 0;
    for (const LayerStatsSample& stats : model_.layer_stats) {
      if (stats.nonfinite_logits == 0 && stats.nonfinite_outputs == 0) continue;
      ++bad_samples;
      if (!first || stats.step < first->step ||
          (stats.step == first->step && stats.time < first->time)) {
        first = &stats;
      }
    }
    if (!first) return;
    Finding& finding = add("nan_inf", 0.0, true);
    finding.where.ranks = {first->rank};
    finding.where.layer = int32_t(first->layer);
    finding.where.first_step = first->step;
    finding.where.last_step = first->step;
    finding.process = int32_t(first->process);
    finding.start = finding.end = first->time;
    finding.evidence = printf_string(
        "first non-finite values at step %lld, layer %u, rank %d (%u logits, %u outputs); %llu "
        "layer samples affected in all",
        static_cast<long long>(first->step), first->layer, first->rank, first->nonfinite_logits,
        first->nonfinite_outputs, static_cast<unsigned long long>(bad_samples));
    finding.metrics = {{"step", double(first->step)},
                       {"layer", double(first->layer)},
                       {"rank", double(first->rank)},
                       {"samples", double(bad_samples)}};
    finding.suggestion =
        "Check that layer's inputs at that step: router logits overflowing (add z-loss, compute "
        "the router in fp32), a learning-rate spike, or an expert receiving no tokens.";
  }

  const TraceModel& model_;
  const TimeBreakdown& breakdown_;
  const ExpertLoadAnalysis& experts_;
  const std::vector<RankMemory>& memory_;
  const FindingThresholds& limits_;
  const std::vector<double>* expert_ms_;  // per process, when the caller computed it
  StepRange steps_;
  double reference_step_ms_ = 0;  // what step_share and the severity divide by
  std::vector<StepBreakdown> means_;
  std::vector<Finding> findings_;
};

}  // namespace

Severity severity_of(double est_ms_per_step, double step_ms, bool threatens_run) {
  if (threatens_run) return Severity::kCritical;
  const double share = step_ms > 0 ? est_ms_per_step / step_ms : 0.0;
  if (share >= kCriticalStepShare) return Severity::kCritical;
  if (share >= kWarningStepShare) return Severity::kWarning;
  return Severity::kInfo;
}

int32_t finding_rank(const TraceModel& model, const Finding& finding) {
  if (finding.where.ranks.size() == 1) return finding.where.ranks.front();
  if (finding.process >= 0 && static_cast<size_t>(finding.process) < model.processes.size()) {
    return model.processes[static_cast<size_t>(finding.process)].rank;
  }
  return -1;
}

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "?";
}

std::vector<Finding> find_bottlenecks(const TraceModel& model, const TimeBreakdown& breakdown,
                                      const ExpertLoadAnalysis& experts,
                                      const std::vector<RankMemory>& memory,
                                      const FindingThresholds& thresholds,
                                      const std::vector<double>* expert_ms_per_process) {
  return Rules(model, breakdown, experts, memory, thresholds, expert_ms_per_process).run();
}

}  // namespace moescope::analysis

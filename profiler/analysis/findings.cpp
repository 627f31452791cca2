// The bottleneck rules' common part: running them, a finding's severity and rank, and the
// expert time they estimate costs from (the rules themselves: finding_rules.h).
#include "moescope/analysis/findings.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "finding_rules.h"

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

}  // namespace

FindingRules::FindingRules(const TraceModel& model, const TimeBreakdown& breakdown,
                           const ExpertLoadAnalysis& experts, const std::vector<RankMemory>& memory,
                           const FindingThresholds& thresholds,
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

std::vector<Finding> FindingRules::run() {
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

Finding& FindingRules::add(const char* kind, double est_ms, bool threatens_run) {
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

Finding& FindingRules::add_for_rank(const char* kind, const StepBreakdown& mean, double est_ms) {
  Finding& finding = add(kind, est_ms);
  finding.where.ranks = {mean.rank};
  finding.process = model_.process_of_rank(mean.rank);
  return finding;
}

Finding& FindingRules::add_for_layer(const char* kind, const LayerLoad& layer,
                                     const std::vector<uint32_t>& experts, double est_ms,
                                     bool threatens_run) {
  Finding& finding = add(kind, est_ms, threatens_run);
  finding.where.layer = int32_t(layer.layer);
  finding.where.experts = experts;
  finding.where.first_step = layer.first_step;
  finding.where.last_step = layer.last_step;
  return finding;
}

bool FindingRules::worth_a_finding(double ms, double min_ms, double share, double of_ms) {
  return !(ms < std::max(min_ms, share * of_ms));
}

double FindingRules::mean_step_ms() const {
  std::vector<double> steps;
  for (const auto& mean : means_) steps.push_back(mean.step_ms);
  return median(steps);
}

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
  static const char* const kNames[] = {"info", "warning", "critical"};  // in Severity order
  const auto index = static_cast<size_t>(severity);
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "?";
}

std::vector<Finding> find_bottlenecks(const TraceModel& model, const TimeBreakdown& breakdown,
                                      const ExpertLoadAnalysis& experts,
                                      const std::vector<RankMemory>& memory,
                                      const FindingThresholds& thresholds,
                                      const std::vector<double>* expert_ms_per_process) {
  return FindingRules(model, breakdown, experts, memory, thresholds, expert_ms_per_process).run();
}

}  // namespace moescope::analysis

// Straggler map, slowdown onsets and slow hosts (cross_rank.h).
#include "moescope/analysis/cross_rank.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "moescope/analysis/statistics.h"
#include "moescope/analysis/step_detection.h"
#include "printf_string.h"

namespace moescope::analysis {
namespace {

// "1,200": steps and ranks as people write them.
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

// moescope_comm_kind values that are not waited for by the whole communicator.
constexpr uint32_t kSend = 7, kRecv = 8, kInit = 10, kDestroy = 11;

struct CollectiveKey {
  uint64_t comm_id = 0;
  uint32_t sequence = 0;
  bool operator==(const CollectiveKey&) const = default;
};
struct CollectiveKeyHash {
  size_t operator()(const CollectiveKey& key) const {
    return std::hash<uint64_t>()(key.comm_id * 0x9E3779B97F4A7C15ull ^ key.sequence);
  }
};
// One collective across its ranks: entries relative to the first one seen (no overflow).
struct CollectiveEntries {
  TimeNs base = 0;
  TimeNs last = 0;  // latest entry, relative to base
  int64_t sum = 0;  // sum of entries relative to base
  uint32_t count = 0;
  uint32_t last_process = 0;
};

void fill_waits(const TraceModel& model, StragglerMap& map) {
  std::unordered_map<CollectiveKey, CollectiveEntries, CollectiveKeyHash> collectives;
  for (size_t p = 0; p < model.processes.size(); ++p) {
    for (const CommunicatorTrack& comm : model.processes[p].communicators) {
      for (const CommOp& op : comm.ops) {
        // Send/recv wait for one peer, not for all; init/destroy are not collectives of data.
        if (op.kind == kSend || op.kind == kRecv || op.kind == kInit || op.kind == kDestroy ||
            op.num_ranks < 2) {
          continue;
        }
        CollectiveEntries& entries = collectives[{comm.comm_id, op.sequence}];
        if (!entries.count) entries.base = op.enqueue;
        const TimeNs relative = op.enqueue - entries.base;
        entries.sum += relative;
        if (!entries.count || relative > entries.last) {
          entries.last = relative;
          entries.last_process = uint32_t(p);
        }
        ++entries.count;
      }
    }
  }
  std::unordered_map<int64_t, size_t> column;
  for (size_t s = 0; s < map.steps.size(); ++s) column[map.steps[s]] = s;
  for (const auto& [key, entries] : collectives) {
    if (entries.count < 2) continue;
    const double others_mean = double(entries.sum - entries.last) / double(entries.count - 1);
    const double wait_ms = (double(entries.last) - others_mean) * 1e-6;
    const ProcessTrack& process = model.processes[entries.last_process];
    const int index = step_at(process, entries.base + entries.last);
    if (index < 0) continue;
    auto found = column.find(process.steps[size_t(index)].step);
    if (found == column.end()) continue;
    map.waited_for_ms[entries.last_process * map.steps.size() + found->second] += wait_ms;
  }
}

// The best single change point of `series` (sum of squares split), with its statistics.
struct ChangePoint {
  size_t index = 0;  // first element of the later segment; 0 = none
  double before = 0, after = 0, score = 0;
};
ChangePoint best_change_point(const std::vector<double>& series) {
  ChangePoint best;
  const size_t n = series.size();
  if (n < kOnsetMinSteps) return best;
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + series[i];
  double best_gain = -1;
  for (size_t k = 2; k + 2 <= n; ++k) {
    const double n1 = double(k), n2 = double(n - k);
    const double m1 = prefix[k] / n1, m2 = (prefix[n] - prefix[k]) / n2;
    const double gain = n1 * n2 / double(n) * (m2 - m1) * (m2 - m1);
    if (gain > best_gain) best_gain = gain, best = {k, m1, m2, 0};
  }
  double residual = 0;
  for (size_t i = 0; i < n; ++i) {
    const double mean = i < best.index ? best.before : best.after;
    residual += (series[i] - mean) * (series[i] - mean);
  }
  const double variance = residual / double(n - 2);
  const double error =
      std::sqrt(variance * (1.0 / double(best.index) + 1.0 / double(n - best.index)));
  best.score = (best.after - best.before) / std::max(error, 1e-12);
  return best;
}

double reference_step_ms(const TraceModel& model, const TimeBreakdown& breakdown) {
  std::vector<double> steps;
  for (const RankBreakdown& rank : breakdown.ranks) steps.push_back(rank.mean().step_ms);
  const double reference = median(steps);
  return reference > 0 ? reference : double(model.end - model.begin) * 1e-6;
}

}  // namespace

CrossRankAnalysis analyze_cross_rank(const TraceModel& model, const TimeBreakdown& breakdown) {
  CrossRankAnalysis result;
  StragglerMap& map = result.map;
  const size_t num_ranks = breakdown.ranks.size();
  if (num_ranks != model.processes.size()) return result;
  for (const StepSpread& spread : breakdown.spread) map.steps.push_back(spread.step);
  const size_t num_steps = map.steps.size();
  std::unordered_map<int64_t, size_t> column;
  for (size_t s = 0; s < num_steps; ++s) column[map.steps[s]] = s;
  map.busy_ms.assign(num_ranks * num_steps, 0.0);
  map.waited_for_ms.assign(num_ranks * num_steps, 0.0);
  for (size_t r = 0; r < num_ranks; ++r) {
    map.ranks.push_back(breakdown.ranks[r].rank);
    for (const StepBreakdown& step : breakdown.ranks[r].steps) {
      auto found = column.find(step.step);
      if (found != column.end()) map.busy_ms[r * num_steps + found->second] = step.busy_ms();
    }
  }
  if (num_steps) fill_waits(model, map);
  if (num_ranks < 2 || num_steps == 0) return result;

  // Each rank's busy time relative to the step's median rank.
  std::vector<double> ratio(num_ranks * num_steps, 1.0);
  for (size_t s = 0; s < num_steps; ++s) {
    const double middle = breakdown.spread[s].median_busy_ms;
    if (middle <= 0) continue;
    for (size_t r = 0; r < num_ranks; ++r)
      ratio[r * num_steps + s] = map.busy_ms[r * num_steps + s] / middle;
  }
  std::vector<double> median_busy;
  for (const StepSpread& spread : breakdown.spread) median_busy.push_back(spread.median_busy_ms);
  std::vector<double> rank_ratio(num_ranks, 1.0);
  for (size_t r = 0; r < num_ranks; ++r) {
    const std::vector<double> series(ratio.begin() + std::ptrdiff_t(r * num_steps),
                                     ratio.begin() + std::ptrdiff_t((r + 1) * num_steps));
    rank_ratio[r] = median(series);
    if (num_ranks < kOnsetMinRanks) continue;  // two ranks: no majority to be slower than
    const ChangePoint change = best_change_point(series);
    if (!change.index || change.before <= 0) continue;
    const double slowdown = change.after / change.before - 1;
    if (slowdown < kOnsetMinSlowdown || change.score < kOnsetMinScore) continue;
    const std::vector<double> later(median_busy.begin() + std::ptrdiff_t(change.index),
                                    median_busy.end());
    result.onsets.push_back({map.ranks[r], model.processes[r].host, map.steps[change.index],
                             slowdown, change.score,
                             (change.after - change.before) * median(later)});
  }
  std::sort(result.onsets.begin(), result.onsets.end(),
            [](const SlowdownOnset& a, const SlowdownOnset& b) { return a.slowdown > b.slowdown; });

  std::map<std::string, std::vector<size_t>> by_host;
  for (size_t r = 0; r < num_ranks; ++r) {
    if (!model.processes[r].host.empty()) by_host[model.processes[r].host].push_back(r);
  }
  std::vector<double> host_ratios;
  for (const auto& [host, members] : by_host) {
    HostSpeed speed;
    speed.host = host;
    std::vector<double> ratios;
    for (size_t r : members) speed.ranks.push_back(map.ranks[r]), ratios.push_back(rank_ratio[r]);
    speed.busy_ratio = median(ratios);
    host_ratios.push_back(speed.busy_ratio);
    result.hosts.push_back(std::move(speed));
  }
  std::stable_sort(
      result.hosts.begin(), result.hosts.end(),
      [](const HostSpeed& a, const HostSpeed& b) { return a.busy_ratio > b.busy_ratio; });
  const double typical = median(host_ratios);
  if (result.hosts.size() >= 2 && typical > 0) {
    for (const HostSpeed& host : result.hosts) {
      if (host.busy_ratio / typical - 1 >= kHostMinSlowdown) result.slow_hosts.push_back(host);
    }
  }
  return result;
}

void add_cross_rank_findings(const TraceModel& model, const TimeBreakdown& breakdown,
                             std::vector<Finding>& findings, CrossRankAnalysis* out) {
  CrossRankAnalysis analysis = analyze_cross_rank(model, breakdown);
  const double step_ms = reference_step_ms(model, breakdown);
  const int64_t last_step = analysis.map.steps.empty() ? -1 : analysis.map.steps.back();
  std::vector<double> median_busy;
  for (const StepSpread& spread : breakdown.spread) median_busy.push_back(spread.median_busy_ms);
  const double typical_busy = median(median_busy);
  constexpr size_t kMaxOnsetFindings = 3;
  for (size_t i = 0; i < analysis.onsets.size() && i < kMaxOnsetFindings; ++i) {
    const SlowdownOnset& onset = analysis.onsets[i];
    Finding finding;
    finding.kind = "slowdown_onset";
    finding.est_ms_per_step = onset.extra_ms;
    finding.severity = severity_of(onset.extra_ms, step_ms);
    finding.step_share = step_ms > 0 ? onset.extra_ms / step_ms : 0.0;
    finding.where.ranks = {onset.rank};
    finding.where.first_step = onset.step;
    finding.where.last_step = last_step;
    finding.evidence = printf_string(
        "rank %s slower by %.0f%% from step %s (busy time against the "
        "step's median rank; change %.0f standard errors)%s%s",
        grouped(onset.rank).c_str(), 100.0 * onset.slowdown, grouped(onset.step).c_str(),
        std::min(onset.score, 1e6), onset.host.empty() ? "" : ", host ", onset.host.c_str());
    finding.metrics = {{"slowdown", onset.slowdown},
                       {"onset_step", double(onset.step)},
                       {"score", std::min(onset.score, 1e6)},
                       {"extra_ms_per_step", onset.extra_ms}};
    finding.suggestion =
        "A rank that turns slower at one step while the others do not is a device or host that "
        "degraded: check that GPU's clocks, power and thermal throttling and ECC errors, and its "
        "host for other processes, from that step's time on; replace or drain it.";
    finding.process = model.process_of_rank(onset.rank);
    finding.start = model.begin;
    finding.end = model.end;
    findings.push_back(std::move(finding));
  }
  for (const HostSpeed& host : analysis.slow_hosts) {
    std::vector<double> ratios;
    for (const HostSpeed& any : analysis.hosts) ratios.push_back(any.busy_ratio);
    const double excess = host.busy_ratio / median(ratios) - 1;
    Finding finding;
    finding.kind = "slow_host";
    finding.est_ms_per_step = excess * typical_busy;
    finding.severity = severity_of(finding.est_ms_per_step, step_ms);
    finding.step_share = step_ms > 0 ? finding.est_ms_per_step / step_ms : 0.0;
    finding.where.ranks = host.ranks;
    finding.where.first_step = analysis.map.steps.empty() ? -1 : analysis.map.steps.front();
    finding.where.last_step = last_step;
    finding.evidence = printf_string(
        "host %s: its %zu rank(s) are busy %.0f%% longer per step than the "
        "median host's",
        host.host.c_str(), host.ranks.size(), 100.0 * excess);
    finding.metrics = {{"busy_excess", excess}, {"ranks", double(host.ranks.size())}};
    finding.suggestion =
        "Every rank of one node is slow together: check the node (GPU clocks and power limits, "
        "thermal throttling, CPU or PCIe contention, other jobs) and drain it if it stays slow.";
    finding.start = model.begin;
    finding.end = model.end;
    findings.push_back(std::move(finding));
  }
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.est_ms_per_step != b.est_ms_per_step) return a.est_ms_per_step > b.est_ms_per_step;
    return a.severity > b.severity;
  });
  if (out) *out = std::move(analysis);
}

}  // namespace moescope::analysis

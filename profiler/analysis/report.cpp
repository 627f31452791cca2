// Builds and renders the report (text, markdown, JSON).
#include "moescope/analysis/report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "moescope/analysis/finding_links.h"
#include "text_writer.h"

namespace moescope::analysis {
namespace {

using nlohmann::ordered_json;

std::string fixed(double value, int digits = 2) {
  if (!std::isfinite(value)) return "n/a";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

// "clock of host node-b: offset -1000.000213 s, error <= 0.41 ms (from 42 collectives)".
std::string host_clock_line(const HostClock& clock) {
  std::string line =
      "clock of host " + clock.host + ": offset " + fixed(double(clock.offset) * 1e-9, 6) + " s, ";
  if (clock.error_bound >= 0) {
    return line + "error <= " + fixed(double(clock.error_bound) * 1e-6, 3) + " ms (from " +
           std::to_string(clock.bounding_collectives) + " collectives both hosts ran)";
  }
  return line + (clock.bounding_collectives == 0
                     ? "error unknown (no collective both hosts ran bounds it)"
                     : "error unknown (the collectives' times contradict each other)");
}

double finite_or_zero(double value) {
  return std::isfinite(value) ? value : 0.0;
}

std::string list(const std::vector<uint32_t>& values) {
  std::string text;
  for (uint32_t v : values) {
    if (!text.empty()) text += ',';
    text += std::to_string(v);
  }
  return text.empty() ? "-" : text;
}

std::string where_text(const FindingWhere& where) {
  std::string text;
  if (!where.ranks.empty()) {
    text += "rank";
    for (size_t i = 0; i < where.ranks.size(); ++i) {
      text += i ? ',' : ' ';
      text += std::to_string(where.ranks[i]);
    }
  } else {
    text += "all ranks";
  }
  if (where.layer >= 0) text += ", layer " + std::to_string(where.layer);
  if (!where.experts.empty()) {
    std::vector<uint32_t> experts(where.experts.begin(), where.experts.end());
    text += ", expert " + list(experts);
  }
  if (where.first_step >= 0) {
    text += where.first_step == where.last_step ? ", step " + std::to_string(where.first_step)
                                                : ", steps " + std::to_string(where.first_step) +
                                                      "-" + std::to_string(where.last_step);
  }
  return text;
}

ordered_json breakdown_json(const StepBreakdown& b) {
  return {{"rank", b.rank},
          {"step", b.step},
          {"step_ms", b.step_ms},
          {"compute_ms", b.compute_ms},
          {"communication_ms", b.communication_ms},
          {"exposed_communication_ms", b.exposed_communication_ms},
          {"overlapped_communication_ms", b.overlapped_communication_ms},
          {"memcpy_ms", b.memcpy_ms},
          {"idle_ms", b.idle_ms},
          {"host_sync_ms", b.host_sync_ms},
          {"host_syncs", b.host_syncs},
          {"blocking_d2h_copies", b.blocking_d2h_copies},
          {"launch_gap_ms", b.launch_gap_ms},
          {"allocations", b.allocations},
          {"allocated_bytes", b.allocated_bytes}};
}

const LayerLoad* find_layer(const ExpertLoadAnalysis& analysis, uint32_t layer) {
  for (const LayerLoad& entry : analysis.layers) {
    if (entry.layer == layer) return &entry;
  }
  return nullptr;
}

// Tokens (or predicted tokens) per expert of `layer`, summed over the matrix's steps.
std::vector<double> matrix_row(const ExpertLoadMatrix& matrix, uint32_t layer,
                               bool predicted = false) {
  const int row = matrix.row_of(layer);
  if (row < 0) return {};
  const auto& cells = predicted ? matrix.predicted : matrix.tokens;
  const auto begin = cells.begin() + static_cast<std::ptrdiff_t>(row) * matrix.num_experts;
  return {begin, begin + matrix.num_experts};
}

// The straggler map as rows per rank, the onsets and the hosts (cross_rank.h).
ordered_json cross_rank_json(const CrossRankAnalysis& cross) {
  const StragglerMap& map = cross.map;
  ordered_json busy = ordered_json::array(), waited = ordered_json::array();
  const size_t steps = map.steps.size();
  for (size_t r = 0; r < map.ranks.size(); ++r) {
    const auto row = std::ptrdiff_t(r * steps), row_end = std::ptrdiff_t((r + 1) * steps);
    busy.push_back(std::vector<double>(map.busy_ms.begin() + row, map.busy_ms.begin() + row_end));
    waited.push_back(
        std::vector<double>(map.waited_for_ms.begin() + row, map.waited_for_ms.begin() + row_end));
  }
  ordered_json onsets = ordered_json::array();
  for (const SlowdownOnset& onset : cross.onsets) {
    onsets.push_back({{"rank", onset.rank},
                      {"host", onset.host},
                      {"step", onset.step},
                      {"slowdown", onset.slowdown},
                      {"score", std::min(onset.score, 1e6)},
                      {"extra_ms_per_step", onset.extra_ms}});
  }
  ordered_json hosts = ordered_json::array();
  for (const HostSpeed& host : cross.hosts) {
    hosts.push_back({{"host", host.host}, {"ranks", host.ranks}, {"busy_ratio", host.busy_ratio}});
  }
  return {{"steps", map.steps},      {"ranks", map.ranks}, {"busy_ms", busy},
          {"waited_for_ms", waited}, {"onsets", onsets},   {"hosts", hosts}};
}

std::string render_json(const TraceModel& model, const Report& report) {
  ordered_json out;
  const ReportSummary& s = report.summary;
  out["summary"] = {{"ranks", s.ranks},
                    {"events", s.events},
                    {"duration_ms", s.duration_ms},
                    {"steps", s.steps},
                    {"mean_step_ms", s.mean_step_ms},
                    {"step_source", s.step_source},
                    {"clock_alignment", s.clock_alignment},
                    {"findings", report.findings.size()},
                    {"errors", s.errors},
                    {"run", s.inference.inference ? "inference" : "training"}};
  if (s.inference.inference) {
    out["summary"]["forward_passes"] = s.inference.forward_passes;
    out["summary"]["tokens"] = s.inference.routed_tokens;
  }
  if (!s.host_clocks.empty()) {
    ordered_json hosts = ordered_json::array();
    for (const HostClock& clock : s.host_clocks) {
      hosts.push_back({{"host", clock.host},
                       {"offset_ns", clock.offset},
                       {"error_bound_ns", clock.error_bound >= 0 ? ordered_json(clock.error_bound)
                                                                 : ordered_json(nullptr)},
                       {"bounding_collectives", clock.bounding_collectives}});
    }
    out["summary"]["clock_hosts"] = std::move(hosts);
  }
  out["capture_gaps"] = report.capture_gaps;
  ordered_json phases = ordered_json::array();
  for (const RankPhases& rank : report.phases.ranks) {
    if (!report.phases.any) break;
    ordered_json entry = {{"rank", rank.rank}, {"steps", rank.steps}, {"step_ms", rank.step_ms}};
    for (size_t i = 0; i < kPhaseNames.size(); ++i) {
      entry[std::string(kPhaseNames[i]) + "_ms"] = rank.phase_ms[i];
    }
    ordered_json spans = ordered_json::object();
    for (size_t i = 0; i + 1 < kPhaseNames.size(); ++i) spans[kPhaseNames[i]] = rank.phase_spans[i];
    entry["spans"] = std::move(spans);
    phases.push_back(std::move(entry));
  }
  out["phases"] = std::move(phases);
  ordered_json breakdown = ordered_json::array();
  for (const auto& rank : report.breakdown.ranks) {
    ordered_json entry = {{"rank", rank.rank}, {"mean_per_step", breakdown_json(rank.mean())}};
    ordered_json steps = ordered_json::array();
    for (const auto& step : rank.steps) steps.push_back(breakdown_json(step));
    entry["steps"] = std::move(steps);
    breakdown.push_back(std::move(entry));
  }
  out["breakdown"] = std::move(breakdown);
  ordered_json spread = ordered_json::array();
  for (const auto& step : report.breakdown.spread) {
    spread.push_back({{"step", step.step},
                      {"min_ms", step.min_ms},
                      {"max_ms", step.max_ms},
                      {"mean_ms", step.mean_ms},
                      {"slowest_rank", step.slowest_rank},
                      {"max_busy_ms", step.max_busy_ms},
                      {"median_busy_ms", step.median_busy_ms}});
  }
  out["step_spread"] = std::move(spread);
  ordered_json layers = ordered_json::array();
  for (const LayerLoad& layer : report.expert_load.layers) {
    ordered_json by_rank = ordered_json::array();
    for (const RankExpertLoad& rank : report.expert_load_by_rank) {
      const LayerLoad* rank_layer = find_layer(rank.load, layer.layer);
      if (!rank_layer) continue;
      by_rank.push_back({{"rank", rank.rank},
                         {"tokens", matrix_row(rank.tokens, layer.layer)},
                         {"step_ids", rank_layer->steps},
                         {"max_over_mean_by_step", rank_layer->max_over_mean_by_step}});
    }
    ordered_json predicted = ordered_json();
    if (!report.expert_tokens.predicted.empty()) {
      predicted = matrix_row(report.expert_tokens, layer.layer, true);
    }
    layers.push_back({{"layer", layer.layer},
                      {"num_experts", layer.num_experts},
                      {"steps", layer.num_steps},
                      {"max_over_mean", layer.max_over_mean},
                      {"rank_max_over_mean",
                       layer.ranks >= 2 ? ordered_json(layer.rank_max_over_mean) : ordered_json()},
                      {"cv", layer.cv},
                      {"utilization", layer.utilization},
                      {"mean_tokens", layer.mean_tokens},
                      {"min_tokens", layer.min_tokens},
                      {"max_tokens", layer.max_tokens},
                      {"std_tokens", layer.std_tokens},
                      {"hot_experts", layer.hot_experts},
                      {"dead_experts", layer.dead_experts},
                      {"share", layer.share},
                      {"max_over_mean_by_step", layer.max_over_mean_by_step},
                      {"step_ids", layer.steps},
                      {"tokens", matrix_row(report.expert_tokens, layer.layer)},
                      {"predicted_tokens", predicted},
                      {"by_rank", std::move(by_rank)},
                      {"dropped_tokens", layer.dropped_tokens},
                      {"dropped_fraction", layer.dropped_fraction},
                      {"effective_experts_first", layer.effective_experts_first},
                      {"effective_experts_last", layer.effective_experts_last},
                      {"prediction_error",
                       layer.predictions ? ordered_json(layer.prediction_error) : ordered_json()}});
  }
  out["expert_load"] = std::move(layers);
  const auto& p = report.expert_load.max_over_mean;
  out["expert_load_percentiles"] = {
      {"max_over_mean", {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}}}};
  const auto& rebalances = report.expert_load.rebalances;
  out["rebalances"] = {{"decisions", rebalances.decisions},
                       {"applied", rebalances.applied},
                       {"mean_imbalance_before", rebalances.mean_imbalance_before},
                       {"mean_imbalance_after", rebalances.mean_imbalance_after},
                       {"bytes_moved", rebalances.bytes_moved},
                       {"total_duration_ms", rebalances.total_duration_ms}};
  ordered_json matrices = ordered_json::array();
  for (const auto& matrix : report.communication.all_to_all) {
    ordered_json rows = ordered_json::array();
    for (int32_t src = 0; src < matrix.num_ranks; ++src) {
      std::vector<uint64_t> row;
      for (int32_t dst = 0; dst < matrix.num_ranks; ++dst) row.push_back(matrix.at(src, dst));
      rows.push_back(row);
    }
    std::vector<double> busy_ms, gbps;
    for (int32_t src = 0; src < matrix.num_ranks; ++src) {
      busy_ms.push_back(matrix.busy_ns[size_t(src)] * 1e-6);
      gbps.push_back(matrix.bandwidth_gbps(src));
    }
    matrices.push_back({{"comm_id", matrix.comm_id},
                        {"num_ranks", matrix.num_ranks},
                        {"ops", matrix.num_ops},
                        {"bytes", rows},
                        {"receive_imbalance", matrix.receive_imbalance()},
                        {"ops_by_rank", matrix.ops_by_rank},
                        {"sent_bytes", matrix.sent_bytes},
                        {"busy_ms", busy_ms},
                        {"bandwidth_gbps", gbps}});
  }
  ordered_json ops = ordered_json::array();
  for (const auto& op : report.communication.ops) {
    ops.push_back({{"name", op.name},
                   {"kind", comm_kind_name(op.kind)},
                   {"count", op.count},
                   {"bytes", op.bytes},
                   {"total_ms", op.total_ms},
                   {"mean_gbps", op.mean_gbps},
                   {"min_gbps", op.min_gbps},
                   {"max_gbps", op.max_gbps}});
  }
  ordered_json waits = ordered_json::array();
  for (const CollectiveKindWait& kind : report.collective_waits.kinds) {
    ordered_json ranks = ordered_json::array();
    for (const RankCollectiveWait& rank : kind.ranks) {
      ranks.push_back({{"rank", rank.rank},
                       {"ops", rank.ops},
                       {"wait_ms_per_step", rank.wait_ms},
                       {"transfer_ms_per_step", rank.transfer_ms},
                       {"mean_wait_ms", rank.mean_wait_ms},
                       {"mean_transfer_ms", rank.mean_transfer_ms},
                       {"arrived_last", rank.arrived_last},
                       {"caused_wait_ms_per_step", rank.caused_wait_ms}});
    }
    waits.push_back({{"kind", comm_kind_name(kind.kind)},
                     {"matched_ops", kind.matched_ops},
                     {"unmatched_ops", kind.unmatched_ops},
                     {"ranks", ranks}});
  }
  out["communication"] = {{"all_to_all", matrices}, {"ops", ops}, {"wait_transfer", waits}};
  ordered_json memory = ordered_json::array();
  for (const auto& rank : report.memory) {
    ordered_json categories = ordered_json::object();
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      categories[memory_category_name(c)] = rank.peak_by_category[c];
    }
    ordered_json largest = ordered_json::array();
    for (const auto& allocation : rank.largest_at_peak) {
      largest.push_back({{"bytes", allocation.bytes},
                         {"category", memory_category_name(allocation.category)},
                         {"device", allocation.device},
                         {"allocated_at_ns", allocation.allocated_at}});
    }
    memory.push_back({{"rank", rank.rank},
                      {"peak_bytes", rank.peak_bytes},
                      {"peak_time_ns", rank.peak_time},
                      {"peak_by_category", categories},
                      {"largest_at_peak", largest},
                      {"live_at_peak", rank.live_at_peak},
                      {"allocations", rank.allocations},
                      {"frees", rank.frees},
                      {"capacity_bytes", rank.capacity_bytes},
                      {"final_bytes", rank.final_bytes}});
  }
  out["memory"] = std::move(memory);
  out["cross_rank"] = cross_rank_json(report.cross_rank);
  ordered_json findings = ordered_json::array();
  for (const Finding& finding : report.findings) {
    ordered_json metrics = ordered_json::object();
    for (const auto& [name, value] : finding.metrics) metrics[name] = finite_or_zero(value);
    findings.push_back({{"id", finding.id},
                        {"kind", finding.kind},
                        {"severity", severity_name(finding.severity)},
                        {"est_ms_per_step", finding.est_ms_per_step},
                        {"step_share", finding.step_share},
                        {"where",
                         {{"ranks", finding.where.ranks},
                          {"layer", finding.where.layer},
                          {"first_step", finding.where.first_step},
                          {"last_step", finding.where.last_step},
                          {"experts", finding.where.experts}}},
                        {"evidence", finding.evidence},
                        {"metrics", metrics},
                        {"suggestion", finding.suggestion},
                        {"explains", finding.explains},
                        {"explained_by", finding.explained_by},
                        {"chain", finding.chain}});
  }
  out["findings"] = std::move(findings);
  ordered_json errors = ordered_json::array();
  for (const LoadError& error : model.errors) {
    errors.push_back({{"file", error.file}, {"offset", error.offset}, {"message", error.message}});
  }
  out["errors"] = std::move(errors);
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string render_text(const TraceModel& model, const Report& report, bool markdown) {
  TextWriter w(markdown);
  const ReportSummary& s = report.summary;
  w.line(markdown ? "# moescope report" : "moescope report");
  const std::string run =
      s.inference.inference
          ? "inference: " + std::to_string(s.inference.forward_passes) + " forward passes" +
                (s.inference.routed_tokens > 0
                     ? ", " + fixed(s.inference.routed_tokens, 0) + " tokens routed"
                     : std::string()) +
                " (no training steps)"
          : std::to_string(s.steps) + " steps (" + s.step_source + "), mean step " +
                fixed(s.mean_step_ms) + " ms";
  w.line((markdown ? "\n" : "") + std::to_string(s.ranks) + " rank(s), " +
         std::to_string(s.events) + " events over " + fixed(s.duration_ms) + " ms; " + run +
         "; clocks: " + s.clock_alignment);
  // A line per host reads well for a few nodes; a 512-node job gets its worst host instead
  // (every host's clock is in the JSON).
  constexpr size_t kHostClockLines = 4;
  if (s.host_clocks.size() <= kHostClockLines) {
    for (const HostClock& clock : s.host_clocks) w.line(host_clock_line(clock));
  } else {
    const auto worst = std::max_element(
        s.host_clocks.begin(), s.host_clocks.end(), [](const HostClock& a, const HostClock& b) {
          // Unknown (-1) ranks worst: it bounds nothing.
          auto badness = [](const HostClock& c) {
            return c.error_bound < 0 ? std::numeric_limits<TimeNs>::max() : c.error_bound;
          };
          return badness(a) < badness(b);
        });
    w.line("clocks of " + std::to_string(s.host_clocks.size()) +
           " hosts against the first; the least certain: " + host_clock_line(*worst).substr(9) +
           " (each host in the JSON's summary.clock_hosts)");
  }
  if (s.errors) w.line(std::to_string(s.errors) + " load error(s), listed at the end");
  for (const std::string& gap : report.capture_gaps) w.line("capture: " + gap);

  w.heading("Findings (root causes first, each followed by the findings it explains)");
  if (report.findings.empty()) w.line("No problems found.");
  const std::string root_cause = root_cause_line(report.findings);
  if (!root_cause.empty()) w.line((markdown ? "Root cause: " : "root cause: ") + root_cause + "\n");
  int index = 1;
  for (const Finding& finding : report.findings) {
    w.line((markdown ? std::to_string(index) + ". **" : std::to_string(index) + ". [") +
           finding.kind + (markdown ? "**" : "]") + " " + severity_name(finding.severity) + ", ~" +
           fixed(finding.est_ms_per_step) + " ms/step (" + fixed(100.0 * finding.step_share, 0) +
           "% of a step), " + where_text(finding.where));
    w.line(std::string(markdown ? "   - " : "   ") + finding.evidence);
    if (!finding.chain.empty()) {
      w.line(std::string(markdown ? "   - chain: " : "   chain: ") + finding.chain);
    }
    w.line(std::string(markdown ? "   - fix: " : "   fix: ") + finding.suggestion);
    ++index;
  }

  w.heading("Time per step by rank (ms, mean)");
  std::vector<std::vector<std::string>> rows;
  for (const auto& rank : report.breakdown.ranks) {
    StepBreakdown m = rank.mean();
    rows.push_back({std::to_string(rank.rank), std::to_string(rank.steps.size()), fixed(m.step_ms),
                    fixed(m.compute_ms), fixed(m.exposed_communication_ms),
                    fixed(m.overlapped_communication_ms), fixed(m.memcpy_ms), fixed(m.idle_ms),
                    fixed(m.host_sync_ms), std::to_string(m.allocations)});
  }
  w.table({"rank", "steps", "step", "compute", "comm exposed", "comm overlapped", "memcpy", "idle",
           "host sync", "allocs/step"},
          rows);
  if (report.phases.any) {
    w.heading("Time per step by phase (ms, mean; the phases add up to the step)");
    rows.clear();
    for (const RankPhases& rank : report.phases.ranks) {
      std::vector<std::string> row = {std::to_string(rank.rank), std::to_string(rank.steps),
                                      fixed(rank.step_ms)};
      for (double ms : rank.phase_ms) row.push_back(fixed(ms));
      rows.push_back(std::move(row));
    }
    w.table({"rank", "steps", "step", "forward", "backward", "recompute", "optimizer", "other"},
            rows);
  }
  if (!report.breakdown.spread.empty()) {
    double worst = 0;
    int64_t worst_step = 0;
    for (const auto& step : report.breakdown.spread) {
      if (step.max_busy_ms - step.median_busy_ms > worst) {
        worst = step.max_busy_ms - step.median_busy_ms;
        worst_step = step.step;
      }
    }
    w.line((markdown ? "\n" : "") + std::string("Step spread across ranks: worst at step ") +
           std::to_string(worst_step) + ", slowest rank busy " + fixed(worst) +
           " ms longer than the median");
  }

  if (report.cross_rank.hosts.size() >= 2) {
    w.heading("Hosts (busy time over the step's median rank; slowest first)");
    rows.clear();
    for (const HostSpeed& host : report.cross_rank.hosts) {
      if (rows.size() == 5) break;
      rows.push_back({host.host, std::to_string(host.ranks.size()), fixed(host.busy_ratio, 3)});
    }
    w.table({"host", "ranks", "busy ratio"}, rows);
  }

  if (!report.expert_load.empty()) {
    w.heading("Expert load per layer");
    rows.clear();
    for (const LayerLoad& layer : report.expert_load.layers) {
      rows.push_back({std::to_string(layer.layer), std::to_string(layer.num_experts),
                      std::to_string(layer.num_steps), fixed(layer.max_over_mean),
                      layer.ranks >= 2 ? fixed(layer.rank_max_over_mean) : std::string("-"),
                      fixed(layer.cv), fixed(100.0 * layer.utilization, 0) + "%",
                      fixed(layer.min_tokens, 0) + "/" + fixed(layer.mean_tokens, 0) + "/" +
                          fixed(layer.max_tokens, 0),
                      list(layer.hot_experts), list(layer.dead_experts),
                      fixed(100.0 * layer.dropped_fraction, 1) + "%",
                      layer.predictions ? fixed(100.0 * layer.prediction_error, 1) + "%" : "-"});
    }
    w.table({"layer", "experts", "steps", "max/mean", "ranks max/mean", "cv", "util",
             "min/mean/max tokens", "hot", "dead", "dropped", "pred err"},
            rows);
    const auto& p = report.expert_load.max_over_mean;
    w.line((markdown ? "\n" : "") + std::string("max/mean across layers: p50 ") + fixed(p.p50) +
           ", p90 " + fixed(p.p90) + ", p99 " + fixed(p.p99) + ", max " + fixed(p.max));
    const auto& r = report.expert_load.rebalances;
    if (r.decisions) {
      w.line("rebalancing: " + std::to_string(r.decisions) + " decisions, " +
             std::to_string(r.applied) + " applied, predicted imbalance " +
             fixed(r.mean_imbalance_before) + " -> " + fixed(r.mean_imbalance_after) + ", " +
             fixed(double(r.bytes_moved) / (1 << 20), 1) + " MiB moved");
    }
  }

  if (!report.communication.ops.empty()) {
    w.heading("Communication");
    rows.clear();
    for (const auto& op : report.communication.ops) {
      rows.push_back({op.name, comm_kind_name(op.kind), std::to_string(op.count),
                      fixed(double(op.bytes) / (1 << 20), 1), fixed(op.total_ms),
                      fixed(op.mean_gbps), fixed(op.min_gbps), fixed(op.max_gbps)});
    }
    w.table({"op", "kind", "count", "MiB", "total ms", "mean GB/s", "min GB/s", "max GB/s"}, rows);
    if (!report.collective_waits.empty()) {
      w.line((markdown ? "\n" : "") +
             std::string("inside the collectives, per rank (ms per step): waiting for the last "
                         "rank to arrive vs moving bytes"));
      rows.clear();
      for (const CollectiveKindWait& kind : report.collective_waits.kinds) {
        for (const RankCollectiveWait& rank : kind.ranks) {
          rows.push_back({comm_kind_name(kind.kind), std::to_string(rank.rank),
                          std::to_string(rank.ops), fixed(rank.wait_ms), fixed(rank.transfer_ms),
                          std::to_string(rank.arrived_last), fixed(rank.caused_wait_ms)});
        }
      }
      w.table({"kind", "rank", "ops", "wait", "transfer", "arrived last", "others wait for it"},
              rows);
    }
    for (const auto& matrix : report.communication.all_to_all) {
      w.line((markdown ? "\n" : "") + std::string("all-to-all bytes (row = sender), ") +
             std::to_string(matrix.num_ops) + " ops, receive imbalance " +
             fixed(matrix.receive_imbalance()) + ":");
      std::vector<std::string> header = {"src\\dst"};
      for (int32_t d = 0; d < matrix.num_ranks; ++d) header.push_back(std::to_string(d));
      rows.clear();
      for (int32_t src = 0; src < matrix.num_ranks; ++src) {
        std::vector<std::string> row = {std::to_string(src)};
        for (int32_t d = 0; d < matrix.num_ranks; ++d) {
          row.push_back(fixed(double(matrix.at(src, d)) / (1 << 20), 2) + " MiB");
        }
        rows.push_back(row);
      }
      w.table(header, rows);
    }
  }

  bool any_memory = false;
  for (const auto& rank : report.memory) any_memory |= rank.allocations > 0;
  if (any_memory) {
    w.heading("Memory");
    rows.clear();
    for (const auto& rank : report.memory) {
      std::string categories;
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        if (!rank.peak_by_category[c]) continue;
        categories += (categories.empty() ? "" : ", ") + std::string(memory_category_name(c)) +
                      " " + fixed(double(rank.peak_by_category[c]) / (1 << 20), 1);
      }
      rows.push_back({std::to_string(rank.rank), fixed(double(rank.peak_bytes) / (1 << 20), 1),
                      rank.capacity_bytes ? fixed(double(rank.capacity_bytes) / (1 << 20), 0) : "?",
                      categories.empty() ? "-" : categories, std::to_string(rank.allocations)});
    }
    w.table({"rank", "peak MiB", "capacity MiB", "live at peak by category (MiB)", "allocations"},
            rows);
  }

  if (!model.errors.empty()) {
    w.heading("Load errors");
    for (const LoadError& error : model.errors) w.line(error.to_string());
  }
  return w.str();
}

}  // namespace

Report build_report(const TraceModel& model, const FindingThresholds& thresholds) {
  return build_report(model, compute_rank_facts(model), thresholds);
}

Report build_report(const TraceModel& model, const std::vector<RankFacts>& facts,
                    const FindingThresholds& thresholds) {
  Report report;
  std::vector<RankPhases> phases;
  std::vector<double> expert_ms;
  for (const RankFacts& rank : facts) {
    phases.push_back(rank.phases);
    report.memory.push_back(rank.memory);
    expert_ms.push_back(rank.expert_ms_per_step);
  }
  report.breakdown = time_breakdown_of_facts(facts);
  report.expert_load = analyze_expert_load(model);
  report.expert_tokens = expert_load_matrix(model);
  report.expert_load_by_rank = expert_load_by_rank(model);
  report.communication = analyze_communication(model);
  report.collective_waits = analyze_collective_waits(model);
  report.findings = find_bottlenecks(model, report.breakdown, report.expert_load, report.memory,
                                     thresholds, &expert_ms);
  add_cross_rank_findings(model, report.breakdown, report.findings, &report.cross_rank);
  // Linked once every finding is in: ids, causes and the ranking cover the cross-rank ones too.
  link_findings(model, report.breakdown, report.collective_waits, report.findings);
  ReportSummary& s = report.summary;
  s.ranks = model.processes.size();
  s.events = model.total_events;
  s.duration_ms = double(model.end - model.begin) * 1e-6;
  double step_sum = 0;
  size_t step_count = 0;
  for (const auto& process : model.processes) {
    s.steps = std::max(s.steps, process.steps.size());
    for (const auto& step : process.steps) step_sum += double(step.duration()) * 1e-6, ++step_count;
  }
  s.mean_step_ms = step_count ? step_sum / double(step_count) : 0.0;
  s.step_source = step_source_name(model.step_source);
  s.clock_alignment = clock_alignment_method_name(model.clock_alignment);
  s.host_clocks = model.host_clocks;
  s.errors = model.errors.size();
  s.inference = inference_from_facts(model, facts);
  report.phases = phase_breakdown_of(std::move(phases));
  std::set<std::string> seen_gaps;
  for (const RankFacts& rank : facts) {
    for (const std::string& gap : rank.capture_gaps) {
      if (seen_gaps.insert(gap).second) report.capture_gaps.push_back(gap);
    }
  }
  return report;
}

bool parse_report_format(const std::string& name, ReportFormat& format) {
  if (name == "text") return format = ReportFormat::kText, true;
  if (name == "markdown" || name == "md") return format = ReportFormat::kMarkdown, true;
  if (name == "json") return format = ReportFormat::kJson, true;
  return false;
}

std::string render_report(const TraceModel& model, const Report& report, ReportFormat format) {
  switch (format) {
    case ReportFormat::kJson:
      return render_json(model, report);
    case ReportFormat::kMarkdown:
      return render_text(model, report, true);
    case ReportFormat::kText:
      break;
  }
  return render_text(model, report, false);
}

}  // namespace moescope::analysis

// The report as JSON (docs/analysis.md lists its fields): what tools and `moescope diff` read.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "moescope/analysis/json_fields.h"
#include "moescope/analysis/rebalance_decision_text.h"
#include "report_renderers.h"

namespace moescope::analysis {

// Their fields are the report's keys (the times inside a step are left out: its start and end).
MOESCOPE_JSON_FIELDS(StepBreakdown, rank, step, step_ms, compute_ms, communication_ms,
                     exposed_communication_ms, overlapped_communication_ms, memcpy_ms, idle_ms,
                     host_sync_ms, host_syncs, blocking_d2h_copies, launch_gap_ms, allocations,
                     allocated_bytes)
MOESCOPE_JSON_FIELDS(StepSpread, step, min_ms, max_ms, mean_ms, slowest_rank, max_busy_ms,
                     median_busy_ms)

namespace {

using nlohmann::ordered_json;

double finite_or_zero(double value) {
  return std::isfinite(value) ? value : 0.0;
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

}  // namespace

std::string render_report_json(const TraceModel& model, const Report& report) {
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
    ordered_json entry = {{"rank", rank.rank}, {"mean_per_step", rank.mean()}};
    ordered_json steps = ordered_json::array();
    for (const auto& step : rank.steps) steps.push_back(step);
    entry["steps"] = std::move(steps);
    breakdown.push_back(std::move(entry));
  }
  out["breakdown"] = std::move(breakdown);
  out["step_spread"] = report.breakdown.spread;
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
  // Only traces since format 3 carry a decision's numbers (older reports stay as they were).
  for (const RebalanceDecision& d : rebalances.with_costs) {
    out["rebalances"]["with_costs"].push_back({{"step", d.step},
                                               {"layer", d.layer},
                                               {"applied", d.applied},
                                               {"busiest_rows_before", d.busiest_rows_before},
                                               {"busiest_rows_after", d.busiest_rows_after},
                                               {"gain_ms", d.gain_ms},
                                               {"replica_sync_ms", d.replica_sync_ms},
                                               {"migration_ms", d.migration_ms},
                                               {"window_steps", d.window_steps},
                                               {"net_ms", d.net_ms},
                                               {"net_stderr_ms", d.net_stderr_ms},
                                               {"reason", rebalance_reason_text(d.reason)}});
  }
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

}  // namespace moescope::analysis

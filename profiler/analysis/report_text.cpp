// The report as text or markdown: what a person reads after `moescope report`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "moescope/analysis/finding_links.h"
#include "rebalance_decision_lines.h"
#include "report_renderers.h"
#include "text_writer.h"

namespace moescope::analysis {
namespace {

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

}  // namespace

std::string render_report_text(const TraceModel& model, const Report& report, bool markdown) {
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
    write_rebalance_decisions(w, r.with_costs);
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

}  // namespace moescope::analysis

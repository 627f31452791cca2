// Step cost terms of a placement change and the rebalance advice (definitions in
// step_cost_terms.h).
#include "moescope/analysis/step_cost_terms.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "moescope/analysis/collective_op_wait.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {
namespace {

constexpr uint32_t kAllReduceKind = 1;  // MOESCOPE_COMM_ALL_REDUCE
constexpr uint32_t kAllToAllKind = 6;   // MOESCOPE_COMM_ALL_TO_ALL
constexpr double kMsPerNs = 1e-6;

// The same line with every byte counted `factor` times.
LinearFit scaled_bytes(LinearFit fit, double factor) {
  fit.slope *= factor;
  fit.slope_stderr *= factor;
  return fit;
}

double squared(double value) {
  return value * value;
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// Per communicator id and op key (its sequence number when they are distinct, else its
// position, as collective_wait.cpp matches ops), the largest copy's bytes: a collective ends
// when its largest transfer does, so that is what its time grows with.
using OpKey = std::pair<uint64_t, uint64_t>;
OpKey op_key(const CommunicatorTrack& comm, bool by_sequence, size_t index) {
  return {comm.comm_id, by_sequence ? uint64_t(comm.ops[index].sequence) : uint64_t(index)};
}

bool sequences_are_distinct(const CommunicatorTrack& comm) {
  std::set<uint32_t> seen;
  for (const CommOp& op : comm.ops) {
    if (!seen.insert(op.sequence).second) return false;
  }
  return true;
}

std::map<OpKey, uint64_t> largest_copy_bytes(const TraceModel& model) {
  std::map<OpKey, uint64_t> largest;
  for (const ProcessTrack& process : model.processes) {
    for (const CommunicatorTrack& comm : process.communicators) {
      const bool by_sequence = sequences_are_distinct(comm);
      for (size_t i = 0; i < comm.ops.size(); ++i) {
        uint64_t& bytes = largest[op_key(comm, by_sequence, i)];
        bytes = std::max(bytes, comm.ops[i].bytes);
      }
    }
  }
  return largest;
}

}  // namespace

CommCostFit fit_comm_costs(const TraceModel& model) {
  CommCostFit fit;
  const CollectiveOpWaits waits = collective_op_waits(model);
  std::vector<double> a2a_bytes, a2a_ms, ar_bytes, ar_ms;
  double a2a_duration_ms = 0;
  double payload_bytes = 0;
  const std::map<OpKey, uint64_t> largest = largest_copy_bytes(model);
  for (size_t p = 0; p < model.processes.size(); ++p) {
    const auto& communicators = model.processes[p].communicators;
    for (size_t c = 0; c < communicators.size(); ++c) {
      const bool by_sequence = sequences_are_distinct(communicators[c]);
      for (size_t i = 0; i < communicators[c].ops.size(); ++i) {
        const CommOp& op = communicators[c].ops[i];
        if (op.end <= op.start) continue;
        const TimeNs wait = std::max<TimeNs>(0, waits.wait(p, c, i));
        const double transfer_ms = double(std::max<TimeNs>(0, op.duration() - wait)) * kMsPerNs;
        const double bytes = double(largest.at(op_key(communicators[c], by_sequence, i)));
        if (op.kind == kAllToAllKind) {
          // Migrations are their own term (and would count their bytes as rows' bytes).
          if (model.name(op.name).find("migration") != std::string::npos) continue;
          a2a_bytes.push_back(bytes);
          a2a_ms.push_back(transfer_ms);
          a2a_duration_ms += double(op.duration()) * kMsPerNs;
          payload_bytes += double(op.bytes);
        } else if (op.kind == kAllReduceKind) {
          ar_bytes.push_back(bytes);
          ar_ms.push_back(transfer_ms);
        }
      }
    }
  }
  fit.all_to_all = fit_line(a2a_bytes, a2a_ms);
  fit.all_to_all_mean_ms = a2a_ms.empty() ? 0.0 : a2a_duration_ms / double(a2a_ms.size());
  fit.all_reduce = fit_line(ar_bytes, ar_ms);
  fit.all_reduce_measured = fit.all_reduce.valid;
  if (!fit.all_reduce_measured && fit.all_to_all.valid) {
    fit.all_reduce = scaled_bytes(fit.all_to_all, 2.0);
  }
  double rows = 0;
  for (const RankStepRows& entry : received_rows_by_rank(model)) rows += entry.rows;
  fit.all_to_all_bytes_per_row = rows > 0 ? payload_bytes / rows : 0.0;

  std::vector<double> moved_bytes, moved_ms;
  double decision_ms = 0;
  for (const RebalanceDecision& decision : model.rebalances) {
    ++fit.decisions;
    decision_ms += double(decision.duration_ns) * kMsPerNs;
    if (decision.applied && decision.bytes_moved > 0) {
      moved_bytes.push_back(double(decision.bytes_moved));
      moved_ms.push_back(double(decision.duration_ns) * kMsPerNs);
    }
  }
  fit.decision_ms_mean = fit.decisions > 0 ? decision_ms / double(fit.decisions) : 0.0;
  fit.migration = fit_line(moved_bytes, moved_ms);
  fit.migration_measured = fit.migration.valid;
  if (!fit.migration_measured) fit.migration = fit.all_to_all;
  return fit;
}

std::vector<StepCostTerm> placement_cost_terms(const CommCostFit& fit,
                                               const PlacementChangeCosts& costs,
                                               double rows_change) {
  std::vector<StepCostTerm> terms;
  if (fit.all_to_all.valid && fit.all_to_all_bytes_per_row > 0) {
    const double bytes = rows_change * fit.all_to_all_bytes_per_row;
    terms.push_back({"all-to-all", fit.all_to_all.slope * bytes,
                     fit.all_to_all.slope_stderr * std::abs(bytes),
                     "busiest rank's rows x " + format("%.0f", fit.all_to_all_bytes_per_row) +
                         " B/row x ms/B fitted over " + std::to_string(fit.all_to_all.samples) +
                         " all-to-all ops"});
  }
  if (!fit.all_reduce.valid) return terms;  // no collective to fit the rest from
  const std::string reduce_basis =
      fit.all_reduce_measured
          ? "all-reduce fitted over " + std::to_string(fit.all_reduce.samples) + " ops"
          : "all-reduce from the all-to-all fit, 2 x bytes (no all-reduce ops recorded)";

  double added_collectives = 0, added_replicas = 0;
  const size_t layers = std::min(costs.replicated_before.size(), costs.replicated_after.size());
  for (size_t layer = 0; layer < layers; ++layer) {
    added_collectives += double((costs.replicated_after[layer] > 0 ? 1 : 0) -
                                (costs.replicated_before[layer] > 0 ? 1 : 0)) *
                         costs.sync_collectives_per_layer;
    added_replicas += double(costs.replicated_after[layer] - costs.replicated_before[layer]);
  }
  const double sync_bytes = added_replicas * costs.expert_bytes;  // one gradient per expert
  terms.push_back({"replica grad sync",
                   added_collectives * fit.all_reduce.intercept + fit.all_reduce.slope * sync_bytes,
                   std::sqrt(squared(added_collectives * fit.all_reduce.intercept_stderr) +
                             squared(fit.all_reduce.slope_stderr * sync_bytes)),
                   std::to_string(int(added_collectives)) + " all-reduce(s) and " +
                       std::to_string(int(added_replicas)) + " replicated expert(s) x " +
                       std::to_string(int64_t(costs.expert_bytes)) + " B per step; " +
                       reduce_basis});

  const double window = std::max(1.0, costs.window_steps);
  const double moved =
      double(costs.expert_copies) * costs.expert_bytes * costs.moved_tensors_per_expert;
  if (costs.expert_copies > 0) {
    // Derived from the all-to-all: one transfer per moved tensor of each layer moved (every
    // layer once unless counted); measured: per decision.
    const double transfers = fit.migration_measured
                                 ? double(std::max<size_t>(1, costs.layer_moves))
                                 : costs.moved_tensors_per_expert *
                                       double(costs.layer_moves > 0 ? costs.layer_moves : layers);
    const LinearFit& line = fit.migration;
    terms.push_back(
        {"migration", (transfers * line.intercept + line.slope * moved) / window,
         std::sqrt(squared(transfers * line.intercept_stderr) +
                   squared(line.slope_stderr * moved)) /
             window,
         std::to_string(costs.expert_copies) + " expert copies x " +
             std::to_string(int64_t(costs.expert_bytes)) + " B x " +
             std::to_string(costs.moved_tensors_per_expert) + " tensors once per " +
             std::to_string(int64_t(window)) + " steps; " +
             (fit.migration_measured ? "ms/B fitted over " + std::to_string(fit.migration.samples) +
                                           " applied rebalances"
                                     : std::string("ms/B from the all-to-all fit"))});
  }
  if (costs.rebalancer) {
    const double own = costs.rebalancer_collectives_per_step;
    terms.push_back({"rebalance", own * fit.all_reduce.intercept + fit.decision_ms_mean / window,
                     own * fit.all_reduce.intercept_stderr,
                     std::to_string(costs.rebalancer_collectives_per_step) +
                         " load all-reduce(s) per step + " + std::to_string(fit.decision_ms_mean) +
                         " ms per decision (" + std::to_string(fit.decisions) +
                         " recorded) once per window; " + reduce_basis});
  }
  return terms;
}

RebalanceAdvice advise_rebalance(const PlacementPrediction& prediction) {
  RebalanceAdvice advice;
  advice.window_steps = std::max(1.0, prediction.window_steps);
  double recurring = 0;
  for (const StepCostTerm& term : prediction.terms) {
    if (term.name == "migration") {
      advice.move_cost_ms += term.ms * advice.window_steps;
    } else {
      recurring += term.ms;
    }
  }
  advice.gain_ms = -recurring * advice.window_steps;
  advice.net_ms_per_step = prediction.step_ms_change;
  advice.net_low = prediction.change_low();
  advice.net_high = prediction.change_high();
  advice.rebalance = advice.gain_ms > advice.move_cost_ms;
  advice.beyond_uncertainty = advice.rebalance ? advice.net_high < 0 : advice.net_low >= 0;
  char text[256];
  std::snprintf(text, sizeof(text), "%s: gain %.1f ms over %.0f steps %s the move's %.1f ms",
                advice.rebalance ? "rebalance" : "keep the current placement", advice.gain_ms,
                advice.window_steps, advice.rebalance ? "beats" : "does not beat",
                advice.move_cost_ms);
  advice.reason = text;
  if (!advice.beyond_uncertainty) advice.reason += " (within the prediction's uncertainty)";
  return advice;
}

}  // namespace moescope::analysis

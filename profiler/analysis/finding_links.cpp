// Causal links between findings (see finding_links.h).
#include "moescope/analysis/finding_links.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/expert_placement_seen.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/statistics.h"
#include "printf_string.h"

namespace moescope::analysis {
namespace {

template <typename Number>
std::string joined(const std::vector<Number>& values, const char* prefix = "") {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::string(prefix) + std::to_string(values[i]);
  }
  return text;
}

int32_t only_rank(const Finding& finding) {
  return finding.where.ranks.size() == 1 ? finding.where.ranks.front() : -1;
}

// The step time the findings' shares divide by (est / share of any finding with both).
double reference_step_ms(const std::vector<Finding>& findings) {
  for (const Finding& finding : findings) {
    if (finding.step_share > 0 && finding.est_ms_per_step > 0) {
      return finding.est_ms_per_step / finding.step_share;
    }
  }
  return 0.0;
}

void link(Finding& cause, Finding& effect, size_t cause_index, size_t effect_index) {
  cause.explains.push_back(int32_t(effect_index));  // indices now, ids after ranking
  effect.explained_by.push_back(int32_t(cause_index));
}

// Time per step in spans of `process` whose lowercase name contains one of `words`.
double span_ms_per_step(const TraceModel& model, const ProcessTrack& process,
                        std::initializer_list<const char*> words) {
  double total = 0;
  for (const CpuThreadTrack& thread : process.threads) {
    for (const Span& span : thread.spans) {
      if (span.depth != 0) continue;  // top level only: nested matches would count twice
      std::string name = model.name(span.name);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      for (const char* word : words) {
        if (name.find(word) != std::string::npos) {
          total += double(span.duration()) * 1e-6;
          break;
        }
      }
    }
  }
  return total / double(std::max<size_t>(1, process.steps.size()));
}

// What else makes `rank` slow when no expert load explains it: host synchronization, a data
// loader or GC, as far as the trace shows them; else slower compute for the same work.
std::string non_expert_cause(const TraceModel& model, const TimeBreakdown& breakdown, int32_t rank,
                             double excess_ms) {
  std::vector<double> syncs, loaders, collections;
  double rank_sync = 0, rank_loader = 0, rank_gc = 0;
  for (const RankBreakdown& entry : breakdown.ranks) {
    const int p = model.process_of_rank(entry.rank);
    if (p < 0) continue;
    const ProcessTrack& process = model.processes[size_t(p)];
    const double sync = entry.mean().host_sync_ms;
    const double loader =
        span_ms_per_step(model, process, {"dataloader", "data_loader", "enumerate("});
    const double gc = span_ms_per_step(model, process, {"gc.collect", "garbage"});
    if (entry.rank == rank) {
      rank_sync = sync, rank_loader = loader, rank_gc = gc;
    } else {
      syncs.push_back(sync), loaders.push_back(loader), collections.push_back(gc);
    }
  }
  const double half = 0.5 * excess_ms;
  if (rank_loader - median(loaders) >= half) {
    return printf_string(
        "the data loader: %.2f ms per step in data-loading spans vs %.2f ms on the "
        "others",
        rank_loader, median(loaders));
  }
  if (rank_gc - median(collections) >= half) {
    return printf_string(
        "garbage collection: %.2f ms per step in GC spans vs %.2f ms on the others", rank_gc,
        median(collections));
  }
  if (rank_sync - median(syncs) >= half) {
    return printf_string(
        "host synchronization: the host waits %.2f ms per step vs %.2f ms on the "
        "others (see host_sync_stall)",
        rank_sync, median(syncs));
  }
  return "none of host synchronization, data-loading or GC spans explains it: the same work "
         "runs slower here (a slower GPU or host, or work the trace does not name)";
}

// How many more expert rows per step `rank` computes than the others' median, over every layer
// with received rows, as a share of that median (0 without received rows).
double expert_row_excess_share(const TraceModel& model, int32_t rank) {
  std::map<int32_t, double> rows;
  for (const LayerLoad& layer : analyze_expert_load(model).layers) {
    for (const auto& [who, layer_rows] : expert_placement_seen(model, layer.layer).rows_by_rank) {
      rows[who] += layer_rows;
    }
  }
  if (!rows.count(rank) || rows.size() < 2) return 0.0;
  std::vector<double> others;
  for (const auto& [who, total] : rows) {
    if (who != rank) others.push_back(total);
  }
  const double typical = median(others);
  return typical > 0 ? (rows[rank] - typical) / typical : 0.0;
}

// The plan an imbalance implies: layer `layer`'s rows split evenly over the ranks (replicas of
// the hot experts on the other ranks), predicted with the cost model. "" when there is none.
std::string implied_plan(const TraceModel& model, const TimeBreakdown& breakdown, uint32_t layer,
                         const std::vector<uint32_t>& hot, int32_t hot_rank,
                         std::vector<std::pair<std::string, double>>& metrics) {
  const ExpertLoadAnalysis load = analyze_expert_load(model);
  std::vector<uint32_t> layers;
  for (const LayerLoad& entry : load.layers) layers.push_back(entry.layer);
  const auto position = std::find(layers.begin(), layers.end(), layer);
  if (position == layers.end()) return "";
  const uint32_t layer_experts = load.layers[size_t(position - layers.begin())].num_experts;
  const std::vector<RankMeasurement> measured = measure_rank_load(model, layers, 1, &breakdown);
  if (measured.size() < 2) return "";
  std::vector<std::vector<double>> loads(layers.size(), std::vector<double>(measured.size(), 0.0));
  for (size_t l = 0; l < layers.size(); ++l) {
    double sum = 0;
    for (size_t g = 0; g < measured.size(); ++g) {
      loads[l][g] = l < measured[g].rows.size() ? measured[g].rows[l] : 0.0;
      sum += loads[l][g];
    }
    if (layers[l] == layer) {
      for (double& rows : loads[l]) rows = sum / double(measured.size());
    }
  }
  PlacementPrediction prediction;
  try {
    prediction = predict_placement(model, loads, 1, &breakdown);
  } catch (const std::invalid_argument&) {
    return "";
  }
  metrics.push_back({"plan_step_ms_before", prediction.step_ms_before});
  metrics.push_back({"plan_step_ms_change", prediction.step_ms_change});
  return printf_string(
      "Implied plan: replicate expert%s %s of layer %u from rank %d onto the other rank(s) so the "
      "layer's rows split evenly over the %zu ranks; predicted step time %.2f -> %.2f ms (%+.2f "
      "ms, cost model %.4f ms per row). `moescope plan --gpus %zu --slots %zu` on these traces "
      "computes the placement (the experts + one replica per hot expert); `moescope diff "
      "--predicted` checks it against a rerun.",
      hot.size() == 1 ? "" : "s", joined(hot).c_str(), layer, hot_rank, measured.size(),
      prediction.step_ms_before, prediction.step_ms_after(), prediction.step_ms_change,
      prediction.cost.ms_per_row, measured.size(), size_t(layer_experts) + hot.size());
}

// Ranks findings by root cause and turns link indices into ids.
void rank_by_root_cause(std::vector<Finding>& findings) {
  const size_t n = findings.size();
  std::vector<size_t> root(n), depth(n, 0);
  for (size_t i = 0; i < n; ++i) {
    size_t at = i;
    for (size_t guard = 0; guard < n && !findings[at].explained_by.empty(); ++guard) {
      at = size_t(findings[at].explained_by.front());
      ++depth[i];
    }
    root[i] = at;
  }
  std::vector<double> chain_ms(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    chain_ms[root[i]] = std::max(chain_ms[root[i]], findings[i].est_ms_per_step);
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (root[a] != root[b]) {
      if (chain_ms[root[a]] != chain_ms[root[b]]) return chain_ms[root[a]] > chain_ms[root[b]];
      if (findings[root[a]].severity != findings[root[b]].severity) {
        return findings[root[a]].severity > findings[root[b]].severity;
      }
      return root[a] < root[b];
    }
    return depth[a] < depth[b];
  });
  std::vector<int32_t> id_of(n);
  for (size_t position = 0; position < n; ++position)
    id_of[order[position]] = int32_t(position + 1);
  std::vector<Finding> ranked;
  ranked.reserve(n);
  for (size_t index : order) {
    Finding finding = std::move(findings[index]);
    finding.id = id_of[index];
    for (int32_t& other : finding.explains) other = id_of[size_t(other)];
    for (int32_t& other : finding.explained_by) other = id_of[size_t(other)];
    ranked.push_back(std::move(finding));
  }
  // The chain sentences name ids: written now that they are known.
  for (Finding& finding : ranked) {
    std::string links;
    if (!finding.explained_by.empty()) links += "explained by " + joined(finding.explained_by, "#");
    if (!finding.explains.empty()) {
      links += (links.empty() ? "explains " : "; explains ") + joined(finding.explains, "#");
    }
    if (!links.empty())
      finding.chain = finding.chain.empty() ? links : finding.chain + ": " + links;
  }
  findings = std::move(ranked);
}

}  // namespace

std::string root_cause_line(const std::vector<Finding>& findings) {
  if (findings.empty()) return "";
  auto by_id = [&](int32_t id) -> const Finding* {
    return id >= 1 && size_t(id) <= findings.size() && findings[size_t(id - 1)].id == id
               ? &findings[size_t(id - 1)]
               : nullptr;
  };
  std::string line;
  const Finding* at = &findings.front();
  for (size_t guard = 0; at && guard < findings.size(); ++guard) {
    std::string where;
    if (at->where.ranks.size() == 1) where = "rank " + std::to_string(at->where.ranks.front());
    if (at->where.layer >= 0) {
      where += (where.empty() ? "layer " : ", layer ") + std::to_string(at->where.layer);
    }
    if (!at->where.experts.empty()) {
      std::string experts;
      for (uint32_t e : at->where.experts)
        experts += (experts.empty() ? "" : ",") + std::to_string(e);
      where += (at->where.experts.size() == 1 ? ", expert " : ", experts ") + experts;
    }
    if (guard == 0)
      where += printf_string("%s%.2f ms/step", where.empty() ? "" : "; ", at->est_ms_per_step);
    line += (line.empty() ? "#" : " -> #") + std::to_string(at->id) + " " + at->kind +
            (where.empty() ? "" : " (" + where + ")");
    at = at->explains.empty() ? nullptr : by_id(at->explains.front());
  }
  const Finding& root = findings.front();
  if (root.explains.empty() && !root.chain.empty()) line += " - " + root.chain;
  return line;
}

void link_findings(const TraceModel& model, const TimeBreakdown& breakdown,
                   const CollectiveWaits& waits, std::vector<Finding>& findings) {
  const double step_ms = reference_step_ms(findings);
  // The breakdown given (from rank summaries it cannot be computed from the model's events).
  const ExpertCostModel cost = fit_expert_cost(model, 1, &breakdown);

  // expert_imbalance -> straggler_rank, through the placement the trace shows.
  std::map<size_t, std::vector<std::pair<size_t, double>>>
      causes_of;  // straggler -> (imbalance, rows)
  for (size_t i = 0; i < findings.size(); ++i) {
    Finding& imbalance = findings[i];
    if (imbalance.kind != "expert_imbalance" || imbalance.where.layer < 0) continue;
    const uint32_t layer = uint32_t(imbalance.where.layer);
    const LayerPlacementSeen seen = expert_placement_seen(model, layer);
    if (!seen.has_received_rows) {
      imbalance.chain = printf_string(
          "the chain stops at layer %u: the trace shows no expert-to-rank placement (no rows "
          "received per rank, e.g. data parallel without expert parallelism), so no rank is "
          "singled out by it",
          layer);
      continue;
    }
    const std::vector<int32_t> hosts = seen.hosts_of(imbalance.where.experts);
    double rows = 0;
    for (const auto& [rank, rank_rows] : seen.rows_by_rank) rows += rank_rows;
    const double mean_rows = rows / double(std::max<size_t>(1, seen.rows_by_rank.size()));
    const double excess_share = mean_rows > 0 ? seen.busiest_excess_rows / mean_rows : 0.0;
    if (imbalance.where.experts.empty()) {
      imbalance.chain = printf_string(
          "no expert of layer %u is hot over the run (the load moves between experts from step "
          "to step): no rank is singled out by the placement",
          layer);
      continue;
    }
    if (hosts.empty()) {
      imbalance.chain = printf_string(
          "layer %u's hot experts have no single rank in the trace (replicated, moved, or not "
          "matched to a rank's received rows): no rank is singled out",
          layer);
      continue;
    }
    if (hosts.size() > 1 || hosts.front() != seen.busiest_rank) {
      imbalance.chain = printf_string(
          "layer %u's hot experts sit on rank(s) %s, and the rank computing most of its rows is "
          "rank %d: no one rank is singled out by them",
          layer, joined(hosts).c_str(), seen.busiest_rank);
      continue;
    }
    if (excess_share < kMinRankExcessShare) {
      imbalance.chain = printf_string(
          "rank %d hosts the hot experts, but layer %u's rows are even over the ranks (the "
          "busiest computes %+.0f%% over the others' median): no rank is singled out",
          hosts.front(), layer, 100.0 * excess_share);
      continue;
    }
    const int32_t rank = seen.busiest_rank;
    imbalance.chain = printf_string(
        "rank %d hosts expert%s %s (placement seen in the rows each rank received) and computes "
        "%.0f more rows of layer %u per step than the others' median",
        rank, imbalance.where.experts.size() == 1 ? "" : "s",
        joined(imbalance.where.experts).c_str(), seen.busiest_excess_rows, layer);
    imbalance.metrics.push_back({"hot_expert_rank", double(rank)});
    imbalance.metrics.push_back({"excess_rows_per_step", seen.busiest_excess_rows});
    const std::string plan =
        implied_plan(model, breakdown, layer, imbalance.where.experts, rank, imbalance.metrics);
    if (!plan.empty()) {
      imbalance.suggestion = plan +
                             " Or at the router: raise the aux-loss coefficient or enable "
                             "aux-loss-free bias updates.";
    }
    for (size_t s = 0; s < findings.size(); ++s) {
      if (findings[s].kind == "straggler_rank" && only_rank(findings[s]) == rank) {
        link(imbalance, findings[s], i, s);
        causes_of[s].push_back({i, seen.busiest_excess_rows});
      }
    }
  }
  // The time each imbalance causes on its straggler.
  for (auto& [s, causes] : causes_of) {
    Finding& straggler = findings[s];
    double rows = 0;
    for (const auto& cause : causes) rows += std::max(0.0, cause.second);
    const double by_rows =
        cost.valid && cost.ms_per_row > 0 ? cost.ms_per_row * rows : straggler.est_ms_per_step;
    const double caused = std::min(straggler.est_ms_per_step, by_rows);
    for (const auto& [i, excess_rows] : causes) {
      Finding& imbalance = findings[i];
      const double share = rows > 0 ? std::max(0.0, excess_rows) / rows : 0.0;
      const double ms = caused * share;
      imbalance.metrics.push_back({"caused_ms_per_step", ms});
      if (ms > imbalance.est_ms_per_step) {
        imbalance.est_ms_per_step = ms;
        imbalance.step_share = step_ms > 0 ? ms / step_ms : 0.0;
        imbalance.severity = std::max(imbalance.severity, severity_of(ms, step_ms));
      }
    }
    straggler.metrics.push_back({"explained_ms", caused});
    straggler.suggestion =
        "Fix the cause: the hot experts on this rank (the expert_imbalance above and its plan); "
        "what is left after it is this rank's own.";
    straggler.chain = printf_string(
        "%.2f of its %.2f ms per step come from the expert rows it computes "
        "(%s)",
        caused, straggler.est_ms_per_step,
        cost.valid ? "cost model" : "no cost model: the whole excess");
  }
  for (Finding& straggler : findings) {
    if (straggler.kind != "straggler_rank" || !straggler.explained_by.empty()) continue;
    const int32_t rank = only_rank(straggler);
    const double row_excess = expert_row_excess_share(model, rank);
    if (row_excess >= kMinRankExcessShare) {
      straggler.chain = printf_string(
          "rank %d computes %.0f%% more expert rows per step than the others' median, though no "
          "imbalance finding names a hot expert on it (the load moves between experts)",
          rank, 100.0 * row_excess);
      continue;
    }
    straggler.chain = "no expert cause in the trace; what it shows: " +
                      non_expert_cause(model, breakdown, rank, straggler.est_ms_per_step);
  }

  // straggler_rank -> exposed_communication, through the waiting inside collectives.
  for (size_t x = 0; x < findings.size(); ++x) {
    Finding& exposed = findings[x];
    if (exposed.kind != "exposed_communication" || waits.empty()) continue;
    double wait = 0, transfer = 0;
    for (const RankCollectiveWait& rank : waits.ranks)
      wait += rank.wait_ms, transfer += rank.transfer_ms;
    wait /= double(std::max<size_t>(1, waits.ranks.size()));
    transfer /= double(std::max<size_t>(1, waits.ranks.size()));
    exposed.metrics.push_back({"wait_ms", wait});
    exposed.metrics.push_back({"transfer_ms", transfer});
    exposed.evidence += printf_string(
        "; inside the collectives %.2f ms per step is waiting for the "
        "last rank to arrive and %.2f ms moving bytes (mean over ranks)",
        wait, transfer);
    std::string waited_for;
    for (size_t s = 0; s < findings.size(); ++s) {
      if (findings[s].kind != "straggler_rank") continue;
      const RankCollectiveWait caused = waits.of_rank(only_rank(findings[s]));
      if (caused.caused_wait_ms < kMinCausedWaitMs) continue;
      link(findings[s], exposed, s, x);
      exposed.metrics.push_back(
          {printf_string("waiting_for_rank_%d_ms", caused.rank), caused.caused_wait_ms});
      waited_for +=
          printf_string("%s%.2f ms per step waiting for rank %d", waited_for.empty() ? "" : ", ",
                        caused.caused_wait_ms, caused.rank);
    }
    if (!waited_for.empty()) {
      exposed.chain = "the other ranks spend " + waited_for + " inside collectives";
      exposed.suggestion = printf_string(
                               "Most of it is waiting, not transfer: fix the straggler first. "
                               "The %.2f ms per step of transfer left is not overlapped: ",
                               transfer) +
                           exposed.suggestion;
    } else {
      exposed.suggestion = printf_string(
                               "Missing overlap: %.2f ms per step of transfer runs with no "
                               "compute under it. ",
                               transfer) +
                           exposed.suggestion;
    }
  }
  rank_by_root_cause(findings);
}

}  // namespace moescope::analysis

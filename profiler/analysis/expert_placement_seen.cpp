// The expert-to-rank placement inferred from received rows (see expert_placement_seen.h).
#include "moescope/analysis/expert_placement_seen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/statistics.h"

namespace moescope::analysis {

std::vector<int32_t> LayerPlacementSeen::hosts_of(const std::vector<uint32_t>& experts) const {
  std::set<int32_t> hosts;
  for (uint32_t expert : experts) {
    if (expert < rank_of_expert.size() && rank_of_expert[expert] >= 0) {
      hosts.insert(rank_of_expert[expert]);
    }
  }
  return {hosts.begin(), hosts.end()};
}

LayerPlacementSeen expert_placement_seen(const TraceModel& model, uint32_t layer) {
  LayerPlacementSeen seen;
  seen.layer = layer;
  // (rank, step) -> rows per local slot.
  std::map<std::pair<int32_t, int64_t>, std::vector<double>> received;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.scope != kExpertsReceived || sample.layer != layer) continue;
    std::vector<double>& slots = received[{sample.rank, sample.step}];
    auto tokens = model.tokens(sample);
    if (slots.size() < tokens.size()) slots.resize(tokens.size(), 0.0);
    for (size_t s = 0; s < tokens.size(); ++s) slots[s] += double(tokens[s]);
  }
  if (received.empty()) return seen;
  seen.has_received_rows = true;

  std::map<int64_t, std::vector<double>> routed;  // step -> tokens per global expert
  size_t num_experts = 0;
  for (LayerStepLoad& load : layer_step_loads(model)) {
    if (load.layer != layer) continue;
    num_experts = std::max(num_experts, load.tokens.size());
    routed[load.step] = std::move(load.tokens);
  }
  seen.rank_of_expert.assign(num_experts, -1);

  std::map<int32_t, std::pair<double, std::set<int64_t>>> rows;  // rank -> (rows, steps)
  std::map<int32_t, size_t> slots_of_rank;
  for (const auto& [key, slots] : received) {
    auto& entry = rows[key.first];
    for (double count : slots) entry.first += count;
    entry.second.insert(key.second);
    slots_of_rank[key.first] = std::max(slots_of_rank[key.first], slots.size());
  }
  for (const auto& [rank, entry] : rows) {
    seen.rows_by_rank.push_back(
        {rank, entry.first / double(std::max<size_t>(1, entry.second.size()))});
  }

  // Each slot against each expert over the steps both have.
  std::vector<std::vector<std::pair<int32_t, size_t>>> slots_matching(num_experts);
  for (const auto& [rank, slots] : slots_of_rank) {
    for (size_t slot = 0; slot < slots; ++slot) {
      double best = std::numeric_limits<double>::infinity(), second = best;
      size_t best_expert = 0;
      for (size_t expert = 0; expert < num_experts; ++expert) {
        double difference = 0, tokens = 0;
        for (const auto& [step, counts] : routed) {
          auto found = received.find({rank, step});
          if (found == received.end()) continue;
          const double rows_here = slot < found->second.size() ? found->second[slot] : 0.0;
          const double routed_here = expert < counts.size() ? counts[expert] : 0.0;
          difference += std::fabs(rows_here - routed_here);
          tokens += routed_here;
        }
        const double error =
            tokens > 0 ? difference / tokens : std::numeric_limits<double>::infinity();
        if (error < best)
          second = best, best = error, best_expert = expert;
        else if (error < second)
          second = error;
      }
      if (best <= kPlacementMatchTolerance && second > best) {
        slots_matching[best_expert].push_back({rank, slot});
      }
    }
  }
  // An expert matched by exactly one slot is hosted there (two matches: a tie, not seen).
  for (size_t expert = 0; expert < num_experts; ++expert) {
    if (slots_matching[expert].size() == 1) {
      seen.rank_of_expert[expert] = slots_matching[expert].front().first;
    }
  }

  if (seen.rows_by_rank.size() >= 2) {
    size_t busiest = 0;
    for (size_t i = 1; i < seen.rows_by_rank.size(); ++i) {
      if (seen.rows_by_rank[i].second > seen.rows_by_rank[busiest].second) busiest = i;
    }
    std::vector<double> others;
    for (size_t i = 0; i < seen.rows_by_rank.size(); ++i) {
      if (i != busiest) others.push_back(seen.rows_by_rank[i].second);
    }
    seen.busiest_rank = seen.rows_by_rank[busiest].first;
    seen.busiest_excess_rows = seen.rows_by_rank[busiest].second - median(others);
  }
  return seen;
}

}  // namespace moescope::analysis

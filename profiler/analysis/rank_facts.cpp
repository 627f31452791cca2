// Per-rank facts of the report (rank_facts.h), computed from a rank's events.
#include "moescope/analysis/rank_facts.h"

#include <set>

#include "moescope/analysis/findings.h"

namespace moescope::analysis {
namespace {

// Notes the capture wrote about what it could not record (domain "moescope"), each once.
std::vector<std::string> capture_gaps_of(const TraceModel& model, const ProcessTrack& process) {
  std::vector<std::string> gaps;
  const StringId domain = model.strings.find("moescope");
  if (!domain) return gaps;
  std::set<StringId> seen;
  for (const auto& thread : process.threads) {
    for (const Instant& instant : thread.instants) {
      if (instant.domain != domain || !seen.insert(instant.name).second) continue;
      const std::string& text = model.name(instant.name);
      for (const char* word : {"not captured", "autocapture off", "capture stopped"}) {
        if (text.find(word) != std::string::npos) {
          gaps.push_back(text);
          break;
        }
      }
    }
  }
  return gaps;
}

double routed_tokens_of(const TraceModel& model, const ProcessTrack& process) {
  const StringId tokens = model.strings.find("moescope.routed_tokens");
  double total = 0;
  for (const CounterTrack& counter : process.counters) {
    if (!tokens || counter.name != tokens) continue;
    for (double value : counter.values) total += value;
  }
  return total;
}

void shift(TimeNs& time, TimeNs offset) {
  time += offset;
}

}  // namespace

TimeBreakdown time_breakdown_of_facts(const std::vector<RankFacts>& facts) {
  TimeBreakdown breakdown;
  std::vector<bool> has_steps;
  for (const RankFacts& rank : facts) {
    breakdown.ranks.push_back(rank.breakdown);
    has_steps.push_back(rank.has_steps);
  }
  breakdown.spread = compute_step_spread(breakdown.ranks, has_steps);
  return breakdown;
}

std::vector<RankFacts> compute_rank_facts(const TraceModel& model) {
  std::vector<RankFacts> all;
  all.reserve(model.processes.size());
  for (const ProcessTrack& process : model.processes) {
    RankFacts facts;
    facts.breakdown = compute_rank_breakdown(model, process);
    facts.has_steps = !process.steps.empty();
    facts.phases = compute_rank_phases(model, process);
    facts.memory = analyze_rank_memory(process);
    facts.expert_ms_per_step = expert_ms_per_step(model, process);
    facts.capture_gaps = capture_gaps_of(model, process);
    const PhaseSpanCounts phases = count_phase_spans(model, process);
    facts.has_phase_domain = phases.has_domain;
    facts.forward_phase_spans = phases.forward;
    facts.training_phase_spans = phases.training;
    facts.routed_tokens = routed_tokens_of(model, process);
    all.push_back(std::move(facts));
  }
  return all;
}

void shift_rank_facts(RankFacts& facts, TimeNs offset) {
  if (offset == 0) return;
  for (StepBreakdown& step : facts.breakdown.steps)
    shift(step.start, offset), shift(step.end, offset);
  if (!facts.breakdown.steps.empty()) {
    shift(facts.breakdown.total.start, offset);
    shift(facts.breakdown.total.end, offset);
  }
  if (facts.memory.allocations || facts.memory.frees) shift(facts.memory.peak_time, offset);
  for (LiveAllocation& allocation : facts.memory.largest_at_peak) {
    shift(allocation.allocated_at, offset);
  }
}

}  // namespace moescope::analysis

namespace moescope::analysis {

InferenceSummary inference_from_facts(const TraceModel& model,
                                      const std::vector<RankFacts>& facts) {
  for (const ProcessTrack& process : model.processes) {
    if (!process.step_markers.empty()) return {};
  }
  bool has_domain = false;
  for (const RankFacts& rank : facts) has_domain |= rank.has_phase_domain;
  if (!has_domain) return {};
  InferenceSummary found;
  for (const RankFacts& rank : facts) {
    if (rank.training_phase_spans) return {};
    found.forward_passes += rank.forward_phase_spans;
  }
  if (!found.forward_passes) return {};
  found.inference = true;
  for (const RankFacts& rank : facts) found.routed_tokens += rank.routed_tokens;
  return found;
}

}  // namespace moescope::analysis

// `moescope top`'s frame (top_frame.h).
#include "top_frame.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/statistics.h"
#include "moescope/analysis/time_breakdown.h"

namespace moescope::cli {
namespace {

std::string format(const char* pattern, auto... values) {
  char line[512];
  std::snprintf(line, sizeof(line), pattern, values...);
  return line;
}

// Steps of `rank` that finished: all of them in a closed trace, all but the last while the
// trace is still being written (the last one may still be running).
std::vector<const analysis::StepBreakdown*> finished_steps(const analysis::TraceModel& model,
                                                           const analysis::RankBreakdown& rank) {
  std::vector<const analysis::StepBreakdown*> steps;
  for (const auto& step : rank.steps) {
    if (step.step >= 0) steps.push_back(&step);
  }
  int index = model.process_of_rank(rank.rank);
  if (!steps.empty() && index >= 0 && !model.processes[size_t(index)].complete) steps.pop_back();
  return steps;
}

std::string layer_rows(const analysis::TraceModel& model, int64_t step) {
  std::string text = format("%-6s %9s %6s %5s  %s\n", "layer", "max/mean", "cv", "dead",
                            "hot experts (share of tokens)");
  for (const analysis::LayerStepLoad& load : analysis::layer_step_loads(model)) {
    if (load.step != step || load.tokens.empty()) continue;
    double total = 0;
    int dead = 0;
    for (double t : load.tokens) total += t, dead += t <= 0 ? 1 : 0;
    std::vector<size_t> hot;
    for (size_t e = 0; e < load.tokens.size(); ++e) {
      if (analysis::share(load.tokens[e], total) >
          analysis::kHotShareFactor / double(load.tokens.size()))
        hot.push_back(e);
    }
    std::sort(hot.begin(), hot.end(), [&](size_t a, size_t b) {
      return load.tokens[a] != load.tokens[b] ? load.tokens[a] > load.tokens[b] : a < b;
    });
    std::string experts;
    for (size_t i = 0; i < hot.size() && i < 4; ++i) {
      experts += format("%se%zu %.0f%%", i ? ", " : "", hot[i],
                        100.0 * analysis::share(load.tokens[hot[i]], total));
    }
    if (hot.size() > 4) experts += format(", +%zu more", hot.size() - 4);
    text += format("%-6u %9.2f %6.2f %5d  %s\n", load.layer, analysis::max_over_mean(load.tokens),
                   analysis::coefficient_of_variation(load.tokens), dead,
                   experts.empty() ? "-" : experts.c_str());
  }
  return text;
}

}  // namespace

std::string render_top_frame(const analysis::TraceModel& model) {
  analysis::TimeBreakdown breakdown = analysis::compute_time_breakdown(model);
  // A process of the run without steps (the launcher, a helper) is not a rank of the job.
  auto has_steps = [&](int32_t rank) {
    int index = model.process_of_rank(rank);
    return index >= 0 && !model.processes[size_t(index)].steps.empty();
  };
  size_t ranks_shown = 0, running = 0;
  for (const auto& process : model.processes) {
    if (process.steps.empty()) continue;
    ++ranks_shown;
    running += process.complete ? 0 : 1;
  }
  std::string text = format("moescope top: %zu ranks (%zu still writing), steps from %s",
                            ranks_shown, running, analysis::step_source_name(model.step_source));
  if (ranks_shown < model.processes.size()) {
    text += format("; %zu other process(es) without steps", model.processes.size() - ranks_shown);
  }
  text += "\n";
  text += format("%-5s %6s %9s %9s %9s %12s\n", "rank", "steps", "last", "step ms", "busy ms",
                 "exposed comm");
  // The latest step every rank finished, and each rank's breakdown of it.
  int64_t common = -1;
  bool first = true, a_rank_has_none = false;
  for (const auto& rank : breakdown.ranks) {
    if (!has_steps(rank.rank)) continue;
    auto steps = finished_steps(model, rank);
    if (steps.empty()) {  // its first step is still running
      text += format("%-5d %6d %9s %9s %9s %12s\n", rank.rank, 0, "-", "-", "-", "-");
      a_rank_has_none = true;
      continue;
    }
    const auto* last = steps.back();
    text += format("%-5d %6zu %9lld %9.1f %9.1f %9.1f ms\n", rank.rank, steps.size(),
                   static_cast<long long>(last->step), last->step_ms, last->busy_ms(),
                   last->exposed_communication_ms);
    common = first ? last->step : std::min(common, last->step);
    first = false;
  }
  if (common < 0 || a_rank_has_none) return text + "no step finished on every rank yet\n";
  // Busy time of `common` on each rank: the straggler is the busiest.
  std::vector<double> busy;
  std::vector<int32_t> ranks;
  double exposed = 0;
  for (const auto& rank : breakdown.ranks) {
    for (const auto& step : rank.steps) {
      if (step.step != common) continue;
      busy.push_back(step.busy_ms());
      ranks.push_back(rank.rank);
      exposed += step.exposed_communication_ms;
    }
  }
  text += format("\nstep %lld (finished on every rank):", static_cast<long long>(common));
  if (busy.size() >= 2) {
    size_t slowest = size_t(std::max_element(busy.begin(), busy.end()) - busy.begin());
    text += format(" slowest rank %d, +%.1f ms busy over the median of the others;", ranks[slowest],
                   analysis::straggler_excess(busy, slowest));
  }
  if (!busy.empty()) {
    text += format(" exposed communication %.1f ms per rank\n", exposed / double(busy.size()));
  }
  return text + layer_rows(model, common);
}

}  // namespace moescope::cli

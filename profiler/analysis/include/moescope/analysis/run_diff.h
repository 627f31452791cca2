// Two runs compared: did a change help, where, and is the difference larger than the runs' own
// step-to-step noise? Every number comes from the analyses of each run's TraceModel (time
// breakdown, span time, communication per step, expert load, findings); this module only pairs
// them and decides what is significant (difference_interval.h).
//
// Rows (each a per-step series in both runs; the mean per step over the steps after the
// warm-up, and the interval of new - base):
//   step        step time, compute, exposed / overlapped communication, memcpy, idle, host sync
//               (the mean over ranks of time_breakdown.h's parts)
//   phase       spans of domain moescope.phase (forward, backward, optimizer)
//   module      spans of domain moescope.module
//   span        every other named span (runtime and program ranges), the largest first
//   collective  per kind: time, bytes and ops per step on a rank; wait and transfer inside them
//               (collective_wait.h)
//   layer       per MoE layer: experts max/mean, ranks max/mean, tokens dropped per step
//   rank        per rank: busy time over the median of the other ranks (the straggler excess)
// A row is significant when its interval excludes 0. The intervals hold together at
// `confidence` (Bonferroni: each row gets alpha = (1 - confidence) / rows compared), so a diff
// of two runs of the same program reports nothing with probability >= confidence.
// Besides the rows: hot and dead experts per layer (sets), findings that appeared, disappeared
// or changed size, and optionally a placement prediction checked against the new run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moescope/analysis/difference_interval.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct DiffOptions {
  size_t skip_steps = 1;     // warm-up steps left out of each run
  size_t max_batches = 10;   // batch means (difference_interval.h)
  double confidence = 0.95;  // family-wise, over every row compared
  size_t max_spans = 24;     // per span section, the spans with the most time
  // The standard deviation of a run's mean step time between repeated runs of the same program
  // (ms, measured beforehand: difference_interval.h). The step time row's interval and the
  // prediction check include it; 0: they cover the step-to-step noise inside each run only.
  double run_to_run_ms = 0;
};

struct DiffRow {
  std::string section;   // step, phase, module, span, collective, layer, rank
  std::string name;      // "step time", "forward", "all_to_all bytes", "layer 1 experts max/mean"
  std::string unit;      // ms, bytes, ops, ratio, tokens
  bool is_time = false;  // ms per step: ranked by time gained or lost
  bool in_base = true, in_next = true;  // absent series count 0 (spans, collectives)
  StepSeries base_series, next_series;  // the kept steps
  SampleMean base, next;
  double run_to_run_sd = 0;  // in the interval besides the runs' own noise (the step time row)
  DifferenceInterval interval;
};

struct ExpertSetChange {
  uint32_t layer = 0;
  std::string what;  // "hot experts", "dead experts"
  std::vector<uint32_t> base, next;
};

struct FindingChange {
  std::string kind;
  std::string where;   // "all ranks", "rank 1", "layer 1", ...
  std::string status;  // appeared, disappeared, changed, unchanged
  double base_ms = 0, next_ms = 0;
  std::string base_severity, next_severity;  // "" when absent
  std::string evidence;                      // the new run's, else the base's
};

struct RunSide {
  size_t ranks = 0;
  size_t steps = 0;  // steps compared (after the warm-up)
  size_t steps_total = 0;
  std::string step_source;
  std::vector<int64_t> step_ids;  // every step (known_steps)
  std::vector<double> step_ms;    // [step_ids] mean over ranks: the per-step chart
};

// A placement prediction checked against the new run.
struct PredictionCheck {
  PlacementPrediction prediction;
  std::vector<RankMeasurement> measured;  // the new run, in the prediction's rank order
  double measured_step_change = 0;        // the step time row's difference
  DifferenceInterval measured_interval;
  bool inside_interval = false;  // the predicted change lies inside the measured interval
};

struct RunDiff {
  DiffOptions options;
  RunSide base, next;
  size_t rows_compared = 0;
  double alpha_per_row = 0;
  std::vector<DiffRow> rows;                 // by section
  std::vector<size_t> ranked;                // significant time rows, largest |difference| first
  std::vector<ExpertSetChange> expert_sets;  // only layers whose sets differ
  std::vector<FindingChange> findings;
  std::optional<PredictionCheck> prediction;
  size_t significant() const;
};

// `base_facts` / `next_facts` (model process order): a run read from rank summaries, whose model
// has no spans, kernels or memory events; its ranks' facts give those numbers (the same as the
// full traces give). Null: computed from the model's events.
RunDiff diff_runs(const TraceModel& base, const TraceModel& next, const DiffOptions& options = {},
                  const std::vector<RankFacts>* base_facts = nullptr,
                  const std::vector<RankFacts>* next_facts = nullptr);

// One recording's step time row as diff_runs computes it (the mean over ranks per step after
// `options.skip_steps`, batch means): what estimate_run_to_run compares between recordings.
// `breakdown`: from summaries; null: computed from the model.
SampleMean run_step_time(const TraceModel& model, const DiffOptions& options,
                         const TimeBreakdown* breakdown = nullptr);

// Adds the check of `prediction` (from `moescope plan` on the base run) against `next`
// (`next_facts` as for diff_runs).
void check_prediction(RunDiff& diff, const TraceModel& next, PlacementPrediction prediction,
                      const std::vector<RankFacts>* next_facts = nullptr);

enum class DiffFormat { kText, kMarkdown, kJson };
bool parse_diff_format(const std::string& name, DiffFormat& format);
std::string render_diff(const RunDiff& diff, DiffFormat format);

}  // namespace moescope::analysis

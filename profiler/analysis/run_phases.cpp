// Phase breakdown and inference runs (see run_phases.h).
#include "moescope/analysis/run_phases.h"

#include <algorithm>

namespace moescope::analysis {
namespace {

constexpr int kOther = 4;

// Index in kPhaseNames of a phase span's name, -1 when it is none of them.
int phase_index(const std::string& name) {
  for (int i = 0; i < kOther; ++i) {
    if (name == kPhaseNames[size_t(i)]) return i;
  }
  return -1;
}

struct PhaseSpan {
  TimeNs start = 0, end = 0;
  int phase = 0;
};

// Phase spans of one process, sorted by start; `domain` is "moescope.phase"'s id.
std::vector<PhaseSpan> phase_spans(const TraceModel& model, const ProcessTrack& process,
                                   StringId domain) {
  std::vector<PhaseSpan> spans;
  std::vector<int> index_of(model.strings.size(), -2);
  for (const auto& thread : process.threads) {
    for (const Span& span : thread.spans) {
      if (span.domain != domain) continue;
      int& phase = index_of[span.name];
      if (phase == -2) phase = phase_index(model.name(span.name));
      if (phase >= 0 && span.end > span.start) spans.push_back({span.start, span.end, phase});
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const PhaseSpan& a, const PhaseSpan& b) { return a.start < b.start; });
  return spans;
}

// Adds each instant of [t0, t1) to the innermost phase span covering it (the latest started),
// the rest to "other".
void split_step(const std::vector<PhaseSpan>& spans, TimeNs t0, TimeNs t1, RankPhases& out) {
  std::vector<const PhaseSpan*> inside;
  std::vector<TimeNs> cuts = {t0, t1};
  for (const PhaseSpan& span : spans) {
    if (span.start >= t1) break;
    if (span.end <= t0) continue;
    inside.push_back(&span);
    if (span.start > t0) cuts.push_back(span.start);
    if (span.end < t1) cuts.push_back(span.end);
    if (span.start >= t0) ++out.phase_spans[size_t(span.phase)];
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const TimeNs a = cuts[c], b = cuts[c + 1];
    int phase = kOther;
    TimeNs latest = INT64_MIN;
    for (const PhaseSpan* span : inside) {
      if (span->start <= a && span->end >= b && span->start >= latest) {
        latest = span->start;
        phase = span->phase;
      }
    }
    out.phase_ms[size_t(phase)] += double(b - a) * 1e-6;
  }
}

}  // namespace

RankPhases compute_rank_phases(const TraceModel& model, const ProcessTrack& process) {
  const StringId domain = model.strings.find("moescope.phase");
  RankPhases rank;
  rank.rank = process.rank;
  const std::vector<PhaseSpan> spans =
      domain ? phase_spans(model, process, domain) : std::vector<PhaseSpan>();
  for (const StepInterval& step : process.steps) {
    if (step.end <= step.start) continue;
    ++rank.steps;
    rank.step_ms += double(step.end - step.start) * 1e-6;
    split_step(spans, step.start, step.end, rank);
  }
  if (rank.steps) {
    const double steps = double(rank.steps);
    rank.step_ms /= steps;
    for (double& ms : rank.phase_ms) ms /= steps;
  }
  return rank;
}

PhaseSpanCounts count_phase_spans(const TraceModel& model, const ProcessTrack& process) {
  PhaseSpanCounts counts;
  const StringId domain = model.strings.find("moescope.phase");
  if (!domain) return counts;
  counts.has_domain = true;
  for (const PhaseSpan& span : phase_spans(model, process, domain)) {
    if (span.phase == 0) {
      ++counts.forward;
    } else if (span.phase != 2) {
      ++counts.training;
    }
  }
  return counts;
}

PhaseBreakdown phase_breakdown_of(std::vector<RankPhases> ranks) {
  PhaseBreakdown result;
  for (const RankPhases& rank : ranks) {
    if (!rank.steps) continue;
    for (int i = 0; i < kOther; ++i) result.any |= rank.phase_spans[size_t(i)] > 0;
  }
  result.ranks = std::move(ranks);
  return result;
}

PhaseBreakdown compute_phase_breakdown(const TraceModel& model) {
  std::vector<RankPhases> ranks;
  for (const ProcessTrack& process : model.processes) {
    ranks.push_back(compute_rank_phases(model, process));
  }
  return phase_breakdown_of(std::move(ranks));
}

bool is_inference_run(const TraceModel& model, InferenceSummary* summary) {
  InferenceSummary found;
  for (const ProcessTrack& process : model.processes) {
    if (!process.step_markers.empty()) return false;
  }
  const StringId domain = model.strings.find("moescope.phase");
  if (!domain) return false;
  for (const ProcessTrack& process : model.processes) {
    for (const PhaseSpan& span : phase_spans(model, process, domain)) {
      if (span.phase == 0) {
        ++found.forward_passes;
      } else if (span.phase != 2) {  // backward or optimizer: training
        return false;
      }
    }
  }
  if (!found.forward_passes) return false;
  found.inference = true;
  const StringId tokens = model.strings.find("moescope.routed_tokens");
  for (const ProcessTrack& process : model.processes) {
    for (const CounterTrack& counter : process.counters) {
      if (!tokens || counter.name != tokens) continue;
      for (double value : counter.values) found.routed_tokens += value;
    }
  }
  if (summary) *summary = found;
  return true;
}

}  // namespace moescope::analysis

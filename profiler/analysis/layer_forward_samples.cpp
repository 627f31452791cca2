// Each MoE layer forward's measured expert compute and dispatch (layer_forward_samples.h).
#include "moescope/analysis/layer_forward_samples.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {
namespace {

constexpr double kMsPerNs = 1e-6;

// step -> durations in ms, in start order, of what `process` recorded at each step.
using DurationsByStep = std::map<int64_t, std::vector<std::pair<TimeNs, double>>>;

void add_at_step(DurationsByStep& by_step, const ProcessTrack& process, TimeNs start, TimeNs end) {
  const int index = step_at(process, start);
  if (index >= 0) {
    by_step[process.steps[size_t(index)].step].push_back({start, double(end - start) * kMsPerNs});
  }
}

}  // namespace

std::vector<LayerForwardSample> layer_forward_samples(const TraceModel& model) {
  std::vector<LayerForwardSample> samples;
  const StringId domain = model.strings.find("moescope");
  const StringId experts = model.strings.find("moe.experts");
  const StringId dispatch = model.strings.find("a2a.dispatch");
  if (!domain || !experts) return samples;
  // (rank, step) -> the layers with rows that step, ascending, and their rows.
  std::map<std::pair<int32_t, int64_t>, std::map<uint32_t, double>> rows;
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    rows[{entry.rank, entry.step}][entry.layer] += entry.rows;
  }
  for (const ProcessTrack& process : model.processes) {
    DurationsByStep experts_by_step, dispatch_by_step;
    for (const CpuThreadTrack& thread : process.threads) {
      for (const Span& span : thread.spans) {
        if (span.name == experts && span.domain == domain) {
          add_at_step(experts_by_step, process, span.start, span.end);
        }
      }
    }
    for (const CommunicatorTrack& communicator : process.communicators) {
      for (const CommOp& op : communicator.ops) {
        if (dispatch && op.name == dispatch && op.end > op.start) {
          add_at_step(dispatch_by_step, process, op.start, op.end);
        }
      }
    }
    for (auto& [step, spans] : experts_by_step) {
      auto layers = rows.find({process.rank, step});
      if (layers == rows.end() || layers->second.size() != spans.size()) continue;
      std::sort(spans.begin(), spans.end());
      std::vector<std::pair<TimeNs, double>>& ops = dispatch_by_step[step];
      std::sort(ops.begin(), ops.end());
      const bool dispatch_known = ops.size() == spans.size();
      size_t k = 0;
      for (const auto& [layer, layer_rows] : layers->second) {
        samples.push_back({step, process.rank, layer, layer_rows, spans[k].second,
                           dispatch_known ? ops[k].second : -1.0});
        ++k;
      }
    }
  }
  std::sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return std::tie(a.step, a.rank, a.layer) < std::tie(b.step, b.rank, b.layer);
  });
  return samples;
}

}  // namespace moescope::analysis

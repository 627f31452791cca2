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

struct Timed {
  TimeNs start = 0, end = 0;
  double duration_ms = 0;
  bool operator<(const Timed& other) const { return start < other.start; }
};

// step -> what `process` recorded at each step.
using DurationsByStep = std::map<int64_t, std::vector<Timed>>;

void add_at_step(DurationsByStep& by_step, const ProcessTrack& process, TimeNs start, TimeNs end) {
  const int index = step_at(process, start);
  if (index >= 0) {
    by_step[process.steps[size_t(index)].step].push_back(
        {start, end, double(end - start) * kMsPerNs});
  }
}

}  // namespace

std::vector<LayerForwardSample> layer_forward_samples(const TraceModel& model) {
  std::vector<LayerForwardSample> samples;
  const StringId domain = model.strings.find("moescope");
  const StringId experts = model.strings.find("moe.experts");
  if (!domain || !experts) return samples;
  // The all-to-alls of a layer, forward then backward (names absent from the trace: never met).
  const StringId all_to_alls[] = {
      model.strings.find("a2a.dispatch"), model.strings.find("a2a.combine"),
      model.strings.find("a2a.combine.backward"), model.strings.find("a2a.dispatch.backward")};
  enum { kDispatch, kCombine, kCombineBackward, kDispatchBackward, kAllToAlls };
  // (rank, step) -> the layers with rows that step, ascending, and their rows.
  std::map<std::pair<int32_t, int64_t>, std::map<uint32_t, double>> rows;
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    rows[{entry.rank, entry.step}][entry.layer] += entry.rows;
  }
  for (const ProcessTrack& process : model.processes) {
    DurationsByStep experts_by_step;
    DurationsByStep ops_by_step[kAllToAlls];
    for (const CpuThreadTrack& thread : process.threads) {
      for (const Span& span : thread.spans) {
        if (span.name == experts && span.domain == domain) {
          add_at_step(experts_by_step, process, span.start, span.end);
        }
      }
    }
    for (const CommunicatorTrack& communicator : process.communicators) {
      for (const CommOp& op : communicator.ops) {
        for (int kind = 0; kind < kAllToAlls; ++kind) {
          if (all_to_alls[kind] && op.name == all_to_alls[kind] && op.end > op.start) {
            add_at_step(ops_by_step[kind], process, op.start, op.end);
          }
        }
      }
    }
    for (auto& [step, spans] : experts_by_step) {
      auto layers = rows.find({process.rank, step});
      if (layers == rows.end() || layers->second.size() != spans.size()) continue;
      const size_t count = spans.size();
      std::sort(spans.begin(), spans.end());
      bool all_known = true;
      std::vector<Timed>* ops[kAllToAlls];
      for (int kind = 0; kind < kAllToAlls; ++kind) {
        ops[kind] = &ops_by_step[kind][step];
        std::sort(ops[kind]->begin(), ops[kind]->end());
        all_known = all_known && ops[kind]->size() == count;
      }
      size_t k = 0;
      for (const auto& [layer, layer_rows] : layers->second) {
        LayerForwardSample sample{step, process.rank, layer, layer_rows, spans[k].duration_ms};
        if (ops[kDispatch]->size() == count) sample.dispatch_ms = (*ops[kDispatch])[k].duration_ms;
        if (all_known) {
          const Timed& dispatch = (*ops[kDispatch])[k];
          const Timed& combine = (*ops[kCombine])[k];
          const Timed& combine_back = (*ops[kCombineBackward])[count - 1 - k];
          const Timed& dispatch_back = (*ops[kDispatchBackward])[count - 1 - k];
          const double forward = double(combine.start - dispatch.end) * kMsPerNs;
          const double backward = double(dispatch_back.start - combine_back.end) * kMsPerNs;
          if (forward >= 0 && backward >= 0) sample.between_all_to_alls_ms = forward + backward;
        }
        samples.push_back(sample);
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

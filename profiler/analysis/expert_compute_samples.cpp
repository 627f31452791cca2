// Expert compute per layer forward from the moe.experts spans (expert_compute_samples.h).
#include "moescope/analysis/expert_compute_samples.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {

std::vector<ExpertComputeSample> expert_compute_samples(const TraceModel& model) {
  std::vector<ExpertComputeSample> samples;
  const StringId domain = model.strings.find("moescope");
  const StringId experts = model.strings.find("moe.experts");
  if (!domain || !experts) return samples;
  // (rank, step) -> the layers with rows that step, ascending, and their rows.
  std::map<std::pair<int32_t, int64_t>, std::map<uint32_t, double>> rows;
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    rows[{entry.rank, entry.step}][entry.layer] += entry.rows;
  }
  for (const ProcessTrack& process : model.processes) {
    std::map<int64_t, std::vector<const Span*>> spans_by_step;
    for (const CpuThreadTrack& thread : process.threads) {
      for (const Span& span : thread.spans) {
        if (span.name != experts || span.domain != domain) continue;
        const int index = step_at(process, span.start);
        if (index >= 0) spans_by_step[process.steps[size_t(index)].step].push_back(&span);
      }
    }
    for (auto& [step, spans] : spans_by_step) {
      auto layers = rows.find({process.rank, step});
      if (layers == rows.end() || layers->second.size() != spans.size()) continue;
      std::sort(spans.begin(), spans.end(),
                [](const Span* a, const Span* b) { return a->start < b->start; });
      size_t k = 0;
      for (const auto& [layer, layer_rows] : layers->second) {
        samples.push_back({step, process.rank, layer, layer_rows, spans[k++]->duration() / 1e6});
      }
    }
  }
  std::sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return std::tie(a.step, a.rank, a.layer) < std::tie(b.step, b.rank, b.layer);
  });
  return samples;
}

}  // namespace moescope::analysis

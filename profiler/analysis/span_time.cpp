// Time per step in named spans (definitions in span_time.h).
#include "moescope/analysis/span_time.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {
namespace {

// "ProfilerStep#12" -> "ProfilerStep#": numbered copies of one range compare as one.
std::string without_step_number(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || digits == 0 || name[digits - 1] != '#') return name;
  return name.substr(0, digits);
}

}  // namespace

std::vector<SpanStepTime> span_time_per_step(const TraceModel& model) {
  const std::vector<int64_t> steps = known_steps(model);
  if (steps.empty()) return {};
  auto step_index = [&](int64_t step) {
    return size_t(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
  };
  // Ranks that have each step: the divisor of the mean.
  std::vector<double> ranks_with_step(steps.size(), 0.0);
  for (const ProcessTrack& process : model.processes) {
    for (const StepInterval& step : process.steps) ranks_with_step[step_index(step.step)] += 1.0;
  }
  // (domain, name) per string id pair, resolved once per id.
  std::map<std::pair<StringId, StringId>, size_t> entry_of_ids;
  std::map<std::pair<std::string, std::string>, size_t> entry_of_names;
  std::vector<SpanStepTime> entries;
  auto entry_for = [&](const Span& span) -> SpanStepTime& {
    auto [found, inserted] = entry_of_ids.try_emplace({span.domain, span.name}, 0);
    if (inserted) {
      std::pair<std::string, std::string> key{model.name(span.domain),
                                              without_step_number(model.name(span.name))};
      auto [named, is_new] = entry_of_names.try_emplace(key, entries.size());
      if (is_new) {
        SpanStepTime entry;
        entry.domain = key.first;
        entry.name = key.second;
        entry.steps = steps;
        entry.ms_per_step.assign(steps.size(), 0.0);
        entries.push_back(std::move(entry));
      }
      found->second = named->second;
    }
    return entries[found->second];
  };
  for (const ProcessTrack& process : model.processes) {
    if (process.steps.empty()) continue;
    for (const CpuThreadTrack& thread : process.threads) {
      for (const Span& span : thread.spans) {
        if (span.parent >= 0) {
          const Span& parent = thread.spans[size_t(span.parent)];
          if (parent.name == span.name && parent.domain == span.domain) continue;
        }
        const int at = step_at(process, span.start);
        if (at < 0) continue;
        SpanStepTime& entry = entry_for(span);
        const double ms = double(span.duration()) * 1e-6;
        entry.ms_per_step[step_index(process.steps[size_t(at)].step)] += ms;
        entry.total_ms += ms;
      }
    }
  }
  for (SpanStepTime& entry : entries) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (ranks_with_step[i] > 0) entry.ms_per_step[i] /= ranks_with_step[i];
    }
  }
  std::sort(entries.begin(), entries.end(), [](const SpanStepTime& a, const SpanStepTime& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms
                                    : std::tie(a.domain, a.name) < std::tie(b.domain, b.name);
  });
  return entries;
}

}  // namespace moescope::analysis

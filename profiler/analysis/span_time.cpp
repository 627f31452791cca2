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

std::vector<RankSpanTime> rank_span_time(const TraceModel& model, const ProcessTrack& process) {
  if (process.steps.empty()) return {};
  // (domain, name) per string id pair, resolved once per id; per entry, step -> ms.
  std::map<std::pair<StringId, StringId>, size_t> entry_of_ids;
  std::map<std::pair<std::string, std::string>, size_t> entry_of_names;
  std::vector<std::pair<std::pair<std::string, std::string>, std::map<int64_t, double>>> entries;
  auto entry_for = [&](const Span& span) -> std::map<int64_t, double>& {
    auto [found, inserted] = entry_of_ids.try_emplace({span.domain, span.name}, 0);
    if (inserted) {
      std::pair<std::string, std::string> key{model.name(span.domain),
                                              without_step_number(model.name(span.name))};
      auto [named, is_new] = entry_of_names.try_emplace(key, entries.size());
      if (is_new) entries.push_back({key, {}});
      found->second = named->second;
    }
    return entries[found->second].second;
  };
  for (const CpuThreadTrack& thread : process.threads) {
    for (const Span& span : thread.spans) {
      if (span.parent >= 0) {
        const Span& parent = thread.spans[size_t(span.parent)];
        if (parent.name == span.name && parent.domain == span.domain) continue;
      }
      const int at = step_at(process, span.start);
      if (at < 0) continue;
      entry_for(span)[process.steps[size_t(at)].step] += double(span.duration()) * 1e-6;
    }
  }
  std::vector<RankSpanTime> result;
  for (auto& [key, by_step] : entries) {
    RankSpanTime entry;
    entry.domain = key.first;
    entry.name = key.second;
    for (const auto& [step, ms] : by_step) entry.steps.push_back(step), entry.ms.push_back(ms);
    result.push_back(std::move(entry));
  }
  return result;
}

std::vector<SpanStepTime> span_time_of_ranks(
    const TraceModel& model, const std::vector<const std::vector<RankSpanTime>*>& ranks) {
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
  std::map<std::pair<std::string, std::string>, size_t> entry_of_names;
  std::vector<SpanStepTime> entries;
  for (const std::vector<RankSpanTime>* rank : ranks) {
    if (!rank) continue;
    for (const RankSpanTime& part : *rank) {
      auto [named, is_new] = entry_of_names.try_emplace({part.domain, part.name}, entries.size());
      if (is_new) {
        SpanStepTime entry;
        entry.domain = part.domain;
        entry.name = part.name;
        entry.steps = steps;
        entry.ms_per_step.assign(steps.size(), 0.0);
        entries.push_back(std::move(entry));
      }
      SpanStepTime& entry = entries[named->second];
      for (size_t i = 0; i < part.steps.size() && i < part.ms.size(); ++i) {
        const size_t index = step_index(part.steps[i]);
        if (index >= steps.size() || steps[index] != part.steps[i]) continue;  // not a known step
        entry.ms_per_step[index] += part.ms[i];
        entry.total_ms += part.ms[i];
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

std::vector<SpanStepTime> span_time_per_step(const TraceModel& model) {
  std::vector<std::vector<RankSpanTime>> parts;
  for (const ProcessTrack& process : model.processes)
    parts.push_back(rank_span_time(model, process));
  std::vector<const std::vector<RankSpanTime>*> ranks;
  for (const auto& part : parts) ranks.push_back(&part);
  return span_time_of_ranks(model, ranks);
}

}  // namespace moescope::analysis

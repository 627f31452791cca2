// Step detection (see step_detection.h).
#include "moescope/analysis/step_detection.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "moescope/analysis/run_phases.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

// Latest end of any activity on the process that starts in [from, until); sorted tracks are
// entered by binary search.
TimeNs last_activity_end(const ProcessTrack& process, TimeNs from, TimeNs until) {
  TimeNs last = from;
  auto scan = [&](const auto& items) {
    auto it = std::lower_bound(items.begin(), items.end(), from,
                               [](const auto& item, TimeNs time) { return item.start < time; });
    for (; it != items.end() && it->start < until; ++it) last = std::max(last, it->end);
  };
  for (const auto& thread : process.threads) {
    if (!thread.spans_by_depth.empty()) {
      const auto& top = thread.spans_by_depth[0];
      auto it = std::lower_bound(top.begin(), top.end(), from, [&](uint32_t index, TimeNs time) {
        return thread.spans[index].start < time;
      });
      for (; it != top.end() && thread.spans[*it].start < until; ++it) {
        last = std::max(last, thread.spans[*it].end);
      }
    }
    scan(thread.api_calls);
  }
  for (const auto& stream : process.gpu_streams) scan(stream.ops);
  for (const auto& comm : process.communicators) scan(comm.ops);
  return last;
}

// "ProfilerStep#12" -> ("ProfilerStep#", 12); names without trailing digits -> (name, -1).
std::pair<std::string, int64_t> split_trailing_number(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1]))) --digits;
  if (digits == name.size() || name.size() - digits > 15) return {name, -1};
  return {name.substr(0, digits), std::stoll(name.substr(digits))};
}

// Steps from moescope_step (start) and moescope_step_end markers: a step ends at its own end
// marker, else where the next one starts, else at the process's last activity.
bool steps_from_markers(TraceModel& model) {
  bool any = false;
  for (const auto& process : model.processes) {
    for (const auto& marker : process.step_markers) any |= !marker.is_end;
  }
  if (!any) return false;
  for (auto& process : model.processes) {
    process.steps.clear();
    const auto& markers = process.step_markers;  // sorted by time
    for (size_t i = 0; i < markers.size(); ++i) {
      if (markers[i].is_end) continue;
      StepInterval step;
      step.step = markers[i].step;
      step.start = markers[i].time;
      step.end = -1;
      for (size_t j = i + 1; j < markers.size() && step.end < 0; ++j) {
        if (!markers[j].is_end) {
          step.end = markers[j].time;
        } else if (markers[j].step == step.step) {
          step.end = markers[j].time;
        }
      }
      if (step.end < 0) step.end = last_activity_end(process, step.start, INT64_MAX);
      process.steps.push_back(step);
    }
  }
  return true;
}

// Samples recorded without a step number (step < 0, e.g. `moescope.expert_load(layer, counts)`
// in a program that numbers no steps itself) belong to the step in progress when recorded.
template <typename Sample>
void number_by_time(const TraceModel& model, std::vector<Sample>& samples) {
  for (Sample& sample : samples) {
    if (sample.step >= 0 || sample.process >= model.processes.size()) continue;
    const ProcessTrack& process = model.processes[sample.process];
    int index = step_at(process, sample.time);
    if (index >= 0) sample.step = process.steps[static_cast<size_t>(index)].step;
  }
}

// Every span, at any depth, of `process` whose name `wanted` accepts, sorted by start.
template <typename Wanted>
std::vector<const Span*> spans_named(const TraceModel& model, const ProcessTrack& process,
                                     Wanted wanted) {
  std::vector<const Span*> found;
  for (const auto& thread : process.threads) {
    for (const Span& span : thread.spans) {
      if (wanted(model.name(span.name))) found.push_back(&span);
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Span* a, const Span* b) { return a->start < b->start; });
  return found;
}

// torch.profiler's own steps ("ProfilerStep#12"), numbered as torch numbered them.
bool steps_from_profiler_steps(TraceModel& model) {
  auto is_profiler_step = [](const std::string& name) {
    auto [base, number] = split_trailing_number(name);
    return base == "ProfilerStep#" && number >= 0;
  };
  std::vector<std::vector<const Span*>> per_process;
  bool any = false;
  for (const auto& process : model.processes) {
    per_process.push_back(spans_named(model, process, is_profiler_step));
    any |= !per_process.back().empty();
  }
  if (!any) return false;
  for (size_t p = 0; p < model.processes.size(); ++p) {
    auto& steps = model.processes[p].steps;
    steps.clear();
    for (const Span* span : per_process[p]) {
      steps.push_back(
          {split_trailing_number(model.name(span->name)).second, span->start, span->end});
    }
  }
  return true;
}

// PyTorch names every optimizer step "Optimizer.step#AdamW.step" (also without prof.step()):
// a step ends with each one of the most frequent optimizer, and the next starts there.
bool steps_from_optimizer_steps(TraceModel& model) {
  auto is_optimizer_step = [](const std::string& name) {
    return name.rfind("Optimizer.step#", 0) == 0 && name.size() > 5 &&
           name.compare(name.size() - 5, 5, ".step") == 0;
  };
  std::map<std::string, size_t> occurrences;
  std::vector<std::vector<const Span*>> per_process;
  for (const auto& process : model.processes) {
    per_process.push_back(spans_named(model, process, is_optimizer_step));
    for (const Span* span : per_process.back()) ++occurrences[model.name(span->name)];
  }
  if (occurrences.empty()) return false;
  std::string leader = occurrences.begin()->first;
  for (const auto& [name, count] : occurrences) {
    if (count > occurrences[leader]) leader = name;
  }
  for (size_t p = 0; p < model.processes.size(); ++p) {
    ProcessTrack& process = model.processes[p];
    process.steps.clear();
    TimeNs start = process.begin;
    for (const Span* span : per_process[p]) {
      if (model.name(span->name) != leader) continue;
      process.steps.push_back({static_cast<int64_t>(process.steps.size()), start, span->end});
      start = span->end;
    }
  }
  return true;
}

bool steps_from_repeating_range(TraceModel& model) {
  // Coverage per normalised top-level name, summed over ranks; and the minimum count per rank.
  std::map<std::string, TimeNs> coverage;
  std::map<std::string, size_t> min_count;
  for (const auto& process : model.processes) {
    std::map<std::string, size_t> counts;
    for (const auto& thread : process.threads) {
      if (thread.spans_by_depth.empty()) continue;
      for (uint32_t index : thread.spans_by_depth[0]) {
        const Span& span = thread.spans[index];
        std::string base = split_trailing_number(model.name(span.name)).first;
        if (base.empty()) continue;
        // Saturating: each duration fits an int64, but a hostile file's sum of them may not.
        coverage[base] = trace::saturating_add(coverage[base], span.duration());
        ++counts[base];
      }
    }
    for (const auto& [name, count] : counts) {
      auto found = min_count.find(name);
      min_count[name] = found == min_count.end() ? count : std::min(found->second, count);
    }
  }
  std::string best;
  TimeNs best_coverage = 0;
  for (const auto& [name, total] : coverage) {
    auto found = min_count.find(name);
    if (found == min_count.end() || found->second < 2) continue;
    if (total > best_coverage) best_coverage = total, best = name;
  }
  if (best.empty()) return false;
  for (auto& process : model.processes) {
    process.steps.clear();
    for (const auto& thread : process.threads) {
      if (thread.spans_by_depth.empty()) continue;
      for (uint32_t index : thread.spans_by_depth[0]) {
        const Span& span = thread.spans[index];
        auto [base, number] = split_trailing_number(model.name(span.name));
        if (base != best) continue;
        process.steps.push_back({number, span.start, span.end});
      }
    }
    std::sort(process.steps.begin(), process.steps.end(),
              [](const StepInterval& a, const StepInterval& b) { return a.start < b.start; });
    bool numbered = std::all_of(process.steps.begin(), process.steps.end(),
                                [](const StepInterval& s) { return s.step >= 0; });
    if (!numbered) {
      for (size_t i = 0; i < process.steps.size(); ++i) process.steps[i].step = int64_t(i);
    }
  }
  return true;
}

}  // namespace

void detect_steps(TraceModel& model) {
  if (steps_from_markers(model)) {
    model.step_source = StepSource::kMarkers;
  } else if (steps_from_profiler_steps(model)) {
    model.step_source = StepSource::kProfilerSteps;
  } else if (steps_from_optimizer_steps(model)) {
    model.step_source = StepSource::kOptimizerSteps;
  } else if (is_inference_run(model)) {
    // Forward passes without training (run_phases.h): no step to guess from them.
    for (auto& process : model.processes) process.steps.clear();
    model.step_source = StepSource::kNone;
  } else if (steps_from_repeating_range(model)) {
    model.step_source = StepSource::kRepeatingRange;
  } else {
    model.step_source = StepSource::kNone;
  }
  for_each_sample_array([&](const auto& array) {
    if (array.numbered_by_time) number_by_time(model, model.*array.samples);
  });
}

int step_at(const ProcessTrack& process, TimeNs time) {
  auto after = std::upper_bound(process.steps.begin(), process.steps.end(), time,
                                [](TimeNs t, const StepInterval& s) { return t < s.start; });
  if (after == process.steps.begin()) return -1;
  --after;
  if (time >= after->end) return -1;
  return static_cast<int>(after - process.steps.begin());
}

std::vector<int64_t> known_steps(const TraceModel& model) {
  std::set<int64_t> steps;
  for (const ProcessTrack& process : model.processes) {
    for (const StepInterval& step : process.steps) steps.insert(step.step);
  }
  if (steps.empty()) {
    for (const ExpertLoadSample& sample : model.expert_loads) steps.insert(sample.step);
  }
  return {steps.begin(), steps.end()};
}

TimeWindow step_window(const TraceModel& model, const ProcessTrack& process,
                       const StepRankFilter& filter) {
  TimeWindow window{model.begin, model.end};
  if (filter.covers_every_step()) return window;
  TimeNs first = std::numeric_limits<TimeNs>::max(), last = std::numeric_limits<TimeNs>::min();
  for (const StepInterval& step : process.steps) {
    if (!filter.has_step(step.step)) continue;
    first = std::min(first, step.start);
    last = std::max(last, step.end);
  }
  if (first <= last) window = {first, last};
  return window;
}

}  // namespace moescope::analysis

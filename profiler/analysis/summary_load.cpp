// The report's model from rank summaries (summary_load.h).
#include "moescope/analysis/summary_load.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "file_load.h"
#include "freed_memory.h"
#include "moescope/analysis/clock_alignment.h"
#include "moescope/analysis/rank_summary.h"
#include "other_jobs.h"
#include "rank_numbering.h"
#include "worker_threads.h"

namespace moescope::analysis {
namespace {

uint64_t size_of(const std::string& path) {
  std::error_code error;
  const auto bytes = std::filesystem::file_size(path, error);
  return error ? 0 : uint64_t(bytes);
}

bool exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

// The trace a summary was written beside ("x.moesummary" -> "x.moetrace").
std::string trace_path_for(const std::string& summary_path) {
  const std::string extension = kRankSummaryExtension;
  return summary_path.substr(0, summary_path.size() - extension.size()) + ".moetrace";
}

struct RankInput {
  std::string trace;    // the trace (may not exist when a summary was given)
  std::string summary;  // the summary path
  RankSummary loaded;
  bool ok = false;
  std::string note;  // why the trace was used instead of the summary
  std::vector<LoadError> errors;
};

// The rank's summary, else the summary of its trace made here (not written).
void read_rank(RankInput& input, const LoadOptions& options) {
  std::string why;
  if (exists(input.summary)) {
    std::string error;
    if (!read_rank_summary(input.summary, input.loaded, error)) {
      why = "summary " + input.summary + " unusable (" + error + ")";
    } else if (exists(input.trace) && size_of(input.trace) != input.loaded.trace_bytes) {
      why = "summary " + input.summary + " is stale (its trace changed since)";
    } else {
      input.ok = true;
      return;
    }
  } else {
    why = "no summary " + input.summary;
  }
  if (!exists(input.trace)) {
    input.errors.push_back({input.summary, 0, why + " and no trace " + input.trace, true});
    return;
  }
  input.note = why + ": read " + input.trace;
  LoadOptions single = options;
  single.max_threads = 1;
  single.progress = nullptr;
  TraceModel model = load_traces({input.trace}, single);
  if (model.processes.empty()) {
    input.errors = std::move(model.errors);
    if (input.errors.empty()) input.errors.push_back({input.trace, 0, "nothing readable", true});
    return;
  }
  input.loaded = summarize_process(model, 0, size_of(input.trace));
  input.ok = true;
}

void set_rank(RankFacts& facts, int32_t rank) {
  facts.breakdown.rank = rank;
  facts.breakdown.total.rank = rank;
  for (StepBreakdown& step : facts.breakdown.steps) step.rank = rank;
  facts.phases.rank = rank;
  facts.memory.rank = rank;
}

}  // namespace

bool any_rank_summary(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (is_summary_path(path) || exists(summary_path_for(path))) return true;
  }
  return false;
}

std::vector<std::string> trace_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> traces;
  traces.reserve(paths.size());
  for (const std::string& path : paths) {
    traces.push_back(is_summary_path(path) ? trace_path_for(path) : path);
  }
  return traces;
}

SummaryLoad load_rank_summaries(const std::vector<std::string>& paths, const LoadOptions& options) {
  SummaryLoad result;
  std::vector<RankInput> inputs(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const bool given_summary = is_summary_path(paths[i]);
    inputs[i].trace = given_summary ? trace_path_for(paths[i]) : paths[i];
    inputs[i].summary = given_summary ? paths[i] : summary_path_for(paths[i]);
  }
  const unsigned budget =
      options.max_threads ? options.max_threads : std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = unsigned(std::min<size_t>(budget, inputs.size()));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < inputs.size(); i = next++) {
      if (options.cancel && options.cancel->load()) break;
      try {
        read_rank(inputs[i], options);
      } catch (const std::exception& failure) {
        inputs[i].ok = false;
        inputs[i].errors.push_back(
            {inputs[i].summary, 0, std::string("cannot load: ") + failure.what(), true});
      }
    }
  };
  run_worker_threads(threads, worker);

  std::vector<RankInput*> usable;
  for (RankInput& input : inputs) {
    for (LoadError& error : input.errors) result.model.errors.push_back(std::move(error));
    if (!input.note.empty()) result.notes.push_back(input.note);
    if (input.ok) usable.push_back(&input);
  }
  if (usable.empty()) return result;
  // Summary files of different runs are refused. A rank read from its trace (no usable summary)
  // whose run differs, e.g. a program's Kineto trace given with its .moetrace, is reported
  // with the others from the traces, as without summaries.
  const RankInput* first_summary = nullptr;
  for (RankInput* input : usable) {
    if (!input->note.empty()) continue;
    if (!first_summary) first_summary = input;
    if (input->loaded.run_id != first_summary->loaded.run_id) {
      result.refused = "summaries of different runs: " + first_summary->summary + " is run " +
                       first_summary->loaded.run_id + ", " + input->summary + " is run " +
                       input->loaded.run_id;
      return result;
    }
  }
  // Ranks of another job (other_jobs.h): the traces' loader refuses them, with the same
  // precedence among its checks (a recording given twice, a Kineto trace with .moetrace files).
  std::vector<OfferedRank> offered;
  for (const RankInput* input : usable) {
    offered.push_back(
        offered_rank(input->loaded.process, input->loaded.metadata_rank, input->trace));
  }
  if (const auto other = ranks_of_other_jobs(offered); !other.empty()) {
    result.needs_traces = true;
    result.notes.push_back(usable[other.front().index]->trace +
                           " may be of another run: read from the traces");
    return result;
  }
  // One recording given twice (or by its summary and its trace): the traces' loader refuses it,
  // naming both files. Indexed by what identifies a recording, so that thousands of ranks are
  // checked in linear time.
  std::map<std::tuple<int64_t, std::string, int32_t, TimeNs, TimeNs>, const RankInput*> recordings;
  for (const RankInput* input : usable) {
    const ProcessTrack& process = input->loaded.process;
    if (process.pid <= 0) continue;
    const auto [seen, added] = recordings.try_emplace(
        {process.pid, process.host, input->loaded.metadata_rank, process.begin, process.end},
        input);
    if (!added) {
      result.needs_traces = true;
      result.notes.push_back(seen->second->trace + " and " + input->trace +
                             " are one recording: read from the traces");
      return result;
    }
  }
  for (RankInput* input : usable) {
    if (input->loaded.run_id != usable.front()->loaded.run_id) {
      result.needs_traces = true;
      result.notes.push_back("ranks of different runs (" + usable.front()->loaded.run_id + " and " +
                             input->loaded.run_id + "): reported from the traces");
      return result;
    }
    if (input->loaded.step_source != usable.front()->loaded.step_source) {
      result.needs_traces = true;
      result.notes.push_back("ranks found their steps differently (" +
                             std::string(step_source_name(usable.front()->loaded.step_source)) +
                             " and " + step_source_name(input->loaded.step_source) +
                             "): steps are detected across the full traces");
      return result;
    }
    if (input->loaded.triggers) {
      result.needs_traces = true;
      result.notes.push_back(input->trace + " is a flight-recorder dump: reported from the traces");
      return result;
    }
    if (input->loaded.collectives_open_at_end) {
      result.needs_traces = true;
      result.notes.push_back(input->trace +
                             " ends inside a collective (a hang): reported from the traces");
      return result;
    }
  }
  if (usable.front()->loaded.step_source == StepSource::kRepeatingRange) {
    result.needs_traces = true;
    result.notes.push_back(
        "steps were guessed from a repeating range, a choice made across all ranks: reported "
        "from the traces");
    return result;
  }

  const StepSource step_source = usable.front()->loaded.step_source;
  std::vector<int32_t> stated;
  std::vector<std::string> traces;
  for (const RankInput* input : usable) {
    stated.push_back(input->loaded.metadata_rank);
    traces.push_back(input->trace);
  }
  const RankNumbering numbering = number_ranks(stated, traces);
  if (!numbering.why_by_position.empty()) {
    result.notes.push_back(numbering.file + ": " + numbering.why_by_position);
  }
  const std::vector<int32_t>& ranks = numbering.ranks;
  std::vector<size_t> order(usable.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranks[a] < ranks[b]; });
  TraceModel& model = result.model;
  std::vector<const ModelSampleArrays*> parts;
  for (const RankInput* input : usable) parts.push_back(&input->loaded.samples);
  reserve_sample_arrays(model, parts);
  std::vector<LoadError> file_errors;
  FreedMemoryReturn freed_memory;
  for (size_t i : order) {
    RankSummary& summary = usable[i]->loaded;
    const uint32_t process_index = uint32_t(model.processes.size());
    for (LoadError& error : summary.errors) file_errors.push_back(std::move(error));
    ProcessTrack& process = summary.process;
    process.rank = ranks[i];
    process.file = usable[i]->trace;
    std::vector<StringId> ids;
    for (const std::string& name : summary.names) ids.push_back(model.strings.intern(name));
    for (CommunicatorTrack& comm : process.communicators) {
      comm.max_end.resize(comm.ops.size());
      TimeNs latest = INT64_MIN;
      for (size_t k = 0; k < comm.ops.size(); ++k) {
        comm.ops[k].name = ids[comm.ops[k].name];
        latest = std::max(latest, comm.ops[k].end);
        comm.max_end[k] = latest;
      }
    }
    append_sample_arrays(model, summary.samples, process_index);
    set_rank(summary.facts, ranks[i]);
    result.facts.push_back(std::move(summary.facts));
    model.total_events += process.events;
    model.processes.push_back(std::move(process));
    summary = RankSummary();  // free as soon as merged
    freed_memory.part_freed();
  }
  // The full path lists load errors before the clock alignment's (trace_loader.cpp).
  file_errors.insert(file_errors.end(), model.errors.begin(), model.errors.end());
  model.errors = std::move(file_errors);
  model.step_source = step_source;
  update_model_time_range(model);
  if (options.align_clocks) align_clocks(model);
  for (size_t p = 0; p < model.processes.size(); ++p) {
    shift_rank_facts(result.facts[p], model.processes[p].clock_offset);
  }
  return result;
}

}  // namespace moescope::analysis

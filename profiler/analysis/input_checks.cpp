// Refused inputs (see input_checks.h).
#include "input_checks.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "moescope/trace/time_arithmetic.h"
#include "other_jobs.h"
#include "recording_clock.h"

namespace moescope::analysis {
namespace {

bool is_kineto(const FileLoad& file) {
  return file.opened && file.process.source_format == "kineto";
}

void refuse(FileLoad& file, const std::string& path, std::string message) {
  file.opened = false;
  LoadError error{path, 0, std::move(message)};
  error.refused = true;
  file.errors.push_back(std::move(error));
}

// A JSON file with no trace event in it: an empty array, `[1,2,3]`, moescope's own report.
void refuse_if_no_trace(FileLoad& file) {
  // The importer may already have closed the file (no traceEvents array): still refused here.
  if (file.process.source_format != "kineto" || file.process.events > 0) return;
  const std::string path = file.process.file;
  const std::string what =
      "a torch.profiler trace is a JSON object with a traceEvents array of events with ph, ts "
      "and name; a moescope trace is a .moetrace file";
  if (file.errors.empty()) {
    refuse(file, path, "not a trace (no trace events): " + what);
    return;
  }
  // One error per file: the importer's last word becomes the refusal's reason.
  for (LoadError& error : file.errors) error.refused = true;
  LoadError& last = file.errors.back();
  last.message = "not a trace (" + last.message + "): " + what;
  file.opened = false;
}

// OS thread ids of a process's CPU threads (Kineto: the tids it wrote).
std::set<uint32_t> thread_ids(const ProcessTrack& process) {
  std::set<uint32_t> ids;
  for (const CpuThreadTrack& thread : process.threads) {
    if (thread.os_thread_id) ids.insert(thread.os_thread_id);
  }
  return ids;
}

// A Kineto trace of the process `moetrace` recorded: its threads include that process's main
// thread (tid = pid, how Kineto names a process's threads by OS id).
bool has_main_thread_of(const ProcessTrack& kineto, const ProcessTrack& moetrace) {
  return moetrace.pid > 0 && thread_ids(kineto).count(static_cast<uint32_t>(moetrace.pid)) > 0;
}

// The same process: the Kineto trace has the .moetrace process's main thread, and when both
// clocks are known their wall-clock ranges overlap (pids are reused only after a process ends).
bool same_process(const ProcessTrack& kineto, const ProcessTrack& moetrace) {
  if (!has_main_thread_of(kineto, moetrace)) return false;
  const auto kineto_range = recorded_wall_range(kineto);
  const auto range = recorded_wall_range(moetrace);
  if (!kineto_range || !range) return true;
  const int64_t slack = 1'000'000'000;  // wall clocks read at different moments
  return kineto_range->first < trace::saturating_add(range->second, slack) &&
         range->first < trace::saturating_add(kineto_range->second, slack);
}

// Ranks that the files state and that differ are never one process (containers reuse pids).
bool stated_ranks_differ(const FileLoad& first, const FileLoad& second) {
  return first.metadata_rank >= 0 && second.metadata_rank >= 0 &&
         first.metadata_rank != second.metadata_rank;
}

// [begin, end] on a clock both files of one format share: a .moetrace's own (CLOCK_MONOTONIC,
// one per host), a Kineto trace's wall clock where its base is known.
std::pair<TimeNs, TimeNs> shared_clock_range(const ProcessTrack& process) {
  if (process.source_format == "kineto") {
    if (const auto range = recorded_wall_range(process)) return *range;
  }
  return {process.begin, process.end};
}

// The earlier files that may come from the same process as a file, as far as files tell: a
// .moetrace by pid and host; a Kineto trace (no pid or host in it) by its OS thread ids, unique
// on a host at any one time. Indexed, so that thousands of ranks are checked in linear time.
class ProcessIndex {
 public:
  // Earlier files sharing the file's pid and host, or one of `threads`: each once, in file order.
  std::vector<size_t> candidates(const FileLoad& file, const std::set<uint32_t>& threads) const {
    std::vector<size_t> found;
    if (file.process.source_format == "moetrace") {
      const auto it = by_process_.find({file.process.pid, file.process.host});
      if (it != by_process_.end()) found = it->second;
      return found;
    }
    for (uint32_t thread : threads) {
      const auto it = by_thread_.find(thread);
      if (it != by_thread_.end()) found.insert(found.end(), it->second.begin(), it->second.end());
    }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    return found;
  }

  void add(size_t index, const FileLoad& file, const std::set<uint32_t>& threads) {
    if (file.process.source_format == "moetrace") {
      if (file.process.pid > 0) by_process_[{file.process.pid, file.process.host}].push_back(index);
      return;
    }
    for (uint32_t thread : threads) by_thread_[thread].push_back(index);
  }

 private:
  std::map<std::pair<int64_t, std::string>, std::vector<size_t>> by_process_;
  std::unordered_map<uint32_t, std::vector<size_t>> by_thread_;
};

// Files that are not separate ranks: one recording given twice, or two recordings of one process
// at different times (torch.profiler's cycles, each its own file). Read as ranks, they would be
// compared with each other as if they had run side by side. The later file is refused.
void refuse_repeated_processes(std::vector<FileLoad>& files) {
  ProcessIndex index;
  for (size_t later = 0; later < files.size(); ++later) {
    if (!files[later].opened) continue;
    const ProcessTrack& second = files[later].process;
    const std::set<uint32_t> threads =
        second.source_format == "kineto" ? thread_ids(second) : std::set<uint32_t>{};
    for (size_t earlier : index.candidates(files[later], threads)) {
      if (!files[later].opened) break;
      if (!files[earlier].opened || stated_ranks_differ(files[earlier], files[later])) continue;
      const ProcessTrack& first = files[earlier].process;
      const bool same_recording =
          first.begin == second.begin && first.end == second.end && first.events == second.events;
      const auto [first_begin, first_end] = shared_clock_range(first);
      const auto [second_begin, second_end] = shared_clock_range(second);
      const bool overlapping = first_begin <= second_end && second_begin <= first_end;
      const std::string who = first.source_format == "moetrace"
                                  ? " (pid " + std::to_string(first.pid) +
                                        (first.host.empty() ? "" : " on " + first.host) + ")"
                                  : " (the same threads)";
      if (same_recording || (overlapping && first.source_format == "moetrace")) {
        refuse(files[later], second.file,
               "refused: the same recording as " + first.file + who +
                   ": given twice, it would count as two ranks. Name each trace once");
      } else if (!overlapping) {
        refuse(files[later], second.file,
               "refused: recorded by the same process as " + first.file + who +
                   " at another time (two torch.profiler cycles?): they are not two ranks of "
                   "one job. Report them one at a time");
      }
    }
    if (files[later].opened) index.add(later, files[later], threads);
  }
}

// Files of another job than the first file's (other_jobs.h).
void refuse_other_jobs(std::vector<FileLoad>& files) {
  std::vector<OfferedRank> offered;
  std::vector<size_t> offered_file;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i].opened) continue;
    offered.push_back(
        offered_rank(files[i].process, files[i].metadata_rank, files[i].process.file));
    offered_file.push_back(i);
  }
  for (OtherJobRank& other : ranks_of_other_jobs(offered)) {
    FileLoad& file = files[offered_file[other.index]];
    refuse(file, file.process.file, std::move(other.message));
  }
}

// Kineto traces given with .moetrace files: the same process's own profiler trace, or another
// process's, whose clock cannot be related to theirs. Either way the Kineto trace is refused.
void refuse_kineto_with_moetraces(std::vector<FileLoad>& files) {
  std::vector<const FileLoad*> moetraces;
  for (const FileLoad& file : files) {
    if (file.opened && file.process.source_format == "moetrace") moetraces.push_back(&file);
  }
  if (moetraces.empty()) return;
  for (FileLoad& file : files) {
    if (!is_kineto(file)) continue;
    const std::string path = file.process.file;
    const FileLoad* same = nullptr;
    for (const FileLoad* moetrace : moetraces) {
      if (same_process(file.process, moetrace->process)) {
        same = moetrace;
        break;
      }
    }
    if (same) {
      refuse(file, path,
             "refused: this torch.profiler trace and " + same->process.file +
                 " are one process (pid " + std::to_string(same->process.pid) +
                 (same->process.host.empty() ? "" : " on " + same->process.host) +
                 ", overlapping times); merged they would count its work "
                 "twice as two ranks. Report them one at a time: moescope report " +
                 same->process.file + " (the .moetrace has the steps, phases and expert load)");
    } else {
      refuse(file, path,
             "refused: a torch.profiler trace cannot be combined with .moetrace files of "
             "other processes (its clock cannot be related to theirs, so times would be "
             "compared across unrelated clocks). Report the Kineto trace(s) and the .moetrace "
             "files separately");
    }
  }
}

}  // namespace

void refuse_unusable_inputs(std::vector<FileLoad>& files, bool together) {
  for (FileLoad& file : files) refuse_if_no_trace(file);
  if (!together) return;
  refuse_repeated_processes(files);
  // Before the job checks: a Kineto trace and a .moetrace are never one job's ranks, and the
  // reason given is the specific one.
  refuse_kineto_with_moetraces(files);
  refuse_other_jobs(files);
}

}  // namespace moescope::analysis

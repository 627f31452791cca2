// Loads trace files into a TraceModel: .moetrace files (one per rank) in parallel, and PyTorch
// profiler (Kineto) Chrome JSON (.json, .json.gz). Damage never throws: what was readable is
// loaded and every problem is listed in TraceModel::errors with the file and byte offset.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct LoadProgress {
  size_t files_done = 0;
  size_t files_total = 0;
  uint64_t bytes_done = 0;  // file bytes read so far, all files together
  uint64_t bytes_total = 0;
};

struct LoadOptions {
  // Threads reading files; 0 = hardware concurrency. One file is read by one thread.
  unsigned max_threads = 0;
  // Called from loader threads (serialised by the loader) every few MB and per finished file.
  std::function<void(const LoadProgress&)> progress;
  // Set to true from another thread to stop early; the model then holds what was read.
  const std::atomic<bool>* cancel = nullptr;
  // See clock_alignment.h. Also means the files share one timeline: a Kineto trace given with
  // .moetrace files is then refused (input_checks.h); `info`, which shows each file as
  // written, turns it off.
  bool align_clocks = true;
  bool detect_steps = true;  // see step_detection.h
  // Non-zero: read each .moetrace file only until it gave this many events (whole chunks, so a
  // few more), for a quick first look at the beginning of a large trace (the viewer shows it
  // while the full load runs). Such files are marked ProcessTrack::truncated. Kineto JSON is
  // always read whole.
  uint64_t max_events_per_file = 0;
};

// Loads every file of `paths` (any mix of .moetrace and Kineto JSON) into one model.
// Processes are ordered by rank (from the metadata, else the file's position in `paths`).
TraceModel load_traces(const std::vector<std::string>& paths, const LoadOptions& options = {});

// A progress callback for command-line tools: keeps one line on `out` up to date ("\rloading
// 2/4 files, 37%") for loads of at least `min_bytes` (short loads stay quiet), and ends it with a
// newline when the last file is done. Pass stderr when it is a terminal.
std::function<void(const LoadProgress&)> line_progress(std::FILE* out,
                                                       uint64_t min_bytes = uint64_t{64} << 20);

// True when `path` looks like Chrome/Kineto JSON (by name: .json or .json.gz).
bool is_chrome_json_path(const std::string& path);

}  // namespace moescope::analysis

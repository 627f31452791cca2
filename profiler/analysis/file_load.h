// What one input file becomes before the files are merged into a TraceModel: a process with
// names still in the file's own string ids, plus the model-wide sample arrays of that file.
// Internal to the analysis library.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/trace_model.h"
#include "moescope/trace/trace_reader.h"

namespace moescope::analysis {

// Ids with this bit set name strings the loader made up (kLocalExtraBit | index into extras).
inline constexpr uint32_t kLocalExtraBit = 0x80000000u;

// What the moetrace reader already established while reading, so finalize_process skips the
// passes over the (by then cache-cold) arrays. Empty vectors / false: finalize does it all
// (Kineto files, damaged or unusual traces).
struct ReadTimeIndex {
  // Per thread: spans in start order with parent, depth and spans_by_depth set (plain
  // begin/end pairs with non-decreasing times and no zero-length span), instants and API calls
  // in order.
  std::vector<uint8_t> thread_ready;
  std::vector<uint8_t> gpu_stream_ready;    // per GPU stream: ops in order, max_end built
  std::vector<uint8_t> communicator_ready;  // per communicator: ops in order, max_end built
  std::vector<uint8_t> counter_sorted;      // per counter
  bool launches_linked = false;             // every GpuOp's launch_thread/launch_call is final
  bool have_range = false;  // begin/end below cover every event finalize would cover
  TimeNs begin = 0, end = 0;
  // Largest file string id any event names (0 = none); string ids above it are unused.
  uint32_t max_name = 0;
  // Names the loader made up (kLocalExtraBit) appear only as GpuOp names.
  bool made_up_names_only_on_gpu_ops = false;
};

struct FileLoad : ModelSampleArrays {  // the file's sample arrays (kSampleArrays)
  bool opened = false;                 // false: nothing of the file could be read
  ProcessTrack process;
  int32_t metadata_rank = -1;  // -1 when the metadata has none
  int64_t start_ns = 0;        // metadata: the trace clock at start
  int64_t start_unix_ns = 0;   // metadata: wall clock at start (0 = unknown)

  // Names: the file's ids (moetrace string records) and made-up names (kLocalExtraBit).
  std::unordered_map<uint32_t, std::string> file_strings;
  std::vector<std::string> extra_strings;
  std::unordered_map<std::string, uint32_t> extra_index;
  uint32_t intern_extra(std::string_view text);

  std::vector<FlowArrow> flows;  // process fields are filled in at merge
  std::vector<LoadError> errors;
  ReadTimeIndex read_index;
};

// Called with the bytes of the current file read so far.
using BytesProgress = std::function<void(uint64_t bytes_read, uint64_t file_bytes)>;

struct MoetraceReadOptions {
  const std::atomic<bool>* cancel = nullptr;
  bool pipelined = false;   // decode chunks on a second thread (see chunk_pipeline.h)
  uint64_t max_events = 0;  // non-zero: stop after the chunk that reaches it
};

FileLoad load_moetrace_file(const std::string& path, const BytesProgress& progress,
                            const MoetraceReadOptions& options);
FileLoad load_kineto_file(const std::string& path);
// load_moetrace_file without finalize_process: tracks in read order with read_index filled.
FileLoad read_moetrace_file(const std::string& path, const BytesProgress& progress,
                            const MoetraceReadOptions& options);

// load_moetrace_file of chunks decoded already (in file order), with the file's metadata: the
// part of a growing file that `moescope top` keeps (live_rank_state.h).
FileLoad load_moetrace_chunks(const std::string& path, const std::string& metadata_json,
                              std::span<const trace::Chunk> chunks, bool complete);

// What load_traces does once the files are read: refuses unusable inputs, merges the files
// (consumed) into one model by rank, aligns clocks and detects steps as `options` say.
TraceModel model_of_files(std::vector<FileLoad>& files, const LoadOptions& options);

// Skips decoded records whose values make no sense (times outside +-2^62 ns, a layer id of
// 2^31, an all-to-all split row that does not match its ranks, step numbers going backwards)
// and counts them in file.errors; clears the read_index flags of what it changed, so
// finalize_process rebuilds those tracks (record_validation.cpp).
void validate_decoded_records(FileLoad& file);

// Sorts and indexes the tracks of a freshly read process: span nesting (parent, depth, the
// per-depth index), running max ends, launch links by correlation id, memory usage, the
// process time range. Names of copies are made up through `file`.
void finalize_process(FileLoad& file);

// The model's time range: the union of its processes' (0, 0 without any).
void update_model_time_range(TraceModel& model);

// Adds `offset` to every time of the process (clock alignment).
void shift_process_times(ProcessTrack& process, TimeNs offset);

}  // namespace moescope::analysis

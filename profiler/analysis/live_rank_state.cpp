// One growing trace read a little at a time (live_rank_state.h).
#include "moescope/analysis/live_rank_state.h"

#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "file_load.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/trace/record_kinds.h"
#include "moescope/trace/time_arithmetic.h"
#include "moescope/trace/trace_reader.h"
#include "recording_clock.h"

namespace moescope::analysis {
namespace {

using trace::RecordKind;
using trace::RecordView;

// The latest time a record reaches: its end where it has one, else its time.
TimeNs latest_time_of(const trace::Chunk& chunk) {
  TimeNs latest = INT64_MIN;
  for (RecordView record : chunk) {
    uint64_t time = record.header().time;
    if (trace::has_end_time(record.header().kind) &&
        record.size() >= sizeof(trace::RecordHeader) + sizeof(uint64_t)) {
      uint64_t end = 0;
      std::memcpy(&end, record.data() + sizeof(trace::RecordHeader), sizeof(end));
      time = std::max(time, end);
    }
    latest = std::max(latest, static_cast<TimeNs>(time));
  }
  return latest;
}

int32_t rank_in_metadata(const std::string& json_text) {
  nlohmann::json meta = nlohmann::json::parse(json_text, nullptr, false);
  if (!meta.is_object()) return -1;
  auto found = meta.find("rank");
  return found != meta.end() && found->is_number_integer() ? found->get<int32_t>() : -1;
}

}  // namespace

struct LiveRankState::Window {
  std::vector<trace::Chunk> chunks;  // file order
  std::vector<TimeNs> latest;        // per chunk: latest_time_of
  // Of the chunks let go, per stream: string and thread definitions; spans still open (begin
  // records, innermost last); and ranges still open by id (stream, start record).
  std::map<uint32_t, std::vector<uint8_t>> definitions;
  std::map<uint32_t, std::vector<std::vector<uint8_t>>> open_spans;
  std::map<uint64_t, std::pair<uint32_t, std::vector<uint8_t>>> open_ranges;
  // The window starts at this step (its start time, its number): steps before it are cut.
  int64_t first_step = -1;
  TimeNs first_step_start = INT64_MIN;
  // Steps numbered by their order (a guessed range, optimizer steps) restart in the window: the
  // shift that gives them their number in the whole file.
  int64_t step_shift = 0;
  uint64_t bytes = 0;

  // What the chunks let go leave open or define, in front of the window, per stream.
  std::vector<trace::Chunk> carried() const {
    std::map<uint32_t, trace::Chunk> by_stream;
    auto chunk_of = [&](uint32_t stream) -> std::vector<uint8_t>& {
      trace::Chunk& chunk = by_stream[stream];
      chunk.stream = stream;
      return chunk.records;
    };
    for (const auto& [stream, records] : definitions) {
      auto& out = chunk_of(stream);
      out.insert(out.end(), records.begin(), records.end());
    }
    for (const auto& [stream, stack] : open_spans) {
      auto& out = chunk_of(stream);
      for (const auto& record : stack) out.insert(out.end(), record.begin(), record.end());
    }
    for (const auto& [id, where] : open_ranges) {
      auto& out = chunk_of(where.first);
      out.insert(out.end(), where.second.begin(), where.second.end());
    }
    std::vector<trace::Chunk> chunks_out;
    for (auto& [stream, chunk] : by_stream) chunks_out.push_back(std::move(chunk));
    return chunks_out;
  }

  // Keeps of a chunk let go what the window still needs.
  void carry(const trace::Chunk& chunk) {
    for (RecordView record : chunk) {
      const uint8_t* begin = record.data();
      const uint8_t* end = begin + record.size();
      switch (record.kind()) {
        case RecordKind::kString:
        case RecordKind::kThreadInfo: {
          auto& out = definitions[chunk.stream];
          out.insert(out.end(), begin, end);
          break;
        }
        case RecordKind::kSpanBegin:
          open_spans[chunk.stream].emplace_back(begin, end);
          break;
        case RecordKind::kSpanEnd: {
          auto& stack = open_spans[chunk.stream];
          if (!stack.empty()) stack.pop_back();
          break;
        }
        case RecordKind::kRangeStart:
          open_ranges[record.as<trace::RangeStartRecord>().range_id] = {
              chunk.stream, std::vector<uint8_t>(begin, end)};
          break;
        case RecordKind::kRangeEnd:
          open_ranges.erase(record.as<trace::RangeEndRecord>().range_id);
          break;
        default:
          break;
      }
    }
  }
};

LiveRankState::LiveRankState(std::string path)
    : path_(std::move(path)), window_(std::make_unique<Window>()) {}
LiveRankState::~LiveRankState() = default;

size_t LiveRankState::window_chunks() const {
  return window_->chunks.size();
}
uint64_t LiveRankState::window_bytes() const {
  return window_->bytes;
}

const LiveStep* LiveRankState::last_step() const {
  return steps_.empty() ? nullptr : &steps_.rbegin()->second;
}

const LiveStep* LiveRankState::step(int64_t step) const {
  auto found = steps_.find(step);
  return found == steps_.end() ? nullptr : &found->second;
}

const std::vector<LiveExpertLoad>& LiveRankState::loads(int64_t step) const {
  static const std::vector<LiveExpertLoad> kNone;
  auto found = loads_.find(step);
  return found == loads_.end() ? kNone : found->second;
}

void LiveRankState::start_over() {
  readable_ = complete_ = has_steps_ = false;
  step_source_ = StepSource::kNone;
  metadata_rank_ = -1;
  metadata_json_.clear();
  device_ = inode_ = offset_ = 0;
  steps_finished_ = 0;
  highest_finished_ = keep_from_step_ = -1;
  steps_.clear();
  loads_.clear();
  collectives_.clear();
  window_ = std::make_unique<Window>();
  recording_ = ProcessTrack();
  recording_started_ = false;
  unix_offset_.reset();
  errors_.clear();
}

bool LiveRankState::refresh() {
  counters_.last_refresh_bytes = 0;
  const bool read_any = read_appended();
  // The oldest step still needed: what the run asked for, not more than kMaxKeptSteps back.
  if (highest_finished_ >= 0) {
    let_go_steps_before(
        std::clamp(keep_from_step_, highest_finished_ - kMaxKeptSteps, highest_finished_));
  }
  return read_any;
}

// Reads the whole chunks after offset_ into the window (and loads it when there were any).
bool LiveRankState::read_appended() {
  struct stat info {};
  if (::stat(path_.c_str(), &info) != 0) {
    // Never seen: say why (a path given that does not exist). Gone after it was read: keep
    // what was shown.
    if (!readable_)
      errors_ = {{path_, 0, std::string("cannot open: ") + std::strerror(errno), true}};
    return false;
  }
  // Unchanged since the previous refresh (same file, nothing after the last whole chunk).
  if (readable_ && info.st_ino == inode_ && uint64_t(info.st_dev) == device_ &&
      uint64_t(info.st_size) == offset_) {
    return false;
  }
  trace::TraceReader reader;
  const bool opened = reader.open(path_);
  // Another file now (replaced, truncated, rewritten): read it again from the start.
  if (readable_ && (!opened || reader.file_size() < offset_ || info.st_ino != inode_ ||
                    uint64_t(info.st_dev) != device_ || reader.metadata_json() != metadata_json_)) {
    start_over();
    ++counters_.restarts;
  }
  if (!opened) {
    // Shorter than a header: just created, its header not written yet. Else not a trace.
    errors_.clear();
    if (reader.file_size() >= sizeof(trace::FileHeader)) {
      for (const trace::ReadError& error : reader.errors()) {
        errors_.push_back({path_, error.offset, error.message, true});
      }
    }
    return false;
  }
  if (!readable_) {
    readable_ = true;
    metadata_json_ = reader.metadata_json();
    metadata_rank_ = rank_in_metadata(metadata_json_);
    note_header();
    device_ = uint64_t(info.st_dev);
    inode_ = info.st_ino;
    offset_ = reader.chunks_begin();
  }
  reader.seek_chunk(offset_);
  reader.stop_at_partial_chunk(true);
  bool read_any = false;
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    window_->latest.push_back(latest_time_of(chunk));
    window_->bytes += chunk.records.size();
    window_->chunks.push_back(std::move(chunk));
    chunk = trace::Chunk();
    ++counters_.chunks_read;
    read_any = true;
  }
  for (const trace::ReadError& error : reader.errors()) {
    errors_.push_back({path_, error.offset, error.message});
  }
  counters_.last_refresh_bytes = reader.position() - offset_;
  counters_.bytes_read += counters_.last_refresh_bytes;
  offset_ = reader.position();
  complete_ = complete_ || reader.saw_end();
  if (read_any) load_window();
  return read_any;
}

// Loads the window as one file and takes from it the steps it holds whole; then lets go of
// what comes before the oldest step still needed.
void LiveRankState::load_window() {
  ++counters_.window_loads;
  Window& window = *window_;
  std::vector<trace::Chunk> chunks = window.carried();
  const size_t carried = chunks.size();
  chunks.reserve(carried + window.chunks.size());
  // The loader reads chunks by value; the window's are copied (a few steps' worth).
  chunks.insert(chunks.end(), window.chunks.begin(), window.chunks.end());
  std::vector<FileLoad> files;
  files.push_back(load_moetrace_chunks(path_, metadata_json_, chunks, complete_));
  chunks.clear();
  // Samples recorded with a step number keep it; the others are numbered by the window's steps
  // (step detection), which take the shift below. The merge keeps one file's samples in order.
  std::vector<int64_t> recorded_steps;
  recorded_steps.reserve(files.front().expert_loads.size());
  for (const ExpertLoadSample& sample : files.front().expert_loads) {
    recorded_steps.push_back(sample.step);
  }
  LoadOptions options;
  options.align_clocks = false;  // one file: its own clock
  TraceModel model = model_of_files(files, options);
  if (model.processes.empty()) return;
  const ProcessTrack& process = model.processes.front();
  note_window(process);
  note_collectives(process);
  if (process.steps.empty()) return;
  has_steps_ = true;
  step_source_ = model.step_source;
  // The window's numbering against the file's: the step the window starts at keeps its number.
  for (const StepInterval& interval : process.steps) {
    if (window.first_step >= 0 && interval.start == window.first_step_start) {
      window.step_shift = window.first_step - interval.step;
      break;
    }
  }
  const int64_t shift = window.step_shift;
  RankBreakdown breakdown = compute_rank_breakdown(model, process);
  std::vector<const StepBreakdown*> finished;
  for (const StepBreakdown& step : breakdown.steps) {
    if (step.step >= 0) finished.push_back(&step);
  }
  // While the file is written its last step may still be running.
  if (!finished.empty() && !complete_) finished.pop_back();
  for (const StepBreakdown* step : finished) {
    const int64_t number = step->step + shift;
    if (number < window.first_step) continue;  // cut by the window's start
    steps_[number] = LiveStep{number, step->start, step->step_ms, step->busy_ms(),
                              step->exposed_communication_ms};
    loads_.erase(number);
    if (number > highest_finished_) {
      highest_finished_ = number;
      ++steps_finished_;
    }
  }
  for (size_t i = 0; i < model.expert_loads.size(); ++i) {
    const ExpertLoadSample& sample = model.expert_loads[i];
    const bool recorded = i < recorded_steps.size() && recorded_steps[i] >= 0;
    const int64_t number = recorded ? sample.step : sample.step + shift;
    if (number < window.first_step || steps_.find(number) == steps_.end()) continue;
    LiveExpertLoad load{sample, {}};
    load.sample.step = number;
    auto tokens = model.tokens(sample);
    load.tokens.assign(tokens.begin(), tokens.end());
    loads_[number].push_back(std::move(load));
  }
}

// The recording as far as which run it is of, from the header: the metadata's rank, world
// size, host and clock pair, and its start (start_ns), so that a file whose events are not
// written yet already counts for the newest run.
void LiveRankState::note_header() {
  FileLoad header = load_moetrace_chunks(path_, metadata_json_, {}, false);
  recording_ = std::move(header.process);
  recording_.file = path_;
  recording_.begin = recording_.end = header.start_ns;
  recording_started_ = header.start_ns != 0;
  unix_offset_ = moetrace_unix_offset(recording_);
}

std::optional<std::pair<TimeNs, TimeNs>> LiveRankState::recorded_wall_range() const {
  const std::optional<TimeNs> begin = wall_time(recording_.begin);
  if (!begin) return std::nullopt;
  return std::make_pair(*begin, *wall_time(recording_.end));
}

std::optional<TimeNs> LiveRankState::wall_time(TimeNs file_time) const {
  if (!readable_ || !unix_offset_) return std::nullopt;
  return trace::saturating_add(file_time, *unix_offset_);
}

// Each window moves the recording's end; without a start in the metadata, the first window
// with events (which starts at the file's start) gives it.
void LiveRankState::note_window(const ProcessTrack& window) {
  if (window.events == 0) return;  // definitions only: no time yet
  if (!recording_started_) {
    recording_started_ = true;
    recording_.begin = window.begin;
    recording_.end = window.end;
  }
  recording_.begin = std::min(recording_.begin, window.begin);
  recording_.end = std::max(recording_.end, window.end);
}

// The window's collectives on top of those of earlier windows: a later completion closes an
// open collective; the window's own open one (its latest collective_open not completed in it)
// replaces the one kept.
void LiveRankState::note_collectives(const ProcessTrack& window) {
  for (const CollectiveState& seen : collectives_at_end(window, window.end)) {
    CollectiveState& kept = collectives_[seen.comm_id];
    kept.comm_id = seen.comm_id;
    kept.num_ranks = std::max(kept.num_ranks, seen.num_ranks);
    if (seen.has_completed &&
        (!kept.has_completed || seen.completed_sequence >= kept.completed_sequence)) {
      kept.has_completed = true;
      kept.completed_sequence = seen.completed_sequence;
      kept.completed_kind = seen.completed_kind;
      kept.completed_bytes = seen.completed_bytes;
    }
    if (seen.has_open) {
      kept.has_open = true;
      kept.open_sequence = seen.open_sequence;
      kept.open_kind = seen.open_kind;
      kept.open_bytes = seen.open_bytes;
      kept.open_entered = seen.open_entered;
    }
    if (kept.has_open && kept.has_completed && kept.completed_sequence >= kept.open_sequence) {
      kept.has_open = false;
    }
  }
}

std::vector<CollectiveState> LiveRankState::collectives() const {
  std::vector<CollectiveState> states;
  for (const auto& [comm_id, state] : collectives_) states.push_back(state);
  return states;
}

// Lets go of the steps before `keep` and starts the window at it.
void LiveRankState::let_go_steps_before(int64_t keep) {
  steps_.erase(steps_.begin(), steps_.lower_bound(keep));
  loads_.erase(loads_.begin(), loads_.lower_bound(keep));
  Window& window = *window_;
  auto found = steps_.find(keep);
  if (found == steps_.end() || keep <= window.first_step) return;
  window.first_step = keep;
  window.first_step_start = found->second.start;
  let_go_before(found->second.start);
}

// Lets go of each stream's chunks that end before `keep_from` (in file order per stream),
// carrying what later chunks still refer to.
void LiveRankState::let_go_before(TimeNs keep_from) {
  Window& window = *window_;
  std::map<uint32_t, bool> stream_kept;  // a stream keeps everything after its first kept chunk
  std::vector<trace::Chunk> kept;
  std::vector<TimeNs> kept_latest;
  for (size_t i = 0; i < window.chunks.size(); ++i) {
    trace::Chunk& chunk = window.chunks[i];
    bool& keeps = stream_kept[chunk.stream];
    keeps = keeps || window.latest[i] >= keep_from || chunk.type != trace::ChunkType::kEvents;
    if (keeps) {
      kept.push_back(std::move(chunk));
      kept_latest.push_back(window.latest[i]);
    } else {
      window.carry(chunk);
      window.bytes -= chunk.records.size();
    }
  }
  window.chunks = std::move(kept);
  window.latest = std::move(kept_latest);
}

}  // namespace moescope::analysis

// Growing .moetrace files read a little at a time, for `moescope top`: each refresh decodes only
// the chunks written since the previous one and keeps per rank only what a frame shows, so a
// refresh costs what was appended, not the length of the run.
//
// Per file (LiveRankState), across refreshes:
//   the read offset          where the last whole chunk ended; a partial last chunk (the writer
//                            is still writing it) is retried at the next refresh, not reported
//   the window               decoded chunks from the start of the oldest step still needed (the
//                            latest step every rank finished, LiveRunState) to the end
//   what was let go          of chunks before the window: the string and thread definitions and
//                            the spans and ranges still open, carried in front of the window
//   per finished step kept   step time, busy time, exposed communication (time_breakdown.h of
//                            the window: the same formulas as a full load) and the expert-load
//                            samples (expert_load_analysis.h combines them across ranks)
// On new chunks the window is loaded as one file (trace_loader.h's reader, step detection,
// time breakdown) and the steps it holds are recomputed; the window then starts again at the
// oldest step still needed, so memory stays bounded per rank however long the run. A file that
// shrank, was replaced (another inode) or whose header changed is read again from the start.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moescope/analysis/collective_mismatch.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// One finished step of one rank (time_breakdown.h's StepBreakdown, the parts a frame shows).
struct LiveStep {
  int64_t step = 0;
  TimeNs start = 0;  // on the file's clock
  double step_ms = 0;
  double busy_ms = 0;
  double exposed_communication_ms = 0;
};

// One expert-load sample of a finished step as recorded (scope, layer, rank, num_experts) and
// its tokens per expert [num_experts]. `sample.process` and `sample.offset` are unused.
struct LiveExpertLoad {
  ExpertLoadSample sample;
  std::vector<uint32_t> tokens;
};

struct LiveReadCounters {
  uint64_t bytes_read = 0;          // chunk bytes decoded over every refresh
  uint64_t last_refresh_bytes = 0;  // of the latest refresh (only what was new)
  uint64_t chunks_read = 0;
  uint64_t restarts = 0;      // times the file was read again from the start (replaced, shrank)
  uint64_t window_loads = 0;  // times the window was loaded (refreshes that read a chunk)
};

class LiveRankState {
 public:
  explicit LiveRankState(std::string path);
  ~LiveRankState();
  LiveRankState(const LiveRankState&) = delete;
  LiveRankState& operator=(const LiveRankState&) = delete;

  // Reads what was appended since the previous refresh. True when a new chunk was read.
  bool refresh();
  // Steps before `step` will not be asked for again: the next refresh lets them go and starts
  // the window at `step` (at most kMaxKeptSteps before the last finished step, so a rank far
  // ahead of a stalled one stays bounded too).
  void keep_from_step(int64_t step) { keep_from_step_ = step; }
  static constexpr int64_t kMaxKeptSteps = 16;

  const std::string& path() const { return path_; }
  bool readable() const { return readable_; }  // the header was read
  int32_t metadata_rank() const { return metadata_rank_; }
  bool complete() const { return complete_; }  // the writer closed the file (end chunk)
  bool has_steps() const { return has_steps_; }
  StepSource step_source() const { return step_source_; }
  uint64_t steps_finished() const { return steps_finished_; }
  // The last finished step, or nullptr before the first one finished.
  const LiveStep* last_step() const;
  // A finished step still kept, or nullptr.
  const LiveStep* step(int64_t step) const;
  // The expert-load samples of a finished step still kept (empty when none).
  const std::vector<LiveExpertLoad>& loads(int64_t step) const;
  // The recording as far as which run it is of (other_jobs.h): its metadata (rank, world size,
  // clock pair) and the time range read so far, no events; nullptr before its header is read.
  const ProcessTrack* recording() const { return readable_ ? &recording_ : nullptr; }
  // The recording's [begin, end] in unix ns, from its clock pair (read once); nullopt without.
  std::optional<std::pair<TimeNs, TimeNs>> recorded_wall_range() const;
  // A time on the file's clock (LiveStep::start) in unix ns; nullopt without a clock pair.
  std::optional<TimeNs> wall_time(TimeNs file_time) const;
  // Per communicator seen so far: the last completed collective and the one open (entered,
  // with its collective_open record, and not completed), `open_entered` on the file's clock.
  std::vector<CollectiveState> collectives() const;
  // Damage found in the file (a partial last chunk is not damage).
  const std::vector<LoadError>& errors() const { return errors_; }
  const LiveReadCounters& counters() const { return counters_; }
  size_t window_chunks() const;
  uint64_t window_bytes() const;

 private:
  struct Window;
  bool read_appended();
  void start_over();
  void load_window();
  void note_header();
  void note_window(const ProcessTrack& window);
  void note_collectives(const ProcessTrack& window);
  void let_go_steps_before(int64_t keep);
  void let_go_before(TimeNs keep_from);

  std::string path_;
  bool readable_ = false;
  bool complete_ = false;
  bool has_steps_ = false;
  StepSource step_source_ = StepSource::kNone;
  int32_t metadata_rank_ = -1;
  std::string metadata_json_;
  uint64_t device_ = 0, inode_ = 0;
  uint64_t offset_ = 0;  // where the next chunk starts
  uint64_t steps_finished_ = 0;
  int64_t highest_finished_ = -1;
  int64_t keep_from_step_ = -1;
  std::map<int64_t, LiveStep> steps_;
  std::map<int64_t, std::vector<LiveExpertLoad>> loads_;
  std::map<uint64_t, CollectiveState> collectives_;  // by comm_id
  std::unique_ptr<Window> window_;
  ProcessTrack recording_;
  bool recording_started_ = false;  // recording_.begin is known
  std::optional<TimeNs> unix_offset_;
  std::vector<LoadError> errors_;
  LiveReadCounters counters_;
};

// The growing files of one run. A folder a job writes into again also holds the files of its
// earlier runs: the view follows the newest run, and the files of any other are left out by
// the rules that keep two jobs from being read as one (other_jobs.h), with the newest
// recording as the reference instead of the first file.
class LiveRunState {
 public:
  // Refreshes every file of `paths` (in this order; new ones join, missing ones leave), on up to
  // `threads` threads (0 = hardware concurrency), then tells each which steps are still needed.
  void refresh(const std::vector<std::string>& paths, unsigned threads = 0);

  // The newest run's files, in the order given.
  const std::vector<const LiveRankState*>& files() const { return run_; }
  // The files left out as another run's: each with why ("refused: ..."), in the order given.
  const std::vector<LoadError>& other_runs() const { return other_runs_; }
  // Rank of files()[i]: the metadata's when every file has a distinct one, else i (as
  // load_traces numbers processes).
  std::vector<int32_t> ranks() const;
  // The latest step every file of the run with steps finished; -1 when one has none finished.
  int64_t common_step() const { return common_step_; }
  uint64_t last_refresh_bytes() const;

 private:
  void choose_newest_run();

  std::vector<std::unique_ptr<LiveRankState>> files_;  // every file given, read as it grows
  std::vector<const LiveRankState*> run_;
  std::vector<LoadError> other_runs_;
  int64_t common_step_ = -1;
};

}  // namespace moescope::analysis

// The growing files of one run (live_rank_state.h): refreshed together, sorted from an earlier
// run's, and told which steps a frame still needs.
#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_map>

#include "moescope/analysis/live_rank_state.h"
#include "other_jobs.h"
#include "rank_numbering.h"
#include "worker_threads.h"

namespace moescope::analysis {

void LiveRunState::refresh(const std::vector<std::string>& paths, unsigned threads) {
  std::unordered_map<std::string, std::unique_ptr<LiveRankState>> known;
  for (auto& file : files_) known.emplace(file->path(), std::move(file));
  files_.clear();
  for (const std::string& path : paths) {
    auto found = known.find(path);
    if (found != known.end() && found->second) {
      files_.push_back(std::move(found->second));
    } else if (found == known.end()) {
      files_.push_back(std::make_unique<LiveRankState>(path));
      known.emplace(path, nullptr);  // a path given twice is read once
    }
  }
  const unsigned budget = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < files_.size(); i = next.fetch_add(1)) {
      files_[i]->refresh();
    }
  };
  run_worker_threads(static_cast<unsigned>(std::min<size_t>(budget, files_.size())), worker);
  choose_newest_run();
  // The latest step every file with steps finished.
  common_step_ = -1;
  bool first = true;
  for (const LiveRankState* file : run_) {
    if (!file->has_steps()) continue;
    const LiveStep* last = file->last_step();
    if (!last) {
      common_step_ = -1;
      break;
    }
    common_step_ = first ? last->step : std::min(common_step_, last->step);
    first = false;
  }
  if (common_step_ >= 0) {
    for (const auto& file : files_) file->keep_from_step(common_step_);
  }
}

void LiveRunState::choose_newest_run() {
  // Offered newest recording first, so that it is the reference the others are judged by;
  // recordings that do not say when they were made after them, in the order given.
  std::vector<size_t> candidates;
  std::vector<WallRange> wall(files_.size());
  for (size_t i = 0; i < files_.size(); ++i) {
    if (!files_[i]->recording()) continue;
    candidates.push_back(i);
    wall[i] = files_[i]->recorded_wall_range();
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
    if (wall[a].has_value() != wall[b].has_value()) return wall[a].has_value();
    return wall[a] && wall[a]->first > wall[b]->first;
  });
  std::vector<OfferedRank> offered;
  for (size_t i : candidates) {
    const LiveRankState& file = *files_[i];
    offered.push_back({file.recording(), file.metadata_rank(), file.path(), wall[i]});
  }
  std::vector<std::string> why(files_.size());  // "" for the newest run's files
  for (OtherJobRank& other : ranks_of_other_jobs(offered)) {
    why[candidates[other.index]] = std::move(other.message);
  }
  run_.clear();
  other_runs_.clear();
  for (size_t i = 0; i < files_.size(); ++i) {
    if (why[i].empty()) {
      run_.push_back(files_[i].get());
    } else {
      other_runs_.push_back({files_[i]->path(), 0, std::move(why[i]), true});
    }
  }
}

std::vector<int32_t> LiveRunState::ranks() const {
  std::vector<int32_t> stated;
  std::vector<std::string> paths;
  for (const LiveRankState* file : run_) {
    stated.push_back(file->metadata_rank());
    paths.push_back(file->path());
  }
  return number_ranks(stated, paths).ranks;
}

uint64_t LiveRunState::last_refresh_bytes() const {
  uint64_t bytes = 0;
  for (const auto& file : files_) bytes += file->counters().last_refresh_bytes;
  return bytes;
}

}  // namespace moescope::analysis

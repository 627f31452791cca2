// The growing files of one run (live_rank_state.h): refreshed together, and told which steps a
// frame still needs.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <unordered_map>

#include "moescope/analysis/live_rank_state.h"
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
  // The latest step every file with steps finished.
  common_step_ = -1;
  bool first = true;
  for (const auto& file : files_) {
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

std::vector<int32_t> LiveRunState::ranks() const {
  std::vector<int32_t> ranks;
  std::set<int32_t> seen;
  bool usable = true;
  for (const auto& file : files_) {
    const int32_t rank = file->metadata_rank();
    usable = usable && rank >= 0 && seen.insert(rank).second;
    ranks.push_back(rank);
  }
  if (!usable) {
    for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<int32_t>(i);
  }
  return ranks;
}

uint64_t LiveRunState::last_refresh_bytes() const {
  uint64_t bytes = 0;
  for (const auto& file : files_) bytes += file->counters().last_refresh_bytes;
  return bytes;
}

}  // namespace moescope::analysis

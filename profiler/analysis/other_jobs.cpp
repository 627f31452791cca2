// Files of two jobs are never one run (other_jobs.h).
#include "other_jobs.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "moescope/trace/time_arithmetic.h"
#include "recording_clock.h"

namespace moescope::analysis {
namespace {

// Ranks of one job are recorded together: recordings further apart than this, with none
// between them, are two runs (a folder that torch.profiler wrote into on several days).
constexpr TimeNs kRunGapNs = TimeNs{600} * 1'000'000'000;

const char* const kWhatToDo =
    ". Report each run by itself, or compare two runs with `moescope diff BASE --against NEW`";

// "rank 3 of 128", "rank 3", "world size 128": as far as the file says.
std::string place_in_job(const OfferedRank& rank) {
  std::string place = rank.stated_rank >= 0 ? "rank " + std::to_string(rank.stated_rank) : "";
  if (rank.process->world_size > 0) {
    place += (place.empty() ? "world size " : " of ") + std::to_string(rank.process->world_size);
  }
  return place;
}

// "12 minutes", "5 hours", "400 days": how far apart two recordings are.
std::string duration_in_words(double seconds) {
  char text[48];
  if (seconds >= 2 * 86400.0) {
    std::snprintf(text, sizeof(text), "%.0f days", seconds / 86400.0);
  } else if (seconds >= 2 * 3600.0) {
    std::snprintf(text, sizeof(text), "%.0f hours", seconds / 3600.0);
  } else {
    std::snprintf(text, sizeof(text), "%.0f minutes", seconds / 60.0);
  }
  return text;
}

bool disjoint(const std::pair<TimeNs, TimeNs>& a, const std::pair<TimeNs, TimeNs>& b) {
  return a.second < b.first || b.second < a.first;
}

// Why `rank` is not of the job of the ranks before it ("" when it may be): another world size
// than the first stating one, or a rank stated before (or no rank, as before) at another time.
class JobTally {
 public:
  explicit JobTally(const std::vector<OfferedRank>& offered) : offered_(offered) {}

  std::string why_not_of_the_job(size_t i) {
    const OfferedRank& rank = offered_[i];
    const int32_t world = rank.process->world_size;
    if (world > 0 && sized_ && offered_[*sized_].process->world_size != world) {
      return "refused: " + place_in_job(rank) + " here, " + place_in_job(offered_[*sized_]) +
             " in " + offered_[*sized_].file + ": not one job (the world sizes differ)" + kWhatToDo;
    }
    // Files that state no rank count as one rank: a program that is not distributed runs once
    // per recording, so two of its recordings at different times are two runs.
    const int32_t stated = std::max(rank.stated_rank, -1);
    const auto [first, added] = by_rank_.try_emplace(stated, i);
    const WallRange& earlier = offered_[first->second].wall;
    if (!added && rank.wall && earlier && disjoint(*rank.wall, *earlier)) {
      const std::string& other = offered_[first->second].file;
      if (stated < 0) {
        return "refused: recorded at another time than " + other +
               " (no overlap), and neither states a rank: two runs of a program that is not "
               "distributed" +
               kWhatToDo;
      }
      return "refused: " + place_in_job(rank) + " again (" + other + " is rank " +
             std::to_string(stated) + " too), recorded at another time: two runs" + kWhatToDo;
    }
    if (world > 0 && !sized_) sized_ = i;
    return "";
  }

 private:
  const std::vector<OfferedRank>& offered_;
  std::optional<size_t> sized_;        // the first rank stating its world size
  std::map<int32_t, size_t> by_rank_;  // each stated rank's first process (-1: no rank)
};

}  // namespace

OfferedRank offered_rank(const ProcessTrack& process, int32_t stated_rank, std::string file) {
  return {&process, stated_rank, std::move(file), recorded_wall_range(process)};
}

std::vector<OtherJobRank> ranks_of_other_jobs(const std::vector<OfferedRank>& offered) {
  std::vector<OtherJobRank> refused;
  std::vector<bool> kept(offered.size(), true);
  JobTally tally(offered);
  for (size_t i = 0; i < offered.size(); ++i) {
    std::string why = tally.why_not_of_the_job(i);
    if (why.empty()) continue;
    kept[i] = false;
    refused.push_back({i, std::move(why)});
  }
  // Runs apart in time: the recordings fall into groups with more than kRunGapNs between them;
  // the first rank's group is the run.
  auto wall = [&](size_t i) -> const WallRange& { return offered[i].wall; };
  std::vector<size_t> timed;
  for (size_t i = 0; i < offered.size(); ++i) {
    if (kept[i] && wall(i)) timed.push_back(i);
  }
  if (timed.size() < 2) return refused;
  const size_t reference = timed.front();
  std::sort(timed.begin(), timed.end(), [&](size_t a, size_t b) { return wall(a) < wall(b); });
  std::vector<size_t> group(offered.size(), 0);
  TimeNs reach = wall(timed.front())->second;
  for (size_t k = 1; k < timed.size(); ++k) {
    const auto [begin, end] = *wall(timed[k]);
    group[timed[k]] =
        group[timed[k - 1]] + (begin > trace::saturating_add(reach, kRunGapNs) ? 1 : 0);
    reach = std::max(reach, end);
  }
  for (size_t i : timed) {
    if (group[i] == group[reference]) continue;
    // Saturating: hostile clock pairs at the int64 limits must not overflow.
    const double apart_s =
        double(std::max(trace::saturating_sub(wall(i)->first, wall(reference)->second),
                        trace::saturating_sub(wall(reference)->first, wall(i)->second))) /
        1e9;
    refused.push_back({i, "refused: recorded " + duration_in_words(apart_s) + " apart from " +
                              offered[reference].file +
                              " (the ranks of one run are recorded together): another run, or "
                              "another moment of this one" +
                              kWhatToDo});
  }
  std::sort(refused.begin(), refused.end(),
            [](const OtherJobRank& a, const OtherJobRank& b) { return a.index < b.index; });
  return refused;
}

}  // namespace moescope::analysis

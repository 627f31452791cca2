// The per-rank expert-load views of the report (report.h: expert_load_by_rank).
#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "moescope/analysis/report.h"

namespace moescope::analysis {

// Each rank's expert load (ranks with expert-load samples, ascending), each from a model that
// holds only that rank's samples (every sample array, in model order): the per-rank analyses
// then cost O(samples) in all, not O(ranks x samples), and run on every core.
std::vector<RankExpertLoad> expert_load_by_rank(const TraceModel& model) {
  std::map<int32_t, size_t> slot_of;
  for (const ExpertLoadSample& sample : model.expert_loads) slot_of.emplace(sample.rank, 0);
  std::vector<int32_t> rank_of;
  for (auto& [rank, slot] : slot_of) slot = rank_of.size(), rank_of.push_back(rank);
  // indices[array][slot]: the rank's samples in each array, in model order.
  std::vector<std::vector<std::vector<uint32_t>>> indices;
  for_each_sample_array([&](const auto& array) {
    std::vector<std::vector<uint32_t>> by_slot(rank_of.size());
    const auto& samples = model.*array.samples;
    for (size_t i = 0; i < samples.size(); ++i) {
      auto found = slot_of.find(samples[i].rank);
      if (found != slot_of.end()) by_slot[found->second].push_back(uint32_t(i));
    }
    indices.push_back(std::move(by_slot));
  });
  std::vector<RankExpertLoad> result(rank_of.size());
  auto analyse = [&](size_t slot) {
    TraceModel one;
    size_t array_index = 0;
    for_each_sample_array([&](const auto& array) {
      using Array = std::decay_t<decltype(array)>;
      const auto& samples = model.*array.samples;
      auto& kept = one.*array.samples;
      for (uint32_t i : indices[array_index][slot]) {
        auto sample = samples[i];
        if constexpr (Array::kHasTail) {
          auto& tail = one.*array.tail;
          const auto& source = model.*array.tail;
          const auto first = source.begin() + sample.offset;
          sample.offset = uint32_t(tail.size());
          tail.insert(tail.end(), first, first + sample.num_experts);
        }
        kept.push_back(sample);
      }
      ++array_index;
    });
    const StepRankFilter one_rank{-1, -1, rank_of[slot]};
    result[slot] = {rank_of[slot], expert_load_matrix(one, one_rank),
                    analyze_expert_load(one, one_rank)};
  };
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t slot = next++; slot < rank_of.size(); slot = next++) analyse(slot);
  };
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), rank_of.size() / 64 + 1);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& thread : pool) thread.join();
  return result;
}

}  // namespace moescope::analysis

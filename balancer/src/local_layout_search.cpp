// Local search over replica layouts. Moves, all keeping every GPU's slot count:
// - swap: a replica on the heaviest GPU trades places with a replica of another expert on
//   another GPU;
// - re-replication: one slot changes expert. Expert a (with at least two replicas) gives up the
//   slot, expert b takes it: a's other replicas get heavier, b's lighter. Tried where it can
//   lower the heaviest GPU: b is on it, or the slot is on it.
// Steepest descent on (largest GPU load, sum of squared GPU loads): the second term lets the
// search make progress when several GPUs share the maximum, and both never increase together,
// so a descent cannot cycle. At a local optimum a seeded random move (a kick) restarts the
// descent; the best layout visited is kept. Every candidate move evaluated counts against the
// budget, so the effort, and the result, do not depend on the machine.
#include <algorithm>
#include <numeric>
#include <random>

#include "balanced_packing.h"
#include "layout_search.h"

namespace moescope::balancer {

namespace {

struct SlotRef {
  int32_t gpu;
  int32_t position;
};

// A move and its outcome.
struct Move {
  enum class Kind { kNone, kSwap, kReplicate };
  Kind kind = Kind::kNone;
  SlotRef first{};          // swap: slot on the heaviest GPU; re-replication: the slot that changes
  SlotRef second{};         // swap: the other slot
  int32_t new_expert = -1;  // re-replication: the expert that takes the slot
  double max_load = 0.0;
  double sum_of_squares = 0.0;
};

class LocalSearch : LayoutSearchProblem {
 public:
  LocalSearch(std::span<const double> loads, const ReplicaLayout& start,
              const LocalSearchOptions& options)
      : LayoutSearchProblem(loads, start), options_(options), random_(options.seed) {
    delta_.assign(static_cast<size_t>(num_gpus_), 0.0);
    touched_stamp_.assign(static_cast<size_t>(num_gpus_), 0);
    load_state(start);
    best_ = start;
    best_max_ = max_load();
    best_sum_of_squares_ = sum_of_squares_;
  }

  LayoutSearchResult run(ReplicaLayout& layout) {
    LayoutSearchResult result;
    const double start_max = best_max_;
    int kicks_without_gain = 0;
    while (evaluations_ < options_.evaluation_budget && best_max_ > options_.stop_at_max_load) {
      const Move move = best_move();
      const bool improves =
          move.kind != Move::Kind::kNone &&
          (move.max_load < max_load() - tolerance_ ||
           (move.max_load <= max_load() && move.sum_of_squares < sum_of_squares_ * (1 - 1e-12)));
      if (improves) {
        apply(move);
        if (remember_if_best()) kicks_without_gain = 0;
        continue;
      }
      // A local optimum: go back to the best layout seen and kick it somewhere else.
      if (max_load() > best_max_ || sum_of_squares_ > best_sum_of_squares_) load_state(best_);
      if (++kicks_without_gain > kKicksWithoutGain || !kick()) break;
    }
    result.work = evaluations_;
    if (best_max_ < start_max - tolerance_) {
      layout = best_;
      result.improved = true;
    }
    return result;
  }

 private:
  double weight(int32_t expert) const {
    return loads_[static_cast<size_t>(expert)] / counts_[static_cast<size_t>(expert)];
  }
  double max_load() const { return gpu_load_[static_cast<size_t>(by_load_[0])]; }

  void load_state(const ReplicaLayout& layout) {
    counts_ = layout.replica_count;
    experts_of_gpu_ = layout.experts_of_gpu;
    replicas_of_.assign(static_cast<size_t>(num_experts_), {});
    for (int32_t gpu = 0; gpu < num_gpus_; ++gpu) {
      const auto& experts = experts_of_gpu_[static_cast<size_t>(gpu)];
      for (size_t position = 0; position < experts.size(); ++position) {
        replicas_of_[static_cast<size_t>(experts[position])].push_back(
            {gpu, static_cast<int32_t>(position)});
      }
    }
    gpu_load_.assign(static_cast<size_t>(num_gpus_), 0.0);
    for (int32_t gpu = 0; gpu < num_gpus_; ++gpu) recompute_gpu(gpu);
    reorder();
  }

  void recompute_gpu(int32_t gpu) {
    double load = 0.0;
    for (int32_t expert : experts_of_gpu_[static_cast<size_t>(gpu)]) load += weight(expert);
    gpu_load_[static_cast<size_t>(gpu)] = load;
  }

  // GPUs heaviest first, and the sum of squares, after a change.
  void reorder() {
    by_load_ = heaviest_first(gpu_load_);
    sum_of_squares_ = 0.0;
    for (double load : gpu_load_) sum_of_squares_ += load * load;
  }

  // Keeps the current layout if it is the best so far; true if it is strictly better in max.
  bool remember_if_best() {
    const bool lower_max = max_load() < best_max_ - tolerance_;
    if (lower_max || (max_load() <= best_max_ && sum_of_squares_ < best_sum_of_squares_)) {
      best_.replica_count = counts_;
      best_.experts_of_gpu = experts_of_gpu_;
      best_max_ = max_load();
      best_sum_of_squares_ = sum_of_squares_;
    }
    return lower_max;
  }

  // The heaviest GPU not marked as touched by the move being evaluated.
  double max_untouched() const {
    for (int32_t gpu : by_load_) {
      if (touched_stamp_[static_cast<size_t>(gpu)] != stamp_) {
        return gpu_load_[static_cast<size_t>(gpu)];
      }
    }
    return 0.0;
  }

  void touch(int32_t gpu, double change) {
    const size_t g = static_cast<size_t>(gpu);
    if (touched_stamp_[g] != stamp_) {
      touched_stamp_[g] = stamp_;
      delta_[g] = 0.0;
      touched_.push_back(gpu);
    }
    delta_[g] += change;
  }

  // Largest load and sum of squares once the touched GPUs change by delta_.
  void finish_evaluation(Move& move) {
    double max_load = max_untouched();
    double sum_of_squares = sum_of_squares_;
    for (int32_t gpu : touched_) {
      const double before = gpu_load_[static_cast<size_t>(gpu)];
      const double after = before + delta_[static_cast<size_t>(gpu)];
      max_load = std::max(max_load, after);
      sum_of_squares += after * after - before * before;
    }
    move.max_load = max_load;
    move.sum_of_squares = sum_of_squares;
    ++evaluations_;
  }

  void begin_evaluation() {
    ++stamp_;
    touched_.clear();
  }

  static bool better(const Move& a, const Move& b) {
    if (b.kind == Move::Kind::kNone) return true;
    if (a.max_load != b.max_load) return a.max_load < b.max_load;
    return a.sum_of_squares < b.sum_of_squares;
  }

  Move evaluate_swap(SlotRef heavy, SlotRef other) {
    Move move{Move::Kind::kSwap, heavy, other, -1, 0.0, 0.0};
    const int32_t x = experts_of_gpu_[static_cast<size_t>(heavy.gpu)][heavy.position];
    const int32_t y = experts_of_gpu_[static_cast<size_t>(other.gpu)][other.position];
    const double d = weight(x) - weight(y);
    begin_evaluation();
    touch(heavy.gpu, -d);
    touch(other.gpu, d);
    finish_evaluation(move);
    return move;
  }

  Move evaluate_replicate(SlotRef slot, int32_t new_expert) {
    Move move{Move::Kind::kReplicate, slot, {}, new_expert, 0.0, 0.0};
    const int32_t old_expert = experts_of_gpu_[static_cast<size_t>(slot.gpu)][slot.position];
    const double old_weight = weight(old_expert);
    const double old_weight_after =
        loads_[static_cast<size_t>(old_expert)] / (counts_[static_cast<size_t>(old_expert)] - 1);
    const double new_weight = weight(new_expert);
    const double new_weight_after =
        loads_[static_cast<size_t>(new_expert)] / (counts_[static_cast<size_t>(new_expert)] + 1);
    begin_evaluation();
    for (const SlotRef& replica : replicas_of_[static_cast<size_t>(old_expert)]) {
      const bool leaving = replica.gpu == slot.gpu && replica.position == slot.position;
      touch(replica.gpu, leaving ? -old_weight : old_weight_after - old_weight);
    }
    for (const SlotRef& replica : replicas_of_[static_cast<size_t>(new_expert)]) {
      touch(replica.gpu, new_weight_after - new_weight);
    }
    touch(slot.gpu, new_weight_after);
    finish_evaluation(move);
    return move;
  }

  // The best move that involves the heaviest GPU. Candidates that cannot lower it are skipped
  // before evaluation: swaps other than the best-sized ones per GPU, slots taken from a GPU that
  // would end at or above it, slots handed to an expert whose replicas stay heavy.
  Move best_move() {
    Move best;
    const int32_t heavy = by_load_[0];
    const double heavy_load = max_load();
    const auto& heavy_experts = experts_of_gpu_[static_cast<size_t>(heavy)];
    sort_slots_by_weight();
    // Experts that would add the least to a slot they take: the lightest after one more replica.
    light_after_one_more_.resize(static_cast<size_t>(num_experts_));
    std::iota(light_after_one_more_.begin(), light_after_one_more_.end(), 0);
    const size_t light_count =
        std::min(light_after_one_more_.size(), static_cast<size_t>(kLightExperts));
    auto weight_after_one_more = [&](int32_t e) {
      return loads_[static_cast<size_t>(e)] / (counts_[static_cast<size_t>(e)] + 1);
    };
    std::partial_sort(light_after_one_more_.begin(), light_after_one_more_.begin() + light_count,
                      light_after_one_more_.end(), [&](int32_t a, int32_t b) {
                        const double wa = weight_after_one_more(a), wb = weight_after_one_more(b);
                        return wa != wb ? wa < wb : a < b;
                      });
    light_after_one_more_.resize(light_count);

    for (int32_t i = 0; i < slots_per_gpu_; ++i) {
      const int32_t x = heavy_experts[static_cast<size_t>(i)];
      const double wx = weight(x);
      // Swaps: x goes to another GPU, which sends back the replica closest to the ideal
      // wx - gap / 2 (an even split of the pair); only 0 < wx - wy < gap lowers the maximum.
      for (int32_t gpu = 0; gpu < num_gpus_; ++gpu) {
        if (gpu == heavy) continue;
        const double gap = heavy_load - gpu_load_[static_cast<size_t>(gpu)];
        const auto& sorted = slots_by_weight_[static_cast<size_t>(gpu)];
        const auto& experts = experts_of_gpu_[static_cast<size_t>(gpu)];
        auto slot_weight = [&](int32_t position) {
          return weight(experts[static_cast<size_t>(position)]);
        };
        const auto ideal = std::lower_bound(
            sorted.begin(), sorted.end(), wx - gap / 2,
            [&](int32_t position, double value) { return slot_weight(position) < value; });
        for (auto it : {ideal - 1, ideal}) {
          if (it < sorted.begin() || it >= sorted.end()) continue;
          const double d = wx - slot_weight(*it);
          if (d <= 0.0 || d >= gap) continue;
          const Move move = evaluate_swap({heavy, i}, {gpu, *it});
          if (better(move, best)) best = move;
        }
      }
      const bool first_of_expert = std::find(heavy_experts.begin(), heavy_experts.begin() + i, x) ==
                                   heavy_experts.begin() + i;
      if (!first_of_expert) continue;
      // x gains a replica, in a slot some expert a with a spare replica gives up.
      const double x_after = weight_after_one_more(x);
      for (int32_t a = 0; a < num_experts_; ++a) {
        if (a == x || counts_[static_cast<size_t>(a)] < 2) continue;
        const auto& replicas = replicas_of_[static_cast<size_t>(a)];
        for (size_t r = 0; r < replicas.size(); ++r) {
          const int32_t gpu = replicas[r].gpu;
          if (gpu != heavy &&
              gpu_load_[static_cast<size_t>(gpu)] - weight(a) + x_after >= heavy_load) {
            continue;
          }
          bool first_on_gpu = true;
          for (size_t s = 0; s < r && first_on_gpu; ++s) first_on_gpu = replicas[s].gpu != gpu;
          if (!first_on_gpu) continue;
          const Move move = evaluate_replicate(replicas[r], x);
          if (better(move, best)) best = move;
        }
      }
      // x gives up this slot (it keeps a replica elsewhere) to a light expert or one on this GPU.
      if (counts_[static_cast<size_t>(x)] >= 2) {
        auto try_taker = [&](int32_t b) {
          if (b == x) return;
          const Move move = evaluate_replicate({heavy, i}, b);
          if (better(move, best)) best = move;
        };
        for (int32_t b : light_after_one_more_) try_taker(b);
        for (int32_t j = 0; j < slots_per_gpu_; ++j) {
          const int32_t b = heavy_experts[static_cast<size_t>(j)];
          const bool listed = std::find(light_after_one_more_.begin(), light_after_one_more_.end(),
                                        b) != light_after_one_more_.end();
          if (!listed && std::find(heavy_experts.begin(), heavy_experts.begin() + j, b) ==
                             heavy_experts.begin() + j) {
            try_taker(b);
          }
        }
      }
    }
    return best;
  }

  // slots_by_weight_[g]: GPU g's slot positions, lightest replica first.
  void sort_slots_by_weight() {
    slots_by_weight_.resize(static_cast<size_t>(num_gpus_));
    for (int32_t gpu = 0; gpu < num_gpus_; ++gpu) {
      auto& sorted = slots_by_weight_[static_cast<size_t>(gpu)];
      const auto& experts = experts_of_gpu_[static_cast<size_t>(gpu)];
      sorted.resize(experts.size());
      std::iota(sorted.begin(), sorted.end(), 0);
      std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) {
        return weight(experts[static_cast<size_t>(a)]) < weight(experts[static_cast<size_t>(b)]);
      });
    }
  }

  void apply(const Move& move) {
    if (move.kind == Move::Kind::kSwap) {
      int32_t& x = experts_of_gpu_[static_cast<size_t>(move.first.gpu)][move.first.position];
      int32_t& y = experts_of_gpu_[static_cast<size_t>(move.second.gpu)][move.second.position];
      for (SlotRef& replica : replicas_of_[static_cast<size_t>(x)]) {
        if (replica.gpu == move.first.gpu && replica.position == move.first.position) {
          replica = move.second;
          break;
        }
      }
      for (SlotRef& replica : replicas_of_[static_cast<size_t>(y)]) {
        if (replica.gpu == move.second.gpu && replica.position == move.second.position) {
          replica = move.first;
          break;
        }
      }
      std::swap(x, y);
      recompute_gpu(move.first.gpu);
      recompute_gpu(move.second.gpu);
    } else {
      int32_t& slot = experts_of_gpu_[static_cast<size_t>(move.first.gpu)][move.first.position];
      const int32_t old_expert = slot;
      auto& old_replicas = replicas_of_[static_cast<size_t>(old_expert)];
      std::erase_if(old_replicas, [&](const SlotRef& replica) {
        return replica.gpu == move.first.gpu && replica.position == move.first.position;
      });
      --counts_[static_cast<size_t>(old_expert)];
      slot = move.new_expert;
      replicas_of_[static_cast<size_t>(move.new_expert)].push_back(move.first);
      ++counts_[static_cast<size_t>(move.new_expert)];
      // Every GPU holding either expert changes.
      for (const SlotRef& replica : old_replicas) recompute_gpu(replica.gpu);
      for (const SlotRef& replica : replicas_of_[static_cast<size_t>(move.new_expert)]) {
        recompute_gpu(replica.gpu);
      }
      recompute_gpu(move.first.gpu);
    }
    reorder();
  }

  // A random move on the heaviest GPU: a swap with a random slot elsewhere, or a random expert
  // of it gaining a replica from a random expert with a spare one. False when none exists.
  bool kick() {
    const int32_t heavy = by_load_[0];
    std::uniform_int_distribution<int32_t> position(0, slots_per_gpu_ - 1);
    std::uniform_int_distribution<int32_t> other_gpu(0, num_gpus_ - 2);
    std::vector<int32_t> spare;
    for (int32_t a = 0; a < num_experts_; ++a) {
      if (counts_[static_cast<size_t>(a)] >= 2) spare.push_back(a);
    }
    for (int attempt = 0; attempt < 8; ++attempt) {
      const SlotRef heavy_slot{heavy, position(random_)};
      const int32_t x = experts_of_gpu_[static_cast<size_t>(heavy)][heavy_slot.position];
      if (spare.empty() || std::bernoulli_distribution(0.5)(random_)) {
        if (num_gpus_ < 2) return false;
        int32_t gpu = other_gpu(random_);
        if (gpu >= heavy) ++gpu;
        const SlotRef other{gpu, position(random_)};
        if (experts_of_gpu_[static_cast<size_t>(gpu)][other.position] == x) continue;
        apply(evaluate_swap(heavy_slot, other));
        return true;
      }
      const int32_t a = spare[std::uniform_int_distribution<size_t>(0, spare.size() - 1)(random_)];
      if (a == x) continue;
      const auto& replicas = replicas_of_[static_cast<size_t>(a)];
      const SlotRef slot =
          replicas[std::uniform_int_distribution<size_t>(0, replicas.size() - 1)(random_)];
      apply(evaluate_replicate(slot, x));
      return true;
    }
    return false;
  }

  // How many of the lightest takers a slot on the heaviest GPU is offered to.
  static constexpr int kLightExperts = 8;
  // The search ends after this many kicks in a row that found nothing better.
  static constexpr int kKicksWithoutGain = 16;

  LocalSearchOptions options_;
  std::mt19937_64 random_;
  int64_t evaluations_ = 0;

  std::vector<int32_t> counts_;                       // [num_experts]
  std::vector<std::vector<int32_t>> experts_of_gpu_;  // [num_gpus][slots_per_gpu]
  std::vector<std::vector<SlotRef>> replicas_of_;     // [num_experts] -> its slots
  std::vector<double> gpu_load_;                      // [num_gpus]
  std::vector<int32_t> by_load_;                      // GPUs, heaviest first
  double sum_of_squares_ = 0.0;

  // Scratch for evaluating a move: load changes of the GPUs it touches.
  std::vector<double> delta_;
  std::vector<uint32_t> touched_stamp_;
  std::vector<int32_t> touched_;
  uint32_t stamp_ = 0;
  std::vector<std::vector<int32_t>> slots_by_weight_;  // [num_gpus], positions, lightest first
  std::vector<int32_t> light_after_one_more_;

  ReplicaLayout best_;
  double best_max_ = 0.0;
  double best_sum_of_squares_ = 0.0;
};

}  // namespace

LayoutSearchResult local_layout_search(std::span<const double> loads, ReplicaLayout& layout,
                                       const LocalSearchOptions& options) {
  if (layout.experts_of_gpu.size() <= 1) return LayoutSearchResult{false, true, 0};
  LocalSearch search(loads, layout, options);
  return search.run(layout);
}

}  // namespace moescope::balancer

// Routing record and replay, for debugging: record which experts every token chose, per step and
// layer, then replay those choices with the router's selection bypassed so a step (or the step
// where two runs diverge) reproduces exactly. The router still computes its scores in replay,
// so the combine weights and the gate's gradients stay live.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace moescope::runtime {

class RoutingReplay {
 public:
  enum class Mode { kOff, kRecord, kReplay };

  void set_mode(Mode mode) { mode_ = mode; }
  Mode mode() const { return mode_; }

  /// Selects the step whose choices record()/replay() use.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  /// Stores top_k_indices [T, K] int64 of `layer` at the current step (a host copy).
  void record(int64_t layer, const at::Tensor& top_k_indices);

  /// The recorded choices of `layer` at the current step; a c10::Error names the step and
  /// layer when there is none.
  at::Tensor replay(int64_t layer) const;

  bool contains(int64_t step, int64_t layer) const;
  size_t size() const;
  void clear();

  /// Writes / reads every recorded step and layer (torch serialization archive).
  void save(const std::string& path) const;
  void load(const std::string& path);

 private:
  Mode mode_ = Mode::kOff;
  int64_t step_ = 0;
  mutable std::mutex mutex_;
  std::map<std::pair<int64_t, int64_t>, at::Tensor> choices_;  // (step, layer) -> [T, K]
};

}  // namespace moescope::runtime

// What a panel's aggregates were computed for: the trace, and the selection they depend on
// (step range, rank, process). A panel recomputes only when either changes, not every frame.
#pragma once

#include <optional>
#include <variant>

#include "moescope/viewer/loaded_trace.h"

namespace moescope::viewer {

template <typename Selection = std::monostate>
class ComputedFor {
 public:
  // True when `trace` or `selection` differ from the last call's (or on the first call); the
  // caller recomputes then. Remembers both.
  bool changes_to(const LoadedTrace& trace, const Selection& selection = {}) {
    if (trace_ == &trace && selection_ == selection) return false;
    trace_ = &trace;
    selection_ = selection;
    return true;
  }

 private:
  const LoadedTrace* trace_ = nullptr;
  std::optional<Selection> selection_;  // empty: nothing computed yet
};

}  // namespace moescope::viewer

#include "moescope/trace/rebalance_reason.h"

namespace moescope::trace {

const char* rebalance_reason_text(uint32_t reason) {
  switch (reason) {  // moescope_rebalance_reason
    case 1:
      return "the net gain pays";
    case 2:
      return "the costs exceed the gain";
    case 3:
      return "the net gain is within its uncertainty";
    case 4:
      return "balanced enough, not planned";
    case 5:
      return "the plan is the current placement";
    case 6:
      return "the imbalance rule applied it";
    case 7:
      return "the imbalance rule kept the placement";
    default:
      return "reason not recorded";
  }
}

}  // namespace moescope::trace

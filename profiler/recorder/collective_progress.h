// Which collective each communicator of this process last entered and last completed: what a
// flight-recorder dump says about a hang ("rank 1 waits in all_reduce #5 of comm X; rank 0
// never entered it"). A collective is written to the trace only once it completed, so the one a
// rank is stuck in is known only from here: moescope_comm_op_enter() reports it when issued,
// moescope_comm_op() when done. Every recording keeps it: the flush thread writes a
// `collective_open` record for a collective still open kCollectiveOpenRecordNs after it was
// entered, which is how `moescope top` and `report` name what a hung job waits in. With several
// collectives in flight on one communicator (FSDP prefetching its all-gathers), the one that
// blocks is the earliest still open: a communicator runs its collectives in order.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::recorder {

// How long a collective stays open before its collective_open record is written: longer than
// any healthy collective of a training step, short enough that a hang is named within seconds.
inline constexpr uint64_t kCollectiveOpenRecordNs = 1'000'000'000;

// Collectives kept per communicator while open. A backend that reports entries but never
// completions fills it: later entries are then not kept (the earliest are the ones that block).
inline constexpr size_t kMaxOpenCollectives = 64;

class CollectiveProgress {
 public:
  void reset();
  void entered(const moescope_comm_op_info& op, uint64_t now_ns);
  void completed(const moescope_comm_op_info& op, uint64_t now_ns);
  // Last time a collective was entered or completed (ns; 0 = never).
  uint64_t last_change_ns() const;
  // True while some communicator has a collective entered and not completed.
  bool any_open() const;
  // {"communicators": [{comm_id (hex), rank, num_ranks, last_entered {...}, last_completed
  // {...}, open: bool, earliest_open {...} (when open), open_collectives}]}; times as "ago_ns"
  // before now_ns.
  std::string describe_json(uint64_t now_ns) const;
  // Appends a collective_open record (time = when it was entered) for each communicator whose
  // earliest open collective was entered at least `min_open_ns` before `now_ns`; each
  // collective is written once.
  void append_long_open(uint64_t now_ns, uint64_t min_open_ns, trace::RecordBuffer& out);

 private:
  struct Op {
    uint32_t sequence = 0;
    uint32_t kind = 0;
    uint64_t bytes = 0;
    uint64_t count = 0;
    int32_t peer = -1;
    uint32_t name = 0;
    uint64_t time_ns = 0;
    bool valid = false;
    bool written = false;  // its collective_open record was written
  };
  // What is kept of one collective: the op's identity and when it was seen.
  static Op op_seen(const moescope_comm_op_info& info, uint64_t now_ns);
  struct Communicator {
    int32_t rank = -1;
    int32_t num_ranks = 0;
    Op entered, completed;  // the latest of each
    std::vector<Op> open;   // entered, not completed; in sequence order (kMaxOpenCollectives)
  };
  static bool is_open(const Communicator& comm) { return !comm.open.empty(); }
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Communicator> communicators_;
  uint64_t last_change_ns_ = 0;
};

}  // namespace moescope::recorder

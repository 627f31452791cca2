#include "recorder/collective_progress.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace moescope::recorder {
namespace {

void fill(const moescope_comm_op_info& info, uint64_t now_ns, int32_t& rank, int32_t& num_ranks,
          uint32_t& sequence, uint32_t& kind, uint64_t& bytes, uint64_t& count, int32_t& peer,
          uint64_t& time_ns) {
  rank = info.rank;
  num_ranks = info.num_ranks;
  sequence = info.sequence;
  kind = info.kind;
  bytes = info.bytes;
  count = info.count;
  peer = info.peer;
  time_ns = now_ns;
}

}  // namespace

void CollectiveProgress::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  communicators_.clear();
  last_change_ns_ = 0;
}

void CollectiveProgress::entered(const moescope_comm_op_info& op, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator& comm = communicators_[op.comm_id];
  Op& entry = comm.entered;
  fill(op, now_ns, comm.rank, comm.num_ranks, entry.sequence, entry.kind, entry.bytes, entry.count,
       entry.peer, entry.time_ns);
  entry.valid = true;
  last_change_ns_ = now_ns;
}

void CollectiveProgress::completed(const moescope_comm_op_info& op, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator& comm = communicators_[op.comm_id];
  Op& entry = comm.completed;
  if (entry.valid && op.sequence < entry.sequence) return;  // a late report of an older op
  fill(op, now_ns, comm.rank, comm.num_ranks, entry.sequence, entry.kind, entry.bytes, entry.count,
       entry.peer, entry.time_ns);
  entry.valid = true;
  last_change_ns_ = now_ns;
}

uint64_t CollectiveProgress::last_change_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_change_ns_;
}

bool CollectiveProgress::any_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [comm_id, comm] : communicators_) {
    if (comm.entered.valid &&
        (!comm.completed.valid || comm.completed.sequence < comm.entered.sequence)) {
      return true;
    }
  }
  return false;
}

std::string CollectiveProgress::describe_json(uint64_t now_ns) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto describe = [now_ns](const Op& op) {
    return nlohmann::json{
        {"sequence", op.sequence}, {"kind", op.kind},
        {"bytes", op.bytes},       {"count", op.count},
        {"peer", op.peer},         {"ago_ns", now_ns > op.time_ns ? now_ns - op.time_ns : 0}};
  };
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [comm_id, comm] : communicators_) {
    char id[24];
    std::snprintf(id, sizeof(id), "%016" PRIx64, comm_id);
    nlohmann::json entry = {{"comm_id", id}, {"rank", comm.rank}, {"num_ranks", comm.num_ranks}};
    if (comm.entered.valid) entry["last_entered"] = describe(comm.entered);
    if (comm.completed.valid) entry["last_completed"] = describe(comm.completed);
    entry["open"] = comm.entered.valid &&
                    (!comm.completed.valid || comm.completed.sequence < comm.entered.sequence);
    list.push_back(std::move(entry));
  }
  return nlohmann::json{{"communicators", list}}.dump();
}

}  // namespace moescope::recorder

#include "collective_progress.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace moescope::recorder {

CollectiveProgress::Op CollectiveProgress::op_seen(const moescope_comm_op_info& info,
                                                   uint64_t now_ns) {
  return {info.sequence, info.kind, info.bytes, info.count, info.peer, now_ns, true};
}

void CollectiveProgress::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  communicators_.clear();
  last_change_ns_ = 0;
}

void CollectiveProgress::entered(const moescope_comm_op_info& op, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator& comm = communicators_[op.comm_id];
  comm.rank = op.rank;
  comm.num_ranks = op.num_ranks;
  comm.entered = op_seen(op, now_ns);
  last_change_ns_ = now_ns;
}

void CollectiveProgress::completed(const moescope_comm_op_info& op, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator& comm = communicators_[op.comm_id];
  if (comm.completed.valid && op.sequence < comm.completed.sequence) return;  // an older op, late
  comm.rank = op.rank;
  comm.num_ranks = op.num_ranks;
  comm.completed = op_seen(op, now_ns);
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

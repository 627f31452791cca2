#include "collective_progress.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace moescope::recorder {

CollectiveProgress::Op CollectiveProgress::op_seen(const moescope_comm_op_info& info,
                                                   uint64_t now_ns) {
  return {info.sequence, info.kind, info.bytes, info.count, info.peer,
          info.name,     now_ns,    true,       false};
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
  // Completed already (a completion reported before its entry: threads race)?
  const bool done = comm.completed.valid && op.sequence <= comm.completed.sequence;
  if (!done && comm.open.size() < kMaxOpenCollectives) comm.open.push_back(comm.entered);
  last_change_ns_ = now_ns;
}

void CollectiveProgress::completed(const moescope_comm_op_info& op, uint64_t now_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Communicator& comm = communicators_[op.comm_id];
  if (comm.completed.valid && op.sequence < comm.completed.sequence) return;  // an older op, late
  comm.rank = op.rank;
  comm.num_ranks = op.num_ranks;
  comm.completed = op_seen(op, now_ns);
  // In order: completing a collective completes every earlier one of its communicator.
  size_t done = 0;
  while (done < comm.open.size() && comm.open[done].sequence <= op.sequence) ++done;
  comm.open.erase(comm.open.begin(), comm.open.begin() + std::ptrdiff_t(done));
  last_change_ns_ = now_ns;
}

uint64_t CollectiveProgress::last_change_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_change_ns_;
}

bool CollectiveProgress::any_open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [comm_id, comm] : communicators_) {
    if (is_open(comm)) return true;
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
    entry["open"] = is_open(comm);
    if (is_open(comm)) {
      entry["earliest_open"] = describe(comm.open.front());
      entry["open_collectives"] = comm.open.size();
    }
    list.push_back(std::move(entry));
  }
  return nlohmann::json{{"communicators", list}}.dump();
}

void CollectiveProgress::append_long_open(uint64_t now_ns, uint64_t min_open_ns,
                                          trace::RecordBuffer& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [comm_id, comm] : communicators_) {
    if (!is_open(comm)) continue;
    Op& earliest = comm.open.front();
    if (earliest.written || now_ns < earliest.time_ns + min_open_ns) continue;
    earliest.written = true;
    auto& record = out.append<trace::CollectiveOpenRecord>(trace::RecordKind::kCollectiveOpen,
                                                           earliest.time_ns, earliest.name);
    record.comm_id = comm_id;
    record.bytes = earliest.bytes;
    record.kind = earliest.kind;
    record.sequence = earliest.sequence;
    record.rank = comm.rank;
    record.num_ranks = comm.num_ranks;
  }
}

}  // namespace moescope::recorder

// The Recorder's capture windows and flight-recorder dumps (capture_window.h, flight_ring.h).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "moescope/trace/trigger_reason.h"
#include "recorder.h"

// The C API's trigger reasons are the trace format's (one list, trace/trigger_reason.h).
#define MOESCOPE_SAME_REASON(c_value, reason) \
  static_assert(c_value == static_cast<uint32_t>(moescope::trace::TriggerReason::reason))
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_SIGNAL, kSignal);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_HANG, kHang);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_CRASH, kCrash);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_EXCEPTION, kException);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_EXIT, kExit);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_COLLECTIVE_TIMEOUT, kCollectiveTimeout);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_SLOW_STEP, kSlowStep);
MOESCOPE_SAME_REASON(MOESCOPE_TRIGGER_PEER, kPeer);
#undef MOESCOPE_SAME_REASON

namespace moescope::recorder {
namespace {

std::vector<uint8_t> trigger_record_bytes(const moescope_trigger_info& trigger) {
  std::vector<uint8_t> bytes(sizeof(trace::TriggerRecord), 0);
  auto* record = reinterpret_cast<trace::TriggerRecord*>(bytes.data());
  record->header.kind = static_cast<uint8_t>(trace::RecordKind::kTrigger);
  record->header.size = sizeof(trace::TriggerRecord);
  record->header.name = trigger.detail;
  record->header.time = trigger.time_ns ? trigger.time_ns : monotonic_ns();
  record->reason = trigger.reason;
  record->origin_rank = trigger.origin_rank;
  record->code = trigger.code;
  return bytes;
}

}  // namespace

void Recorder::drain_windowed(const std::vector<ThreadBuffer*>& snapshot,
                              std::vector<ThreadBuffer*>& gone) {
  if (drained_.size() < snapshot.size()) drained_.resize(snapshot.size());
  for (size_t i = 0; i < snapshot.size(); ++i) {
    ThreadBuffer* buffer = snapshot[i];
    if (buffer->finished()) gone.push_back(buffer);  // before draining: nothing left behind
    drained_[i].clear();
    buffer->drain(drained_[i]);
    convert_ticks(drained_[i], buffer->last_tick_time_ns());
    window_.observe(drained_[i]);
  }
  for (size_t i = 0; i < snapshot.size(); ++i) {
    window_.filter(drained_[i]);
    if (flight_options_.enabled) {
      ring_.append(snapshot[i]->stream(), drained_[i]);
    } else {
      write_records(snapshot[i]->stream(), drained_[i], trace::ChunkType::kEvents);
    }
    if (drained_[i].capacity() > (4u << 20)) std::vector<uint8_t>().swap(drained_[i]);
  }
}

std::string Recorder::dump_path(uint32_t index) const {
  if (index == 0) return path_;
  static constexpr const char kSuffix[] = ".moetrace";
  std::string stem = path_;
  if (stem.size() > sizeof(kSuffix) - 1 &&
      stem.compare(stem.size() - (sizeof(kSuffix) - 1), sizeof(kSuffix) - 1, kSuffix) == 0) {
    stem.resize(stem.size() - (sizeof(kSuffix) - 1));
  }
  return stem + ".dump" + std::to_string(index + 1) + ".moetrace";
}

void Recorder::prepare_crash_dump() {
  nlohmann::json extra = nlohmann::json::parse(start_metadata_, nullptr, false);
  if (!extra.is_object()) extra = nlohmann::json::object();
  extra["flight_recorder"]["written_by"] = "fatal signal handler";
  extra["flight_recorder"]["dump_index"] = dumps_written_.load() + 1;
  std::string metadata = build_metadata_json(
      identity_, extra.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(),
      start_ns_);
  trace::FileHeader header{};
  std::memcpy(header.magic, trace::kFileMagic, sizeof(header.magic));
  header.version = trace::kFormatVersion;
  header.metadata_bytes = static_cast<uint32_t>(metadata.size());
  std::string prefix(reinterpret_cast<const char*>(&header), sizeof(header));
  prefix += metadata;
  crash_path_ = dump_path(dumps_written_.load());
  crash_prefix_ = std::move(prefix);
}

std::string Recorder::dump(const moescope_trigger_info& trigger, const std::string& extra_json,
                           uint32_t wait_ms) {
  if (!flight_mode()) return {};
  auto request = std::make_shared<DumpRequest>();
  request->trigger_record = trigger_record_bytes(trigger);
  request->extra_json = extra_json;
  std::unique_lock<std::mutex> lock(flush_mutex_);
  if (!active_ || stop_requested_) return {};
  dump_requests_.push_back(request);
  ++flush_requested_;
  flush_wakeup_.notify_all();
  flush_done_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                       [&] { return request->done || !flush_thread_running_; });
  return request->done ? request->path : std::string();
}

void Recorder::write_dumps(std::vector<std::shared_ptr<DumpRequest>>& requests) {
  uint32_t index = dumps_written_.load();
  std::string path = dump_path(index);
  uint64_t now = monotonic_ns();
  nlohmann::json extra = nlohmann::json::parse(start_metadata_, nullptr, false);
  if (!extra.is_object()) extra = nlohmann::json::object();
  nlohmann::json& flight = extra["flight_recorder"];
  flight["dump_index"] = index + 1;
  flight["dump_ns"] = now;
  flight["ring_bytes"] = ring_.bytes();
  flight["evicted_bytes"] = ring_.evicted_bytes();
  flight["ring_first_ns"] = ring_.first_time_ns();
  flight["written_by"] = "flush thread";
  for (const auto& request : requests) {
    nlohmann::json more = nlohmann::json::parse(request->extra_json, nullptr, false);
    if (more.is_object()) extra.merge_patch(more);
    ring_.append_trigger(request->trigger_record);
  }
  std::string metadata = build_metadata_json(
      identity_, extra.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str(),
      start_ns_);
  trace::TraceWriter writer;
  if (!writer.open(path, metadata)) {
    std::fprintf(stderr, "moescope: flight recorder cannot write its dump: %s\n",
                 writer.error().c_str());
    return;
  }
  trace::RecordBuffer end;
  append_stats(end);
  ring_.write(writer, end.bytes());
  writer.close();
  dumps_written_.fetch_add(1);
  for (auto& request : requests) request->path = path;
  prepare_crash_dump();
}

void Recorder::dump_from_signal_handler(int signal_number, int32_t origin_rank) {
  if (!flight_options_.enabled || !active_.load() || crash_prefix_.empty()) return;
  int fd = ::open(crash_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  alignas(8) uint8_t end[sizeof(trace::TriggerRecord) + sizeof(trace::StatsRecord)] = {};
  auto* trigger = reinterpret_cast<trace::TriggerRecord*>(end);
  trigger->header.kind = static_cast<uint8_t>(trace::RecordKind::kTrigger);
  trigger->header.size = sizeof(trace::TriggerRecord);
  trigger->header.time = monotonic_ns();
  trigger->reason = MOESCOPE_TRIGGER_CRASH;
  trigger->origin_rank = origin_rank;
  trigger->code = signal_number;
  auto* stats = reinterpret_cast<trace::StatsRecord*>(end + sizeof(trace::TriggerRecord));
  stats->header.kind = static_cast<uint8_t>(trace::RecordKind::kStats);
  stats->header.size = sizeof(trace::StatsRecord);
  stats->header.time = trigger->header.time;
  ring_.write_from_signal_handler(fd, crash_prefix_, end, sizeof(end));
  ::close(fd);
  dumps_written_.fetch_add(1);
}

}  // namespace moescope::recorder

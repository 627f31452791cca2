#include "flight_ring.h"
#include "moescope/trace/recording_environment.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace moescope::recorder {
namespace {

constexpr size_t kChunkRawBytes = 1u << 20;
constexpr size_t kStepHistory = 21;  // rolling median over the last 20 steps

const trace::RecordHeader* header_at(const std::vector<uint8_t>& records, size_t offset) {
  return reinterpret_cast<const trace::RecordHeader*>(records.data() + offset);
}

// Async-signal-safe: write() until done or an error.
bool write_fully(int fd, const void* data, size_t bytes) {
  const auto* at = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t written = ::write(fd, at, bytes);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    at += written;
    bytes -= static_cast<size_t>(written);
  }
  return true;
}

// One uncompressed chunk (flags 0: rows, absolute times); async-signal-safe (zlib's crc32 is a
// pure function).
bool write_raw_chunk(int fd, uint32_t stream, trace::ChunkType type, const uint8_t* records,
                     size_t bytes) {
  trace::ChunkHeader header{};
  header.magic = trace::kChunkMagic;
  header.type = static_cast<uint16_t>(type);
  header.stream = stream;
  header.raw_bytes = static_cast<uint32_t>(bytes);
  header.payload_bytes = static_cast<uint32_t>(bytes);
  uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(&header), offsetof(trace::ChunkHeader, crc32));
  crc = crc32(crc, records, static_cast<uInt>(bytes));
  header.crc32 = static_cast<uint32_t>(crc);
  return write_fully(fd, &header, sizeof(header)) && write_fully(fd, records, bytes);
}

// Splits `records` at record boundaries into chunks of about kChunkRawBytes; calls
// emit(begin, bytes) for each (at least once, also for no records when `always`).
template <typename Emit>
void for_each_chunk(const uint8_t* records, size_t size, bool always, Emit emit) {
  if (size == 0) {
    if (always) emit(records, 0);
    return;
  }
  size_t begin = 0;
  while (begin < size) {
    size_t end = begin;
    while (end < size && end - begin < kChunkRawBytes) {
      uint16_t record_size = reinterpret_cast<const trace::RecordHeader*>(records + end)->size;
      if (record_size == 0) return;
      end += record_size;
    }
    emit(records + begin, std::min(end, size) - begin);
    begin = end;
  }
}

}  // namespace

bool parse_flight_duration(const std::string& text, uint64_t& window_ns, uint32_t& window_steps) {
  window_ns = 0;
  window_steps = 0;
  if (text.empty()) return false;
  char* end = nullptr;
  if (text.size() > 5 && text.compare(text.size() - 5, 5, "steps") == 0) {
    unsigned long steps = std::strtoul(text.c_str(), &end, 10);
    if (end != text.c_str() + text.size() - 5 || steps < 1 || steps > 1000000) return false;
    window_steps = static_cast<uint32_t>(steps);
    return true;
  }
  double seconds = std::strtod(text.c_str(), &end);
  if (!end || *end || !(seconds > 0) || seconds > 1e7) return false;
  window_ns = static_cast<uint64_t>(seconds * 1e9);
  return true;
}

FlightOptions FlightOptions::from_environment() {
  FlightOptions options;
  const char* duration = std::getenv(trace::environment::kFlight);
  if (!duration || !*duration) return options;
  if (!parse_flight_duration(duration, options.window_ns, options.window_steps)) {
    std::fprintf(stderr,
                 "moescope: ignoring MOESCOPE_FLIGHT=%s (expected seconds or Nsteps); recording "
                 "the whole run instead\n",
                 duration);
    return options;
  }
  options.enabled = true;
  if (const char* megabytes = std::getenv(trace::environment::kFlightMb); megabytes && *megabytes) {
    char* end = nullptr;
    unsigned long long parsed = std::strtoull(megabytes, &end, 10);
    if (!end || *end || parsed < 1 || (parsed << 20) > kMaxFlightRingBytes) {
      std::fprintf(stderr, "moescope: ignoring MOESCOPE_FLIGHT_MB=%s (expected 1..%zu)\n",
                   megabytes, kMaxFlightRingBytes >> 20);
    } else {
      options.cap_bytes = static_cast<size_t>(parsed) << 20;
    }
  }
  return options;
}

void FlightRing::reset(const FlightOptions& options, uint32_t step_end_name) {
  while (!claim()) {
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, nullptr);
  }
  options_ = options;
  step_end_name_ = step_end_name;
  pieces_.clear();
  strings_.clear();
  triggers_.clear();
  thread_names_.clear();
  bytes_ = 0;
  evicted_bytes_ = 0;
  newest_ns_ = 0;
  last_progress_ns_ = 0;
  in_step_ = false;
  {
    std::lock_guard<std::mutex> lock(step_mutex_);
    step_starts_.clear();
  }
  release();
}

bool FlightRing::claim() {
  int expected = 0;
  return busy_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
}

void FlightRing::scan(uint32_t stream, const std::vector<uint8_t>& records, uint64_t& last_time) {
  uint64_t progress = 0;
  for (size_t offset = 0; offset + sizeof(trace::RecordHeader) <= records.size();) {
    const trace::RecordHeader* header = header_at(records, offset);
    if (header->size == 0) break;
    last_time = std::max<uint64_t>(last_time, header->time);
    switch (static_cast<trace::RecordKind>(header->kind)) {
      case trace::RecordKind::kStep: {
        progress = std::max<uint64_t>(progress, header->time);
        bool is_end = header->name != 0 && header->name == step_end_name_;
        in_step_.store(!is_end, std::memory_order_relaxed);
        if (!is_end) {
          std::lock_guard<std::mutex> lock(step_mutex_);
          step_starts_.push_back(header->time);
          size_t keep = std::max<size_t>(kStepHistory, size_t{options_.window_steps} + 1);
          while (step_starts_.size() > keep) step_starts_.pop_front();
        }
        break;
      }
      case trace::RecordKind::kCommOp: {
        const auto* op = reinterpret_cast<const trace::CommOpRecord*>(header);
        progress = std::max<uint64_t>(progress, op->end_time ? op->end_time : header->time);
        break;
      }
      case trace::RecordKind::kThreadInfo: {
        std::vector<uint8_t> record(records.begin() + offset,
                                    records.begin() + offset + header->size);
        auto known = std::find_if(thread_names_.begin(), thread_names_.end(),
                                  [&](const auto& entry) { return entry.first == stream; });
        if (known != thread_names_.end()) {
          known->second = std::move(record);
        } else {
          thread_names_.emplace_back(stream, std::move(record));
        }
        break;
      }
      default:
        break;
    }
    offset += header->size;
  }
  if (progress > last_progress_ns_.load(std::memory_order_relaxed)) {
    last_progress_ns_.store(progress, std::memory_order_relaxed);
  }
}

void FlightRing::append(uint32_t stream, const std::vector<uint8_t>& records) {
  if (records.empty() || !claim()) return;
  Piece piece{stream, 0, records};
  scan(stream, records, piece.last_time);
  newest_ns_ = std::max(newest_ns_, piece.last_time);
  bytes_.fetch_add(records.size(), std::memory_order_relaxed);
  pieces_.push_back(std::move(piece));
  evict();
  release();
}

void FlightRing::append_strings(const std::vector<uint8_t>& records) {
  if (records.empty() || !claim()) return;
  strings_.insert(strings_.end(), records.begin(), records.end());
  release();
}

void FlightRing::append_trigger(const std::vector<uint8_t>& record) {
  if (!claim()) return;
  triggers_.insert(triggers_.end(), record.begin(), record.end());
  release();
}

void FlightRing::evict() {
  uint64_t cutoff = 0;  // pieces that end before it are out of the window
  if (options_.window_ns && newest_ns_ > options_.window_ns)
    cutoff = newest_ns_ - options_.window_ns;
  if (options_.window_steps) {
    std::lock_guard<std::mutex> lock(step_mutex_);
    if (step_starts_.size() >= options_.window_steps) {
      cutoff = step_starts_[step_starts_.size() - options_.window_steps];
    }
  }
  while (!pieces_.empty() && (bytes_.load(std::memory_order_relaxed) > options_.cap_bytes ||
                              pieces_.front().last_time < cutoff)) {
    size_t size = pieces_.front().records.size();
    bytes_.fetch_sub(size, std::memory_order_relaxed);
    evicted_bytes_ += size;
    pieces_.pop_front();
  }
}

uint64_t FlightRing::first_time_ns() const {
  return pieces_.empty() ? 0 : header_at(pieces_.front().records, 0)->time;
}

void FlightRing::step_timing(uint64_t& current_start_ns, uint64_t& median_ns) const {
  std::lock_guard<std::mutex> lock(step_mutex_);
  current_start_ns = step_starts_.empty() ? 0 : step_starts_.back();
  median_ns = 0;
  if (step_starts_.size() < 6) return;
  std::vector<uint64_t> durations;
  size_t first = step_starts_.size() > kStepHistory ? step_starts_.size() - kStepHistory : 0;
  for (size_t i = first + 1; i < step_starts_.size(); ++i) {
    durations.push_back(step_starts_[i] - step_starts_[i - 1]);
  }
  std::nth_element(durations.begin(), durations.begin() + durations.size() / 2, durations.end());
  median_ns = durations[durations.size() / 2];
}

void FlightRing::write(trace::TraceWriter& writer, std::vector<uint8_t> end_records) {
  while (!claim()) {
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, nullptr);
  }
  std::vector<uint8_t> copy;  // the writer may delta-code a chunk in place
  for_each_chunk(strings_.data(), strings_.size(), false, [&](const uint8_t* at, size_t size) {
    copy.assign(at, at + size);
    writer.write_chunk(0, copy);
  });
  for (const auto& [stream, record] : thread_names_) {
    copy = record;
    writer.write_chunk(stream, copy);
  }
  for (const Piece& piece : pieces_) {
    for_each_chunk(piece.records.data(), piece.records.size(), false,
                   [&](const uint8_t* at, size_t size) {
                     copy.assign(at, at + size);
                     writer.write_chunk(piece.stream, copy);
                   });
  }
  end_records.insert(end_records.begin(), triggers_.begin(), triggers_.end());
  writer.write_chunk(0, end_records, trace::ChunkType::kEnd);
  release();
}

void FlightRing::write_from_signal_handler(int fd, const std::string& prefix,
                                           const uint8_t* end_record, size_t end_bytes) {
  // The flush thread may be inside append() (a crash on another thread): wait a little for it.
  bool claimed = false;
  struct timespec pause = {0, 1000000};
  for (int waited_ms = 0; waited_ms < 50 && !claimed; ++waited_ms) {
    int expected = 0;
    claimed = busy_.compare_exchange_strong(expected, 2, std::memory_order_acquire);
    if (!claimed) nanosleep(&pause, nullptr);
  }
  if (!write_fully(fd, prefix.data(), prefix.size())) return;
  auto raw = [fd](uint32_t stream) {
    return [fd, stream](const uint8_t* at, size_t size) {
      write_raw_chunk(fd, stream, trace::ChunkType::kEvents, at, size);
    };
  };
  if (claimed) {
    for_each_chunk(strings_.data(), strings_.size(), false, raw(0));
    for (const auto& [stream, record] : thread_names_) {
      write_raw_chunk(fd, stream, trace::ChunkType::kEvents, record.data(), record.size());
    }
    for (const Piece& piece : pieces_) {
      for_each_chunk(piece.records.data(), piece.records.size(), false, raw(piece.stream));
    }
    if (!triggers_.empty()) {
      write_raw_chunk(fd, 0, trace::ChunkType::kEvents, triggers_.data(), triggers_.size());
    }
  }
  write_raw_chunk(fd, 0, trace::ChunkType::kEnd, end_record, end_bytes);
  // The ring stays claimed: the process is about to die of the signal.
}

}  // namespace moescope::recorder

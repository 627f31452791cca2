// The rank summary's bytes (rank_summary.h; layout in docs/trace-format.md, "Rank summaries").
//
//   header  8 bytes magic "moesumm\n", u32 version, u32 flags (bit 0: the payload is one zstd
//           frame), u64 stored payload bytes, u64 FNV-1a 64 of the stored payload
//   payload the sections below in order, little-endian; a list is a u64 count then its items;
//           a string is a u64 length then UTF-8 bytes; bool is one byte
//
// One field list per struct (the `visit` overloads) serves both directions, so the writer and
// the reader cannot disagree on an order. Numbers are written as this machine holds them: the
// format is little-endian, as every machine moescope runs on.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include <zstd.h>

#include "moescope/analysis/rank_summary.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

constexpr char kMagic[8] = {'m', 'o', 'e', 's', 'u', 'm', 'm', '\n'};
constexpr size_t kHeaderBytes = 32;
constexpr uint32_t kFlagZstd = 1;
// The largest decoded payload accepted (a rank's summary is KB to a few MB; 64 MB covers a
// million steps): a frame announcing more is damage, refused before allocating.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
// The limits the trace path's record validation applies (record_validation.cpp): a summary past
// them is damaged, and its rank falls back to the trace.
constexpr int32_t kMaxRanks = 1 << 20;
constexpr int32_t kMaxAllToAllRanks = 1 << 10;  // the traffic matrix is ranks^2 cells (1 M at most)

uint64_t fnv1a(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

class Encoder {
 public:
  template <typename T>
  void operator()(const T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      bytes_.push_back(value ? 1 : 0);
    } else if constexpr (std::is_enum_v<T>) {
      (*this)(static_cast<uint8_t>(value));
    } else {
      static_assert(std::is_arithmetic_v<T>);
      char raw[sizeof(T)];
      std::memcpy(raw, &value, sizeof(T));
      bytes_.append(raw, sizeof(T));
    }
  }
  void operator()(const std::string& text) {
    (*this)(uint64_t(text.size()));
    bytes_ += text;
  }
  void size(const size_t& value) { (*this)(uint64_t(value)); }
  bool at_end() const { return false; }  // every section is written
  // A list: its count, then each item through `item` (min_bytes: the least an item takes).
  template <typename T, typename Item>
  void list(const std::vector<T>& items, size_t /*min_bytes*/, Item item) {
    (*this)(uint64_t(items.size()));
    for (const T& value : items) item(const_cast<T&>(value));
  }
  // A list of plain numbers, copied at once (tokens, values, split bytes).
  template <typename T>
  void numbers(const std::vector<T>& items) {
    (*this)(uint64_t(items.size()));
    if (items.empty()) return;  // data() may be null
    bytes_.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(T));
  }
  bool ok() const { return true; }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class Decoder {
 public:
  explicit Decoder(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  void operator()(T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      uint8_t raw = 0;
      (*this)(raw);
      value = raw != 0;
    } else if constexpr (std::is_enum_v<T>) {
      uint8_t raw = 0;
      (*this)(raw);
      value = static_cast<T>(raw);
    } else {
      static_assert(std::is_arithmetic_v<T>);
      value = T{};
      if (!take(sizeof(T), "a number")) return;
      std::memcpy(&value, bytes_.data() + at_, sizeof(T));
      at_ += sizeof(T);
    }
  }
  void operator()(std::string& text) {
    uint64_t length = 0;
    (*this)(length);
    text.clear();
    if (!take(length, "a string")) return;
    text.assign(bytes_.data() + at_, size_t(length));
    at_ += size_t(length);
  }
  void size(size_t& value) {
    uint64_t raw = 0;
    (*this)(raw);
    value = size_t(raw);
  }
  template <typename T, typename Item>
  void list(std::vector<T>& items, size_t min_bytes, Item item) {
    uint64_t count = 0;
    (*this)(count);
    items.clear();
    if (!ok()) return;
    // A count the remaining bytes cannot hold is damage, found before any allocation.
    if (count > (bytes_.size() - at_) / std::max<size_t>(1, min_bytes)) {
      fail("a list of " + std::to_string(count) + " items longer than the file");
      return;
    }
    items.resize(size_t(count));
    for (T& value : items) {
      item(value);
      if (!ok()) return;
    }
  }
  template <typename T>
  void numbers(std::vector<T>& items) {
    static_assert(std::is_arithmetic_v<T>);
    uint64_t count = 0;
    (*this)(count);
    items.clear();
    if (!ok()) return;
    if (count > (bytes_.size() - at_) / sizeof(T)) {
      fail("a list of " + std::to_string(count) + " numbers longer than the file");
      return;
    }
    items.resize(size_t(count));
    if (count == 0) return;  // an empty vector's data() may be null: no memcpy from it
    std::memcpy(items.data(), bytes_.data() + at_, size_t(count) * sizeof(T));
    at_ += size_t(count) * sizeof(T);
  }
  bool ok() const { return error_.empty(); }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message + " at payload offset " + std::to_string(at_);
  }
  const std::string& error() const { return error_; }
  bool at_end() const { return at_ == bytes_.size(); }

 private:
  bool take(uint64_t count, const char* what) {
    if (!ok()) return false;
    if (count > bytes_.size() - at_) {
      fail(std::string("truncated: ") + what + " runs past the end");
      return false;
    }
    return true;
  }
  std::string_view bytes_;
  size_t at_ = 0;
  std::string error_;
};

// ---- the field lists ----------------------------------------------------------------------

template <typename IO>
void visit(IO& io, StepBreakdown& b) {
  io(b.rank), io(b.step), io(b.start), io(b.end), io(b.step_ms), io(b.compute_ms);
  io(b.communication_ms), io(b.exposed_communication_ms), io(b.overlapped_communication_ms);
  io(b.memcpy_ms), io(b.idle_ms), io(b.host_sync_ms), io(b.host_syncs), io(b.blocking_d2h_copies);
  io(b.launch_gap_ms), io(b.allocations), io(b.allocated_bytes);
}

template <typename IO>
void visit(IO& io, RankFacts& f) {
  io(f.breakdown.rank);
  io.list(f.breakdown.steps, 120, [&](StepBreakdown& step) { visit(io, step); });
  visit(io, f.breakdown.total);
  io(f.has_steps);
  RankPhases& p = f.phases;
  io(p.rank), io.size(p.steps), io(p.step_ms);
  for (double& ms : p.phase_ms) io(ms);
  for (uint64_t& spans : p.phase_spans) io(spans);
  RankMemory& m = f.memory;
  io(m.rank), io(m.peak_bytes), io(m.peak_time);
  for (int64_t& bytes : m.peak_by_category) io(bytes);
  io.list(m.largest_at_peak, 30, [&](LiveAllocation& a) {
    io(a.address), io(a.bytes), io(a.device), io(a.category), io(a.allocated_at);
  });
  io.size(m.live_at_peak), io(m.allocations), io(m.frees), io(m.unmatched_frees);
  io(m.capacity_bytes), io(m.final_bytes);
  io(f.expert_ms_per_step);
  io.list(f.capture_gaps, 8, [&](std::string& gap) { io(gap); });
  io(f.has_phase_domain), io(f.forward_phase_spans), io(f.training_phase_spans);
  io(f.routed_tokens);
}

template <typename IO>
void visit(IO& io, CommOp& op) {
  io(op.enqueue), io(op.start), io(op.end), io(op.name), io(op.kind), io(op.bytes), io(op.count);
  io(op.group_id), io(op.rank), io(op.num_ranks), io(op.peer), io(op.root), io(op.device);
  io(op.stream), io(op.sequence), io(op.dtype), io(op.split_offset), io(op.num_splits);
  io(op.flags);
}

template <typename IO>
void visit(IO& io, ProcessTrack& p) {
  io(p.rank), io(p.world_size), io(p.pid), io(p.host), io(p.metadata_json), io(p.source_format);
  io(p.complete), io(p.truncated), io(p.dropped_events), io(p.events);
  for (uint64_t& count : p.events_per_kind) io(count);
  io(p.chunks), io(p.streams), io(p.begin), io(p.end);
  io(p.unmatched_span_ends), io(p.unclosed_spans), io(p.unmatched_range_ends);
  io.list(p.steps, 24, [&](StepInterval& s) { io(s.step), io(s.start), io(s.end); });
  io.list(p.step_markers, 17, [&](StepMarker& m) { io(m.step), io(m.time), io(m.is_end); });
  io.list(p.clock_sync_points, 16, [&](ClockSyncPoint& c) { io(c.sync_id), io(c.time); });
  io.list(p.communicators, 28, [&](CommunicatorTrack& comm) {
    io(comm.comm_id), io(comm.num_ranks);
    io.list(comm.ops, 98, [&](CommOp& op) { visit(io, op); });
    io.numbers(comm.split_bytes);
  });
}

template <typename IO>
void visit(IO& io, ModelSampleArrays& s) {
  io.list(s.expert_loads, 44, [&](ExpertLoadSample& e) {
    io(e.time), io(e.step), io(e.layer), io(e.rank), io(e.scope), io(e.num_experts);
    io(e.dropped_tokens), io(e.offset);
  });
  io.numbers(s.expert_tokens);
  io.list(s.expert_values, 36, [&](ExpertValuesSample& e) {
    io(e.time), io(e.step), io(e.layer), io(e.rank), io(e.quantity), io(e.num_experts);
    io(e.offset);
  });
  io.numbers(s.expert_value_data);
  io.list(s.layer_stats, 48, [&](LayerStatsSample& l) {
    io(l.time), io(l.step), io(l.layer), io(l.rank), io(l.aux_loss), io(l.z_loss);
    io(l.router_entropy), io(l.max_over_mean), io(l.nonfinite_logits), io(l.nonfinite_outputs);
  });
  io.list(s.rebalances, 86, [&](RebalanceDecision& r) {
    io(r.time), io(r.step), io(r.layer), io(r.rank), io(r.imbalance_before);
    io(r.imbalance_after), io(r.bytes_moved), io(r.duration_ns), io(r.applied);
    // Version 3: the numbers the decision was taken on.
    io(r.has_costs), io(r.busiest_rows_before), io(r.busiest_rows_after), io(r.gain_ms);
    io(r.replica_sync_ms), io(r.migration_ms), io(r.window_steps), io(r.net_ms);
    io(r.net_stderr_ms), io(r.reason);
  });
}

template <typename IO>
void visit(IO& io, RankSummary& summary) {
  io(summary.run_id), io(summary.trace_bytes), io(summary.metadata_rank), io(summary.step_source);
  visit(io, summary.process);
  io.list(summary.names, 8, [&](std::string& name) { io(name); });
  visit(io, summary.samples);
  visit(io, summary.facts);
  io.list(summary.errors, 25,
          [&](LoadError& e) { io(e.file), io(e.offset), io(e.message), io(e.refused); });
  io(summary.triggers);
  // Version 2's section, last: a payload that ends before it has no span times, so inputs laid
  // out as version 1 (the fuzz regressions) still reach every check above and after.
  if (!io.at_end()) {
    io.list(summary.facts.span_time, 32, [&](RankSpanTime& s) {
      io(s.domain), io(s.name), io.numbers(s.steps), io.numbers(s.ms);
    });
  }
  // Version 4's, after it: none when the payload ends before.
  if (!io.at_end()) io(summary.collectives_open_at_end);
}

// What the decoder cannot see field by field: indexes into the summary's own lists and times
// the analyses may add and subtract (the loader's own limit for trace records).
std::string check_consistency(const RankSummary& summary) {
  const ProcessTrack& process = summary.process;
  auto plausible = [](TimeNs time) { return trace::plausible_time(time); };
  if (summary.step_source > StepSource::kOptimizerSteps) return "unknown step source";
  if (!plausible(process.begin) || !plausible(process.end) || process.begin > process.end) {
    return "the rank's time range is damaged";
  }
  for (const StepInterval& step : process.steps) {
    if (!plausible(step.start) || !plausible(step.end) || step.end < step.start) {
      return "step " + std::to_string(step.step) + " has damaged times";
    }
  }
  for (const StepMarker& marker : process.step_markers) {
    if (!plausible(marker.time)) return "a step marker has a damaged time";
  }
  for (const ClockSyncPoint& point : process.clock_sync_points) {
    if (!plausible(point.time)) return "a clock-sync point has a damaged time";
  }
  for (const CommunicatorTrack& comm : process.communicators) {
    if (comm.num_ranks < 0 || comm.num_ranks > kMaxRanks) {
      return "communicator " + std::to_string(comm.comm_id) + " has an impossible rank count";
    }
    for (const CommOp& op : comm.ops) {
      if (op.num_ranks < 0 || op.num_ranks > kMaxRanks) {
        return "a collective of communicator " + std::to_string(comm.comm_id) +
               " has an impossible rank count";
      }
      if (op.kind == kCommKindAllToAll && op.num_splits != 0 &&
          (op.num_splits > uint32_t(kMaxAllToAllRanks) || comm.num_ranks > kMaxAllToAllRanks)) {
        return "an all-to-all of communicator " + std::to_string(comm.comm_id) +
               " spans more than " + std::to_string(kMaxAllToAllRanks) + " ranks";
      }
      if (!plausible(op.enqueue) || !plausible(op.start) || !plausible(op.end)) {
        return "a collective of communicator " + std::to_string(comm.comm_id) +
               " has damaged times";
      }
      if (op.name >= summary.names.size()) return "a collective names no listed name";
      if (uint64_t(op.split_offset) + op.num_splits > comm.split_bytes.size()) {
        return "a collective's splits run past its communicator's list";
      }
    }
  }
  const ModelSampleArrays& samples = summary.samples;
  for (const ExpertLoadSample& sample : samples.expert_loads) {
    if (!plausible(sample.time)) return "an expert-load sample has a damaged time";
    if (uint64_t(sample.offset) + sample.num_experts > samples.expert_tokens.size()) {
      return "an expert-load sample runs past the token list";
    }
  }
  for (const ExpertValuesSample& sample : samples.expert_values) {
    if (!plausible(sample.time)) return "an expert-values sample has a damaged time";
    if (uint64_t(sample.offset) + sample.num_experts > samples.expert_value_data.size()) {
      return "an expert-values sample runs past the value list";
    }
  }
  for (const LayerStatsSample& sample : samples.layer_stats) {
    if (!plausible(sample.time)) return "a router-statistics sample has a damaged time";
  }
  for (const RebalanceDecision& decision : samples.rebalances) {
    if (!plausible(decision.time)) return "a rebalancing decision has a damaged time";
  }
  const RankFacts& facts = summary.facts;
  for (const StepBreakdown& step : facts.breakdown.steps) {
    if (!plausible(step.start) || !plausible(step.end)) return "a step breakdown has damaged times";
  }
  if (!plausible(facts.breakdown.total.start) || !plausible(facts.breakdown.total.end) ||
      !plausible(facts.memory.peak_time)) {
    return "the rank's totals have damaged times";
  }
  for (const LiveAllocation& allocation : facts.memory.largest_at_peak) {
    if (!plausible(allocation.allocated_at)) return "an allocation has a damaged time";
  }
  for (const RankSpanTime& span : facts.span_time) {
    if (span.steps.size() != span.ms.size()) return "a span's steps and times differ in number";
  }
  return {};
}

}  // namespace

std::string encode_rank_summary(const RankSummary& summary, bool compress) {
  Encoder payload;
  visit(payload, const_cast<RankSummary&>(summary));
  const std::string& raw = payload.bytes();
  std::string stored(compress ? ZSTD_compressBound(raw.size()) : 0, '\0');
  const size_t packed =
      compress ? ZSTD_compress(stored.data(), stored.size(), raw.data(), raw.size(), 3) : 0;
  uint32_t flags = kFlagZstd;
  if (!compress || ZSTD_isError(packed)) {
    stored = raw;  // stored as is; the reader takes both
    flags = 0;
  } else {
    stored.resize(packed);
  }
  std::string out(kMagic, sizeof(kMagic));
  Encoder header;
  header(kRankSummaryVersion);
  header(flags);
  header(uint64_t(stored.size()));
  header(fnv1a(stored));
  out += header.bytes();
  out += stored;
  return out;
}

bool decode_rank_summary(std::string_view bytes, RankSummary& summary, std::string& error) {
  summary = RankSummary();
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    error = "not a moescope rank summary (no \"moesumm\" header)";
    return false;
  }
  Decoder header(bytes.substr(sizeof(kMagic), kHeaderBytes - sizeof(kMagic)));
  uint32_t version = 0, flags = 0;
  uint64_t payload_bytes = 0, checksum = 0;
  header(version), header(flags), header(payload_bytes), header(checksum);
  if (version != kRankSummaryVersion) {
    error = "summary format version " + std::to_string(version) + " (this moescope reads " +
            std::to_string(kRankSummaryVersion) + ")";
    return false;
  }
  if (flags & ~kFlagZstd) {
    error = "unknown header flags " + std::to_string(flags);
    return false;
  }
  const std::string_view stored = bytes.substr(kHeaderBytes);
  if (payload_bytes != stored.size()) {
    error = "truncated or padded: the header announces " + std::to_string(payload_bytes) +
            " payload bytes, the file holds " + std::to_string(stored.size());
    return false;
  }
  if (fnv1a(stored) != checksum) {
    error = "damaged: the payload's checksum does not match its header";
    return false;
  }
  std::string unpacked;
  std::string_view payload = stored;
  if (flags & kFlagZstd) {
    const unsigned long long size = ZSTD_getFrameContentSize(stored.data(), stored.size());
    if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN ||
        size > kMaxPayloadBytes) {
      error = "damaged: the payload is not a zstd frame of a known size up to 1 GiB";
      return false;
    }
    unpacked.resize(size_t(size));
    const size_t got =
        ZSTD_decompress(unpacked.data(), unpacked.size(), stored.data(), stored.size());
    if (ZSTD_isError(got) || got != size) {
      error = std::string("damaged: the payload does not decompress (") +
              (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short") + ")";
      return false;
    }
    payload = unpacked;
  }
  Decoder decoder(payload);
  visit(decoder, summary);
  if (decoder.ok() && !decoder.at_end()) decoder.fail("bytes left after the last section");
  if (!decoder.ok()) {
    error = decoder.error();
    return false;
  }
  error = check_consistency(summary);
  return error.empty();
}

}  // namespace moescope::analysis

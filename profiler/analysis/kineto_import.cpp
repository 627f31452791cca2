// Kineto / Chrome trace JSON -> FileLoad (see kineto_import.h for the mapping).
#include "moescope/analysis/kineto_import.h"

#include <zlib.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "file_load.h"
#include "kineto_fields.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

// More ranks than any job has: a larger world_size or rank is a damaged field.
constexpr int64_t kMaxWorldSize = 1 << 20;

// Whole file, gunzipped when it is gzip (zlib's gzread passes plain files through).
bool read_maybe_gzip(const std::string& path, std::string& text, std::string& error) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) {
    error = "cannot open the file";
    return false;
  }
  char buffer[1 << 16];
  int got;
  while ((got = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, size_t(got));
  int status = 0;
  const char* message = gzerror(file, &status);
  bool ok = got == 0 || status == Z_OK;
  if (!ok) error = std::string("decompression failed: ") + message;
  gzclose(file);
  return ok;
}

class KinetoLoader {
 public:
  explicit KinetoLoader(FileLoad& out)
      : out_(out), process_(out.process), skipped_(out.process.file) {}

  void load(const nlohmann::json& root) {
    const nlohmann::json* events = nullptr;
    std::optional<int64_t> base_time_ns;
    if (root.is_object()) {
      auto found = root.find("traceEvents");
      if (found != root.end() && found->is_array()) events = &*found;
      read_distributed_info(root);
      base_time_ns = read_base_time(root);
    } else if (root.is_array()) {
      events = &root;
    }
    if (!events) {
      out_.errors.push_back({process_.file, 0, "no traceEvents array in the JSON"});
      out_.opened = false;  // nothing of the file is usable
      return;
    }
    nlohmann::json metadata = {
        {"format", "kineto"}, {"rank", out_.metadata_rank}, {"world_size", process_.world_size}};
    if (base_time_ns) metadata[kKinetoBaseTimeKey] = *base_time_ns;
    process_.metadata_json = metadata.dump();
    for (size_t index = 0; index < events->size(); ++index) {
      const nlohmann::json& event = (*events)[index];
      if (!event.is_object()) {
        skipped_.skip(index, "is " + kineto::short_dump(event) + ", not an object");
        continue;
      }
      try {
        read_event(event);
      } catch (const kineto::BadField& bad) {
        skipped_.skip(index, bad.what());
      }
    }
  }

 private:
  // distributedInfo.rank / world_size; an unusable value is reported and ignored.
  void read_distributed_info(const nlohmann::json& root) {
    auto info = root.find("distributedInfo");
    if (info == root.end() || !info->is_object()) return;
    try {
      out_.metadata_rank = static_cast<int32_t>(
          kineto::integer_field(*info, "rank", 0, kMaxWorldSize - 1).value_or(-1));
      process_.world_size = static_cast<int32_t>(
          kineto::integer_field(*info, "world_size", 0, kMaxWorldSize).value_or(0));
    } catch (const kineto::BadField& bad) {
      out_.errors.push_back({process_.file, 0,
                             std::string("distributedInfo: ") + bad.what() +
                                 ": the rank is taken from the file's position"});
      out_.metadata_rank = -1;
      process_.world_size = 0;
    }
  }

  // baseTimeNanoseconds: the unix time (ns) that newer torch.profiler versions count ts from;
  // an unusable value is reported and ignored (the recording's wall clock is then unknown).
  std::optional<int64_t> read_base_time(const nlohmann::json& root) {
    try {
      return kineto::integer_field(root, "baseTimeNanoseconds", 0,
                                   std::numeric_limits<int64_t>::max());
    } catch (const kineto::BadField& bad) {
      out_.errors.push_back({process_.file, 0, std::string("baseTimeNanoseconds: ") + bad.what()});
      return std::nullopt;
    }
  }

  uint32_t name_of(const std::optional<std::string>& name) {
    return name ? out_.intern_extra(*name) : 0;
  }

  CpuThreadTrack& thread(int64_t pid, int64_t tid) {
    auto key = std::make_pair(pid, tid);
    auto [found, inserted] = threads_.try_emplace(key, process_.threads.size());
    if (inserted) {
      process_.threads.emplace_back();
      process_.threads.back().stream = static_cast<uint32_t>(tid);
      process_.threads.back().os_thread_id = static_cast<uint32_t>(tid);
    }
    return process_.threads[found->second];
  }

  GpuStreamTrack& gpu_stream(uint32_t device, uint32_t stream) {
    auto key = std::make_pair(device, stream);
    auto [found, inserted] = streams_.try_emplace(key, process_.gpu_streams.size());
    if (inserted) {
      process_.gpu_streams.emplace_back();
      process_.gpu_streams.back().device = device;
      process_.gpu_streams.back().stream = stream;
    }
    return process_.gpu_streams[found->second];
  }

  // A time the event must have (X, i and C events).
  static TimeNs required_time(const nlohmann::json& event) {
    std::optional<TimeNs> time = kineto::micros_field(event, "ts");
    if (!time) throw kineto::BadField("no 'ts'");
    return *time;
  }

  // Reads one event; throws BadField (before anything is added) when a field is unusable.
  void read_event(const nlohmann::json& event) {
    using kineto::integer_field;
    const std::optional<std::string> phase = kineto::string_field(event, "ph");
    if (!phase) throw kineto::BadField("no 'ph'");
    const std::string category = kineto::string_field(event, "cat").value_or("");
    const std::optional<std::string> name = kineto::string_field(event, "name");
    static const nlohmann::json kEmpty = nlohmann::json::object();
    const nlohmann::json* args_field = kineto::find_field(event, "args");
    if (args_field && !args_field->is_object()) {
      throw kineto::BadField("'args' is " + kineto::short_dump(*args_field) + ", not an object");
    }
    const nlohmann::json& args = args_field ? *args_field : kEmpty;
    const int64_t pid = integer_field(event, "pid", INT64_MIN, INT64_MAX, true).value_or(0);
    const int64_t tid = integer_field(event, "tid", INT64_MIN, INT64_MAX, true).value_or(0);
    if (*phase == "M") {
      if (name == "thread_name") {
        if (auto thread_name = kineto::string_field(args, "name")) {
          thread_names_[{pid, tid}] = *thread_name;
        }
      }
      return;
    }
    if (*phase == "X") {
      const TimeNs start = required_time(event);
      const TimeNs duration = kineto::micros_field(event, "dur").value_or(0);
      if (duration < 0) {
        throw kineto::BadField("'dur' is negative (" + std::to_string(duration) +
                               " ns): the event would end before it begins");
      }
      const TimeNs end = start + duration;  // both within +-2^62: no overflow
      if (!trace::plausible_time(end)) {
        throw kineto::BadField("'ts' + 'dur' is outside the times a trace can hold");
      }
      const uint32_t correlation =
          static_cast<uint32_t>(integer_field(args, "correlation", 0, UINT32_MAX).value_or(0));
      if (category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset" ||
          category == "cuda_sync") {
        // Checked before anything is added: an unusable field skips the whole event.
        const int64_t device = integer_field(args, "device", 0, UINT32_MAX).value_or(pid);
        const int64_t stream_id = integer_field(args, "stream", 0, UINT32_MAX).value_or(tid);
        const int64_t bytes = integer_field(args, "bytes", 0, INT64_MAX).value_or(0);
        GpuOp op;
        op.start = start;
        op.end = end;
        op.name = name_of(name);
        op.correlation_id = correlation;
        op.bytes = static_cast<uint64_t>(bytes);
        op.kind = category == "kernel"       ? GpuOpKind::kKernel
                  : category == "gpu_memcpy" ? GpuOpKind::kMemcpy
                  : category == "gpu_memset" ? GpuOpKind::kMemset
                                             : GpuOpKind::kSync;
        if (op.kind == GpuOpKind::kMemcpy) op.copy_kind = copy_kind_of(name.value_or(""));
        uint32_t stream = static_cast<uint32_t>(stream_id);
        if (op.kind == GpuOpKind::kSync) {
          op.detail = stream;
          stream = kAllStreams;
        }
        ++process_.events;
        gpu_stream(static_cast<uint32_t>(device), stream).ops.push_back(op);
      } else if (category == "cuda_runtime" || category == "cuda_driver") {
        ++process_.events;
        auto& track = thread(pid, tid);
        track.api_calls.push_back({start, end, name_of(name), correlation});
        track.last_time = std::max(track.last_time, end);
      } else if (category == "gpu_user_annotation") {
        ++process_.events;
        return;  // a copy of a CPU range drawn on the GPU: the CPU span is kept
      } else {
        ++process_.events;
        auto& track = thread(pid, tid);
        Span span;
        span.start = start;
        span.end = end;
        span.name = name_of(name);
        span.domain = category.empty() ? 0 : out_.intern_extra(category);
        span.flags = kSpanComplete;
        track.spans.push_back(span);
        track.last_time = std::max(track.last_time, end);
      }
    } else if (*phase == "i" || *phase == "I") {
      const TimeNs start = required_time(event);
      if (name == "[memory]") {
        MemoryEvent memory;
        memory.time = start;
        const int64_t bytes = integer_field(args, "Bytes", INT64_MIN + 1, INT64_MAX).value_or(0);
        memory.address =
            static_cast<uint64_t>(integer_field(args, "Addr", 0, INT64_MAX).value_or(0));
        memory.bytes = bytes;
        memory.is_free = bytes < 0 ? 1 : 0;
        memory.device =
            static_cast<int32_t>(integer_field(args, "Device Id", -1, INT32_MAX).value_or(-1));
        if (integer_field(args, "Device Type", INT32_MIN, INT32_MAX).value_or(0) == 0) {
          memory.device = -1;  // CPU
        }
        ++process_.events;
        process_.memory_events.push_back(memory);
      } else {
        ++process_.events;
        auto& track = thread(pid, tid);
        track.instants.push_back({start, name_of(name), 0});
      }
    } else if (*phase == "C") {
      const TimeNs start = required_time(event);
      ++process_.events;
      for (auto item = args.begin(); item != args.end(); ++item) {
        // Only finite numbers are samples (the JSON parser turns 1e999 into infinity).
        if (!item->is_number() || !std::isfinite(item->get<double>())) continue;
        std::string counter_name = name.value_or("") + "." + item.key();
        uint32_t id = out_.intern_extra(counter_name);
        auto [found, inserted] = counters_.try_emplace(id, process_.counters.size());
        if (inserted) {
          process_.counters.emplace_back();
          process_.counters.back().name = id;
        }
        process_.counters[found->second].times.push_back(start);
        process_.counters[found->second].values.push_back(item->get<double>());
      }
    }
    // Flows and other phases: links come from correlation ids.
  }

  static uint8_t copy_kind_of(const std::string& name) {
    if (name.find("HtoD") != std::string::npos) return 1;
    if (name.find("DtoH") != std::string::npos) return 2;
    if (name.find("DtoD") != std::string::npos) return 3;
    if (name.find("HtoH") != std::string::npos) return 4;
    if (name.find("PtoP") != std::string::npos) return 5;
    return 0;
  }

 public:
  void finish() {
    skipped_.report(out_.errors);
    for (const auto& [key, index] : threads_) {
      auto name = thread_names_.find(key);
      if (name != thread_names_.end())
        process_.threads[index].name = out_.intern_extra(name->second);
    }
  }

 private:
  FileLoad& out_;
  ProcessTrack& process_;
  std::map<std::pair<int64_t, int64_t>, size_t> threads_;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names_;
  std::map<std::pair<uint32_t, uint32_t>, size_t> streams_;
  std::map<uint32_t, size_t> counters_;
  kineto::SkippedEvents skipped_;
};

}  // namespace

FileLoad load_kineto_file(const std::string& path) {
  FileLoad out;
  out.process.file = path;
  out.process.source_format = "kineto";
  std::string text, error;
  if (!read_maybe_gzip(path, text, error)) {
    out.errors.push_back({path, 0, error});
    if (text.empty()) return out;
  }
  nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Find where it breaks, for the message: parse again with exceptions.
    uint64_t offset = 0;
    std::string message = "not valid JSON";
    try {
      nlohmann::json strict = nlohmann::json::parse(text);
      message = "not a JSON object: " + std::string(strict.type_name());
    } catch (const nlohmann::json::parse_error& parse_error) {
      offset = parse_error.byte;
      message = std::string("not valid JSON: ") + parse_error.what();
    }
    out.errors.push_back({path, offset, message});
    return out;
  }
  out.opened = true;
  out.process.complete = true;
  try {
    KinetoLoader loader(out);
    loader.load(root);
    loader.finish();
  } catch (const std::exception& failure) {
    // Each field is checked, so this is only a last line of defence (e.g. out of memory on an
    // absurd file): the file is reported unreadable rather than the process aborted.
    FileLoad failed;
    failed.process.file = path;
    failed.errors = std::move(out.errors);
    failed.errors.push_back(
        {path, 0, std::string("cannot import this Kineto JSON: ") + failure.what()});
    return failed;
  }
  out.process.streams =
      static_cast<uint32_t>(out.process.threads.size() + out.process.gpu_streams.size());
  validate_decoded_records(out);  // sizes and sums the field checks cannot see
  finalize_process(out);
  return out;
}

TraceModel import_kineto_json(const std::string& path) {
  return load_traces({path});
}

}  // namespace moescope::analysis

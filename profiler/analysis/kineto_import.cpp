// Kineto / Chrome trace JSON -> FileLoad (see kineto_import.h for the mapping).
#include "moescope/analysis/kineto_import.h"

#include <zlib.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

#include "file_load.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::analysis {
namespace {

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

TimeNs to_ns(const nlohmann::json& value) {
  return value.is_number() ? static_cast<TimeNs>(std::llround(value.get<double>() * 1000.0)) : 0;
}

int64_t integer_of(const nlohmann::json& object, const char* key, int64_t fallback) {
  if (!object.is_object()) return fallback;
  auto found = object.find(key);
  if (found == object.end()) return fallback;
  if (found->is_number()) return found->get<int64_t>();
  if (found->is_string()) {
    // Kineto writes some tids as strings ("stream 7"): keep the digits.
    std::string text = found->get<std::string>();
    std::string digits;
    for (char c : text) {
      if (c >= '0' && c <= '9') digits += c;
    }
    return digits.empty() || digits.size() > 18 ? fallback : std::stoll(digits);
  }
  return fallback;
}

class KinetoLoader {
 public:
  explicit KinetoLoader(FileLoad& out) : out_(out), process_(out.process) {}

  void load(const nlohmann::json& root) {
    const nlohmann::json* events = nullptr;
    if (root.is_object()) {
      auto found = root.find("traceEvents");
      if (found != root.end() && found->is_array()) events = &*found;
      auto info = root.find("distributedInfo");
      if (info != root.end()) {
        out_.metadata_rank = static_cast<int32_t>(integer_of(*info, "rank", -1));
        process_.world_size = static_cast<int32_t>(integer_of(*info, "world_size", 0));
      }
    } else if (root.is_array()) {
      events = &root;
    }
    if (!events) {
      out_.errors.push_back({process_.file, 0, "no traceEvents array in the JSON"});
      return;
    }
    nlohmann::json metadata = {
        {"format", "kineto"}, {"rank", out_.metadata_rank}, {"world_size", process_.world_size}};
    process_.metadata_json = metadata.dump();
    for (const auto& event : *events) {
      if (event.is_object()) read_event(event);
    }
  }

 private:
  uint32_t name_of(const nlohmann::json& event) {
    auto found = event.find("name");
    if (found == event.end()) return 0;
    return out_.intern_extra(found->is_string() ? found->get<std::string>() : found->dump());
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

  void read_event(const nlohmann::json& event) {
    auto phase_field = event.find("ph");
    if (phase_field == event.end() || !phase_field->is_string()) return;
    const std::string phase = phase_field->get<std::string>();
    const std::string category = event.contains("cat") && event["cat"].is_string()
                                     ? event["cat"].get<std::string>()
                                     : std::string();
    static const nlohmann::json kEmpty = nlohmann::json::object();
    const nlohmann::json& args = event.contains("args") ? event["args"] : kEmpty;
    const int64_t pid = integer_of(event, "pid", 0);
    const int64_t tid = integer_of(event, "tid", 0);
    const TimeNs start = to_ns(event.value("ts", nlohmann::json()));
    if (phase == "M") {
      if (event.value("name", "") == "thread_name" && args.contains("name") &&
          args["name"].is_string()) {
        thread_names_[{pid, tid}] = args["name"].get<std::string>();
      }
      return;
    }
    ++process_.events;
    if (phase == "X") {
      const TimeNs end = start + std::max<TimeNs>(0, to_ns(event.value("dur", nlohmann::json())));
      const uint32_t correlation = static_cast<uint32_t>(integer_of(args, "correlation", 0));
      if (category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset" ||
          category == "cuda_sync") {
        uint32_t device = static_cast<uint32_t>(integer_of(args, "device", pid));
        uint32_t stream = static_cast<uint32_t>(integer_of(args, "stream", tid));
        GpuOp op;
        op.start = start;
        op.end = end;
        op.name = name_of(event);
        op.correlation_id = correlation;
        op.bytes = static_cast<uint64_t>(std::max<int64_t>(0, integer_of(args, "bytes", 0)));
        op.kind = category == "kernel"       ? GpuOpKind::kKernel
                  : category == "gpu_memcpy" ? GpuOpKind::kMemcpy
                  : category == "gpu_memset" ? GpuOpKind::kMemset
                                             : GpuOpKind::kSync;
        if (op.kind == GpuOpKind::kMemcpy) op.copy_kind = copy_kind_of(event.value("name", ""));
        if (op.kind == GpuOpKind::kSync) {
          op.detail = stream;
          stream = kAllStreams;
        }
        gpu_stream(device, stream).ops.push_back(op);
      } else if (category == "cuda_runtime" || category == "cuda_driver") {
        auto& track = thread(pid, tid);
        track.api_calls.push_back({start, end, name_of(event), correlation});
        track.last_time = std::max(track.last_time, end);
      } else if (category == "gpu_user_annotation") {
        return;  // a copy of a CPU range drawn on the GPU: the CPU span is kept
      } else {
        auto& track = thread(pid, tid);
        Span span;
        span.start = start;
        span.end = end;
        span.name = name_of(event);
        span.domain = category.empty() ? 0 : out_.intern_extra(category);
        span.flags = kSpanComplete;
        track.spans.push_back(span);
        track.last_time = std::max(track.last_time, end);
      }
    } else if (phase == "i" || phase == "I") {
      if (event.value("name", "") == "[memory]") {
        MemoryEvent memory;
        memory.time = start;
        int64_t bytes = integer_of(args, "Bytes", 0);
        memory.address = static_cast<uint64_t>(integer_of(args, "Addr", 0));
        memory.bytes = bytes;
        memory.is_free = bytes < 0 ? 1 : 0;
        memory.device = static_cast<int32_t>(integer_of(args, "Device Id", -1));
        if (integer_of(args, "Device Type", 0) == 0) memory.device = -1;  // CPU
        process_.memory_events.push_back(memory);
      } else {
        auto& track = thread(pid, tid);
        track.instants.push_back({start, name_of(event), 0});
      }
    } else if (phase == "C") {
      for (auto item = args.begin(); item != args.end(); ++item) {
        if (!item->is_number()) continue;
        std::string name = event.value("name", "") + "." + item.key();
        uint32_t id = out_.intern_extra(name);
        auto [found, inserted] = counters_.try_emplace(id, process_.counters.size());
        if (inserted) {
          process_.counters.emplace_back();
          process_.counters.back().name = id;
        }
        process_.counters[found->second].times.push_back(start);
        process_.counters[found->second].values.push_back(item->get<double>());
      }
    } else {
      --process_.events;  // flows and others: links come from correlation ids
    }
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
  KinetoLoader loader(out);
  loader.load(root);
  loader.finish();
  out.process.streams =
      static_cast<uint32_t>(out.process.threads.size() + out.process.gpu_streams.size());
  finalize_process(out);
  return out;
}

TraceModel import_kineto_json(const std::string& path) {
  return load_traces({path});
}

}  // namespace moescope::analysis

// `moescope info [--json] TRACE...`: what each trace holds — process, rank, event counts per
// kind, time span, streams, and any damage found while reading.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "moescope/profiler/trace_reader.h"

namespace moescope::cli {
namespace {

using trace::RecordKind;

struct TraceInfo {
  std::string path;
  nlohmann::json metadata;
  std::map<std::string, uint64_t> events_per_kind;
  uint64_t events = 0;
  uint64_t chunks = 0;
  uint64_t streams = 0;
  uint64_t first_ns = ~0ull;
  uint64_t last_ns = 0;
  uint64_t dropped_events = 0;
  bool complete = false;
  bool readable = false;
  std::vector<trace::ReadError> errors;
};

TraceInfo inspect(const std::string& path) {
  TraceInfo info;
  info.path = path;
  trace::TraceReader reader;
  info.readable = reader.open(path);
  if (info.readable) {
    info.metadata = nlohmann::json::parse(reader.metadata_json(), nullptr, false);
    trace::Chunk chunk;
    std::vector<bool> seen_stream;
    while (reader.next_chunk(chunk)) {
      ++info.chunks;
      if (chunk.stream >= seen_stream.size()) seen_stream.resize(chunk.stream + 1);
      seen_stream[chunk.stream] = true;
      for (trace::RecordView record : chunk) {
        uint8_t kind = record.header().kind;
        if (kind == static_cast<uint8_t>(RecordKind::kString)) continue;  // names, not events
        if (kind == static_cast<uint8_t>(RecordKind::kStats)) {
          info.dropped_events = record.as<trace::StatsRecord>().dropped_events +
                                record.as<trace::StatsRecord>().dropped_gpu_records;
          continue;
        }
        ++info.events;
        ++info.events_per_kind[trace::record_kind_name(kind)];
        uint64_t time = record.header().time;
        info.first_ns = std::min(info.first_ns, time);
        info.last_ns = std::max(info.last_ns, time);
        if (trace::has_end_time(kind)) {
          uint64_t end;
          std::memcpy(&end, record.data() + sizeof(trace::RecordHeader), sizeof(end));
          if (end >= time) info.last_ns = std::max(info.last_ns, end);
        }
      }
    }
    info.streams = std::count(seen_stream.begin(), seen_stream.end(), true);
    info.complete = reader.saw_end();
  }
  info.errors = reader.errors();
  return info;
}

nlohmann::json to_json(const TraceInfo& info) {
  nlohmann::json out = {{"path", info.path}, {"readable", info.readable}};
  if (!info.readable) {
    out["errors"] = nlohmann::json::array();
  } else {
    out["metadata"] = info.metadata.is_discarded() ? nlohmann::json() : info.metadata;
    out["events"] = info.events;
    out["events_per_kind"] = info.events_per_kind;
    out["chunks"] = info.chunks;
    out["streams"] = info.streams;
    out["first_ns"] = info.events ? info.first_ns : 0;
    out["last_ns"] = info.last_ns;
    out["duration_ns"] = info.events ? info.last_ns - info.first_ns : 0;
    out["dropped_events"] = info.dropped_events;
    out["complete"] = info.complete;
    out["errors"] = nlohmann::json::array();
  }
  for (const auto& error : info.errors) {
    out["errors"].push_back({{"offset", error.offset}, {"message", error.message}});
  }
  return out;
}

void print_text(const TraceInfo& info) {
  std::printf("%s\n", info.path.c_str());
  if (!info.readable) {
    for (const auto& error : info.errors) std::printf("  error: %s\n", error.to_string().c_str());
    return;
  }
  const auto& meta = info.metadata;
  auto field = [&](const char* key) -> std::string {
    if (meta.is_discarded() || !meta.contains(key)) return "?";
    return meta[key].is_string() ? meta[key].get<std::string>() : meta[key].dump();
  };
  std::printf("  process   pid %s on %s, rank %s of %s\n", field("pid").c_str(),
              field("host").c_str(), field("rank").c_str(), field("world_size").c_str());
  std::printf("  command   %s\n", field("command_line").c_str());
  double seconds = info.events ? double(info.last_ns - info.first_ns) * 1e-9 : 0.0;
  std::printf("  events    %llu in %llu chunks, %llu streams, spanning %.3f s\n",
              static_cast<unsigned long long>(info.events),
              static_cast<unsigned long long>(info.chunks),
              static_cast<unsigned long long>(info.streams), seconds);
  for (const auto& [kind, count] : info.events_per_kind) {
    std::printf("    %-14s %llu\n", kind.c_str(), static_cast<unsigned long long>(count));
  }
  if (info.dropped_events) {
    std::printf("  dropped   %llu events (buffers full)\n",
                static_cast<unsigned long long>(info.dropped_events));
  }
  std::printf("  status    %s\n", info.complete ? "complete"
                                                : "incomplete (no closing chunk: the "
                                                  "process was killed or is running)");
  for (const auto& error : info.errors) std::printf("  damage    %s\n", error.to_string().c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* command = app.add_subcommand("info", "Summarise what trace files hold");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  command->add_option("traces", *paths, "Trace files (.moetrace)")->required();
  command->add_flag("--json", *as_json, "Print JSON instead of text");
  command->callback([paths, as_json] {
    bool any_unreadable = false;
    nlohmann::json all = nlohmann::json::array();
    for (const auto& path : *paths) {
      TraceInfo info = inspect(path);
      any_unreadable |= !info.readable;
      if (*as_json) {
        all.push_back(to_json(info));
      } else {
        print_text(info);
      }
      for (const auto& error : info.errors) {
        std::fprintf(stderr, "moescope info: %s\n", error.to_string().c_str());
      }
    }
    if (*as_json) std::cout << all.dump(2) << std::endl;
    if (any_unreadable) throw CLI::RuntimeError(1);
  });
}

}  // namespace moescope::cli

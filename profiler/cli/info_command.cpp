// `moescope info [--json] TRACE...`: what each trace holds — process, rank, event counts per
// kind, time span, streams, and any damage found while reading. Reads through the trace model
// (moescope_analysis), like every other consumer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/record_kinds.h"
#include "moescope/trace/trace_format.h"

namespace moescope::cli {
namespace {

struct TraceInfo {
  std::string path;
  const analysis::ProcessTrack* process = nullptr;  // null: not readable at all
  nlohmann::json metadata;
  std::map<std::string, uint64_t> events_per_kind;
  std::vector<const analysis::LoadError*> errors;
};

TraceInfo describe(const analysis::TraceModel& model, const std::string& path) {
  TraceInfo info;
  info.path = path;
  for (const auto& process : model.processes) {
    if (process.file == path) info.process = &process;
  }
  for (const auto& error : model.errors) {
    if (error.file == path) info.errors.push_back(&error);
  }
  if (info.process) {
    info.metadata = nlohmann::json::parse(info.process->metadata_json, nullptr, false);
    for (uint32_t kind = 1; kind <= trace::kMaxRecordKind; ++kind) {
      uint64_t count = info.process->events_per_kind[kind];
      if (count) info.events_per_kind[trace::record_kind_name(uint8_t(kind))] = count;
    }
  }
  return info;
}

nlohmann::json to_json(const TraceInfo& info) {
  nlohmann::json out = {{"path", info.path}, {"readable", info.process != nullptr}};
  if (info.process) {
    const auto& process = *info.process;
    out["metadata"] = info.metadata.is_discarded() ? nlohmann::json() : info.metadata;
    out["format"] = process.source_format;
    out["events"] = process.events;
    out["events_per_kind"] = info.events_per_kind;
    out["chunks"] = process.chunks;
    out["streams"] = process.streams;
    out["first_ns"] = process.events ? process.begin : 0;
    out["last_ns"] = process.end;
    out["duration_ns"] = process.events ? process.end - process.begin : 0;
    out["dropped_events"] = process.dropped_events;
    out["complete"] = process.complete;
  }
  out["errors"] = nlohmann::json::array();
  for (const auto* error : info.errors) {
    out["errors"].push_back({{"offset", error->offset}, {"message", error->message}});
  }
  return out;
}

int64_t integer_field(const nlohmann::json& meta, const char* key, int64_t fallback) {
  if (meta.is_discarded() || !meta.is_object() || !meta.contains(key)) return fallback;
  return meta[key].is_number_integer() ? meta[key].get<int64_t>() : fallback;
}

// "pid 1234 on host", or what a torch.profiler trace says of its process.
std::string process_text(const analysis::ProcessTrack& process, const nlohmann::json& meta) {
  if (process.source_format == "kineto") return "torch.profiler (Kineto) trace";
  std::string text = "pid " + std::to_string(integer_field(meta, "pid", process.pid));
  std::string host = process.host;
  if (host.empty() && !meta.is_discarded() && meta.contains("host") && meta["host"].is_string())
    host = meta["host"].get<std::string>();
  return host.empty() ? text : text + " on " + host;
}

// The rank `moescope report` shows for this file, and where it comes from: "rank 1 of 4", or
// for a trace without one, its position among the files given.
std::string rank_text(const analysis::ProcessTrack& process, const nlohmann::json& meta) {
  const int64_t rank = integer_field(meta, "rank", -1);
  const int64_t world = integer_field(meta, "world_size", 0);
  if (rank >= 0) {
    return "rank " + std::to_string(rank) + (world > 0 ? " of " + std::to_string(world) : "");
  }
  return "one process without a rank (report calls it rank " + std::to_string(process.rank) +
         ", its position among the files given)";
}

void print_text(const TraceInfo& info) {
  std::printf("%s\n", info.path.c_str());
  if (!info.process) {
    for (const auto* error : info.errors) std::printf("  error: %s\n", error->to_string().c_str());
    return;
  }
  const auto& process = *info.process;
  const auto& meta = info.metadata;
  auto field = [&](const char* key) -> std::string {
    if (meta.is_discarded() || !meta.contains(key)) return "?";
    return meta[key].is_string() ? meta[key].get<std::string>() : meta[key].dump();
  };
  std::printf("  process   %s, %s\n", process_text(process, meta).c_str(),
              rank_text(process, meta).c_str());
  if (process.source_format != "kineto") {
    std::printf("  command   %s\n", field("command_line").c_str());
  }
  // Traces from `moescope record` say what the GPU capture did, e.g. why there is no GPU event.
  if (!meta.is_discarded() && meta.contains("capture") && meta["capture"].is_object() &&
      meta["capture"].contains("gpu") && meta["capture"]["gpu"].is_object()) {
    const auto& gpu = meta["capture"]["gpu"];
    std::printf("  gpu       CUPTI %s%s%s\n", gpu.value("cupti", "?").c_str(),
                gpu.contains("cupti_detail") ? ": " : "", gpu.value("cupti_detail", "").c_str());
  }
  double seconds = process.events ? double(process.end - process.begin) * 1e-9 : 0.0;
  std::printf("  events    %llu in %llu chunks, %u streams, spanning %.3f s\n",
              static_cast<unsigned long long>(process.events),
              static_cast<unsigned long long>(process.chunks), process.streams, seconds);
  for (const auto& [kind, count] : info.events_per_kind) {
    std::printf("    %-14s %llu\n", kind.c_str(), static_cast<unsigned long long>(count));
  }
  if (process.dropped_events) {
    std::printf("  dropped   %llu events (buffers full)\n",
                static_cast<unsigned long long>(process.dropped_events));
  }
  std::printf("  status    %s\n", process.complete ? "complete"
                                                   : "incomplete (no closing chunk: the "
                                                     "process was killed or is running)");
  for (const auto* error : info.errors) std::printf("  damage    %s\n", error->to_string().c_str());
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* command = app.add_subcommand("info", "Summarise what trace files hold");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  command
      ->add_option("traces", *paths,
                   "Trace files (.moetrace, Kineto .json[.gz]), or folders of them")
      ->required();
  command->add_flag("--json", *as_json, "Print JSON instead of text");
  command->callback([paths, as_json] {
    std::vector<std::string> files;
    run_reporting_errors("info", [&] { files = analysis::recorded_trace_files(*paths); });
    analysis::LoadOptions options;
    options.align_clocks = false;  // info shows each file as written
    options.detect_steps = false;
    analysis::TraceModel model = analysis::load_traces(files, options);
    bool any_unreadable = false;
    nlohmann::json all = nlohmann::json::array();
    for (const auto& path : files) {
      TraceInfo info = describe(model, path);
      any_unreadable |= info.process == nullptr;
      if (*as_json) {
        all.push_back(to_json(info));
      } else {
        print_text(info);
      }
      for (const auto* error : info.errors) {
        std::fprintf(stderr, "moescope info: %s\n", error->to_string().c_str());
      }
    }
    if (*as_json) std::cout << all.dump(2) << std::endl;
    if (any_unreadable) throw CLI::RuntimeError(1);
  });
}

}  // namespace moescope::cli

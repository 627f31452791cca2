// Making a rank summary from a loaded trace, and its files (rank_summary.h).
#include "moescope/analysis/rank_summary.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "moescope/analysis/collective_mismatch.h"

namespace moescope::analysis {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string summary_path_for(const std::string& trace_path) {
  const std::string extension = ".moetrace";
  if (ends_with(trace_path, extension)) {
    return trace_path.substr(0, trace_path.size() - extension.size()) + kRankSummaryExtension;
  }
  return trace_path + kRankSummaryExtension;
}

bool is_summary_path(const std::string& path) {
  return ends_with(path, kRankSummaryExtension);
}

std::string run_id_of(const std::string& metadata_json) {
  const nlohmann::json meta = nlohmann::json::parse(metadata_json, nullptr, false);
  if (meta.is_object() && meta.contains("run_id")) {
    const auto& id = meta["run_id"];
    return id.is_string() ? id.get<std::string>() : id.dump();
  }
  std::string basis;
  if (meta.is_object()) {
    if (meta.contains("command_line")) basis += meta["command_line"].dump();
    if (meta.contains("world_size")) basis += "|" + meta["world_size"].dump();
  }
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : basis) hash = (hash ^ c) * 0x100000001b3ull;
  char text[32];
  std::snprintf(text, sizeof(text), "cmd-%016llx", static_cast<unsigned long long>(hash));
  return text;
}

RankSummary summarize_process(const TraceModel& model, size_t index, uint64_t trace_bytes) {
  const ProcessTrack& process = model.processes.at(index);
  RankSummary summary;
  summary.run_id = run_id_of(process.metadata_json);
  summary.trace_bytes = trace_bytes;
  const nlohmann::json meta = nlohmann::json::parse(process.metadata_json, nullptr, false);
  if (meta.is_object() && meta.contains("rank") && meta["rank"].is_number_integer() &&
      meta["rank"].get<int64_t>() >= 0 && meta["rank"].get<int64_t>() <= INT32_MAX) {
    summary.metadata_rank = int32_t(meta["rank"].get<int64_t>());
  }
  summary.step_source = model.step_source;
  summary.triggers = process.triggers.size();
  for (const CollectiveState& state : collectives_at_end(process, process.end)) {
    summary.collectives_open_at_end += state.has_open ? 1 : 0;
  }
  summary.errors = model.errors;

  ProcessTrack& skeleton = summary.process;
  skeleton.rank = process.rank;
  skeleton.world_size = process.world_size;
  skeleton.pid = process.pid;
  skeleton.host = process.host;
  skeleton.file = process.file;
  skeleton.metadata_json = process.metadata_json;
  skeleton.source_format = process.source_format;
  skeleton.complete = process.complete;
  skeleton.truncated = process.truncated;
  skeleton.dropped_events = process.dropped_events;
  skeleton.events = process.events;
  skeleton.events_per_kind = process.events_per_kind;
  skeleton.chunks = process.chunks;
  skeleton.streams = process.streams;
  skeleton.begin = process.begin;
  skeleton.end = process.end;
  skeleton.unmatched_span_ends = process.unmatched_span_ends;
  skeleton.unclosed_spans = process.unclosed_spans;
  skeleton.unmatched_range_ends = process.unmatched_range_ends;
  skeleton.steps = process.steps;
  skeleton.step_markers = process.step_markers;
  skeleton.clock_sync_points = process.clock_sync_points;
  std::unordered_map<StringId, uint32_t> local_name;
  for (const CommunicatorTrack& comm : process.communicators) {
    CommunicatorTrack copy;
    copy.comm_id = comm.comm_id;
    copy.num_ranks = comm.num_ranks;
    copy.split_bytes = comm.split_bytes;
    copy.ops = comm.ops;
    for (CommOp& op : copy.ops) {
      auto [found, added] = local_name.emplace(op.name, uint32_t(summary.names.size()));
      if (added) summary.names.push_back(model.name(op.name));
      op.name = found->second;
    }
    skeleton.communicators.push_back(std::move(copy));
  }

  for_each_sample_array([&](const auto& array) {
    using Array = std::decay_t<decltype(array)>;
    auto& samples = summary.samples.*array.samples;
    for (auto sample : model.*array.samples) {
      if (sample.process != index) continue;
      if constexpr (Array::kHasTail) {
        auto& tail = summary.samples.*array.tail;
        const auto& source = model.*array.tail;
        const uint32_t offset = uint32_t(tail.size());
        tail.insert(tail.end(), source.begin() + sample.offset,
                    source.begin() + sample.offset + sample.num_experts);
        sample.offset = offset;
      }
      sample.process = 0;
      samples.push_back(sample);
    }
  });
  summary.facts = std::move(compute_rank_facts(model)[index]);
  summary.facts.span_time = rank_span_time(model, model.processes[index]);
  return summary;
}

bool write_rank_summary(const std::string& path, const RankSummary& summary, std::string& error) {
  const std::string bytes = encode_rank_summary(summary);
  // Written beside and renamed: a reader never sees half a summary, and a killed run leaves none.
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) {
      error = "cannot write " + temporary;
      return false;
    }
  }
  std::error_code failure;
  std::filesystem::rename(temporary, path, failure);
  if (failure) {
    error = "cannot rename " + temporary + " to " + path + ": " + failure.message();
    std::filesystem::remove(temporary, failure);
    return false;
  }
  return true;
}

bool read_rank_summary(const std::string& path, RankSummary& summary, std::string& error) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) {
    error = "cannot open";
    return false;
  }
  std::string bytes;
  char block[1 << 16];
  for (size_t got; (got = std::fread(block, 1, sizeof(block), file)) > 0;) bytes.append(block, got);
  const bool failed = std::ferror(file);
  std::fclose(file);
  if (failed) {
    error = "cannot read";
    return false;
  }
  return decode_rank_summary(bytes, summary, error);
}

}  // namespace moescope::analysis

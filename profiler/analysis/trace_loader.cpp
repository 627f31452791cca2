// Loads files in parallel (one thread per file, bounded by the hardware), then merges them into
// one model: ranks, one string table, model-wide samples, clock alignment, step detection.
#include "moescope/analysis/trace_loader.h"

#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "file_load.h"
#include "freed_memory.h"
#include "input_checks.h"
#include "moescope/analysis/clock_alignment.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/trace/record_kinds.h"
#include "rank_numbering.h"
#include "worker_threads.h"

namespace moescope::analysis {
namespace {

uint64_t file_bytes(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Maps one file's string ids to the model's table. The file's names are interned in id order,
// so the first file's ids (1, 2, 3, ...) stay what they are, and so do those of every rank of a
// program that named things in the same order: then the events keep their ids and only names
// the loader made up (kLocalExtraBit) are rewritten.
class StringRemap {
 public:
  StringRemap(FileLoad& file, StringTable& table) : table_(table) {
    std::vector<uint32_t> ids;
    ids.reserve(file.file_strings.size());
    for (const auto& entry : file.file_strings) {
      if (entry.first != 0 && !(entry.first & kLocalExtraBit)) ids.push_back(entry.first);
    }
    std::sort(ids.begin(), ids.end());
    const uint64_t max_id = ids.empty() ? 0 : ids.back();
    if (max_id <= 4 * uint64_t(ids.size()) + 4096) dense_.assign(max_id + 1, kUnmapped);
    if (!dense_.empty()) dense_[0] = 0;
    keeps_ids_ = true;
    size_t defined_up_to_max_name = 0;
    for (uint32_t id : ids) {
      const StringId global = table.intern(file.file_strings[id]);
      if (id < dense_.size()) {
        dense_[id] = global;
      } else {
        sparse_.emplace(id, global);
      }
      keeps_ids_ = keeps_ids_ && global == id;
      if (id <= file.read_index.max_name) ++defined_up_to_max_name;
    }
    // An id that events use but the file never defined gets a made-up name: not kept.
    keeps_ids_ = keeps_ids_ && defined_up_to_max_name == file.read_index.max_name;
    extras_.reserve(file.extra_strings.size());
    for (const auto& text : file.extra_strings) extras_.push_back(table.intern(text));
  }
  // True when every file id the events use is also its model id.
  bool keeps_file_ids() const { return keeps_ids_; }

  StringId operator()(uint32_t local) {
    if (local == 0) return 0;  // no name
    if (local & kLocalExtraBit) {
      const uint32_t index = local & ~kLocalExtraBit;
      return index < extras_.size() ? extras_[index] : 0;
    }
    if (local < dense_.size() && dense_[local] != kUnmapped) return dense_[local];
    auto [found, inserted] = sparse_.try_emplace(local, 0);
    if (inserted) found->second = table_.intern("<unnamed " + std::to_string(local) + ">");
    return found->second;
  }

 private:
  static constexpr StringId kUnmapped = ~0u;
  StringTable& table_;
  std::vector<StringId> dense_;  // file id -> model id
  std::unordered_map<uint32_t, StringId> sparse_;
  std::vector<StringId> extras_;
  bool keeps_ids_ = false;
};

void remap_process_names(ProcessTrack& process, StringRemap& remap) {
  for (auto& thread : process.threads) {
    thread.name = remap(thread.name);
    for (auto& span : thread.spans) span.name = remap(span.name), span.domain = remap(span.domain);
    for (auto& instant : thread.instants) {
      instant.name = remap(instant.name), instant.domain = remap(instant.domain);
    }
    for (auto& call : thread.api_calls) call.name = remap(call.name);
  }
  for (auto& stream : process.gpu_streams) {
    for (auto& op : stream.ops) op.name = remap(op.name);
  }
  for (auto& comm : process.communicators) {
    for (auto& op : comm.ops) op.name = remap(op.name);
  }
  for (auto& counter : process.counters) counter.name = remap(counter.name);
  for_each_process_event_array([&](const auto& array) {
    if (!array.name_id) return;
    for (auto& event : process.*array.events) event.*array.name_id = remap(event.*array.name_id);
  });
}

// When the file's ids are kept, only made-up names need rewriting; the moetrace reader makes
// them up for GPU copies and syncs only.
void remap_made_up_gpu_names(ProcessTrack& process, StringRemap& remap) {
  for (auto& stream : process.gpu_streams) {
    for (auto& op : stream.ops) {
      if (op.name & kLocalExtraBit) op.name = remap(op.name);
    }
  }
}

// A recording that holds nothing of its program: only the shim's own notes (instants in the
// "moescope" domain, "no CUDA driver") and thread names. What a helper process (torchrun's
// launcher) leaves, which the shim deletes at exit and `moescope record` at its end; one killed
// with its job (SIGKILL) leaves it behind.
bool holds_only_shim_notes(const FileLoad& file) {
  if (file.process.source_format != "moetrace") return false;
  const auto& per_kind = file.process.events_per_kind;
  for (size_t kind = 0; kind < per_kind.size(); ++kind) {
    if (per_kind[kind] && kind != size_t(trace::RecordKind::kInstant) &&
        kind != size_t(trace::RecordKind::kThreadInfo)) {
      return false;
    }
  }
  for (const auto& thread : file.process.threads) {
    for (const Instant& instant : thread.instants) {
      const auto domain = file.file_strings.find(instant.domain);
      if (domain == file.file_strings.end() || domain->second != "moescope") return false;
    }
  }
  return true;
}

// Beside files that state a rank, a file that states none and holds only the shim's notes is
// not a rank of the job (a launcher killed with it): left out, with a note, so that it does not
// take a rank number and a step of its own in the report.
void leave_out_empty_helpers(std::vector<FileLoad>& files, TraceModel& model) {
  const bool ranked = std::any_of(files.begin(), files.end(), [](const FileLoad& file) {
    return file.opened && file.metadata_rank >= 0;
  });
  if (!ranked) return;
  for (FileLoad& file : files) {
    if (!file.opened || file.metadata_rank >= 0 || !holds_only_shim_notes(file)) continue;
    model.errors.push_back({file.process.file, 0,
                            "states no rank and holds nothing of its program, only the shim's "
                            "notes (a launcher or helper whose empty trace was not removed: the "
                            "job was killed?): left out"});
    file.opened = false;
  }
}

// The ranks of the files read (rank_numbering.h); a note in the model's errors when the files'
// positions number them.
std::vector<int32_t> choose_ranks(const std::vector<FileLoad>& files, TraceModel& model) {
  std::vector<int32_t> stated;
  std::vector<std::string> names;
  for (const FileLoad& file : files) {
    if (!file.opened) continue;
    stated.push_back(file.metadata_rank);
    names.push_back(file.process.file);
  }
  RankNumbering numbering = number_ranks(stated, names);
  if (!numbering.why_by_position.empty()) {
    model.errors.push_back({numbering.file, 0, std::move(numbering.why_by_position)});
  }
  std::vector<int32_t> ranks(files.size(), -1);
  for (size_t i = 0, k = 0; i < files.size(); ++i) {
    if (files[i].opened) ranks[i] = numbering.ranks[k++];
  }
  return ranks;
}

void merge_into(TraceModel& model, std::vector<FileLoad>& files) {
  leave_out_empty_helpers(files, model);
  std::vector<int32_t> ranks = choose_ranks(files, model);
  std::vector<const ModelSampleArrays*> parts;
  for (const FileLoad& file : files) parts.push_back(&file);
  reserve_sample_arrays(model, parts);
  std::vector<size_t> order(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranks[a] < ranks[b]; });
  FreedMemoryReturn freed_memory;
  for (size_t i : order) {
    FileLoad& file = files[i];
    for (auto& error : file.errors) model.errors.push_back(std::move(error));
    if (!file.opened) continue;
    const uint32_t process_index = static_cast<uint32_t>(model.processes.size());
    StringRemap remap(file, model.strings);
    if (!remap.keeps_file_ids() || !file.read_index.made_up_names_only_on_gpu_ops) {
      remap_process_names(file.process, remap);
    } else if (!file.extra_strings.empty()) {
      remap_made_up_gpu_names(file.process, remap);
    }
    file.process.rank = ranks[i];
    append_sample_arrays(model, file, process_index);
    for (auto flow : file.flows) {
      flow.from.process = process_index;
      flow.to.process = process_index;
      model.flows.push_back(flow);
    }
    model.total_events += file.process.events;
    model.processes.push_back(std::move(file.process));
    file = FileLoad();  // free the file's memory as soon as it is merged
    freed_memory.part_freed();
  }
  update_model_time_range(model);
}

}  // namespace

void update_model_time_range(TraceModel& model) {
  model.begin = 0;
  model.end = 0;
  if (model.processes.empty()) return;
  model.begin = INT64_MAX;
  model.end = INT64_MIN;
  for (const auto& process : model.processes) {
    model.begin = std::min(model.begin, process.begin);
    model.end = std::max(model.end, process.end);
  }
}

std::function<void(const LoadProgress&)> line_progress(std::FILE* out, uint64_t min_bytes) {
  return [out, min_bytes](const LoadProgress& progress) {
    if (progress.bytes_total < min_bytes) return;
    std::fprintf(out, "\rloading %zu/%zu files, %.0f%%", progress.files_done, progress.files_total,
                 100.0 * double(progress.bytes_done) / double(progress.bytes_total));
    if (progress.files_done == progress.files_total) std::fprintf(out, "\n");
    std::fflush(out);
  };
}

bool is_chrome_json_path(const std::string& path) {
  return ends_with(path, ".json") || ends_with(path, ".json.gz");
}

TraceModel load_traces(const std::vector<std::string>& paths, const LoadOptions& options) {
  std::vector<FileLoad> files(paths.size());
  LoadProgress progress;
  progress.files_total = paths.size();
  std::vector<uint64_t> bytes_read(paths.size(), 0);
  for (const auto& path : paths) progress.bytes_total += file_bytes(path);
  std::mutex progress_mutex;
  auto report = [&](size_t file, uint64_t bytes, bool done) {
    if (!options.progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    progress.bytes_done += bytes - std::min(bytes, bytes_read[file]);
    bytes_read[file] = std::max(bytes_read[file], bytes);
    if (done) ++progress.files_done;
    options.progress(progress);
  };

  // One thread per file; when threads are left over, each file also decodes on a second one.
  const unsigned budget =
      options.max_threads ? options.max_threads : std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = static_cast<unsigned>(std::min<size_t>(budget, paths.size()));
  const bool pipelined = budget >= 2 * std::max(1u, threads);
  std::atomic<size_t> next_file{0};
  auto worker = [&] {
    for (size_t i = next_file.fetch_add(1); i < paths.size(); i = next_file.fetch_add(1)) {
      if (options.cancel && options.cancel->load()) break;
      const std::string& path = paths[i];
      // An exception must not leave a worker thread (std::terminate): a file that throws
      // (out of memory on absurd sizes) is reported as unreadable and the others still load.
      try {
        if (is_chrome_json_path(path)) {
          files[i] = load_kineto_file(path);
        } else {
          MoetraceReadOptions read_options;
          read_options.cancel = options.cancel;
          read_options.pipelined = pipelined;
          read_options.max_events = options.max_events_per_file;
          files[i] = load_moetrace_file(
              path, [&, i](uint64_t bytes, uint64_t) { report(i, bytes, false); }, read_options);
        }
      } catch (const std::exception& failure) {
        files[i] = FileLoad();
        files[i].errors.push_back({path, 0, std::string("cannot load: ") + failure.what()});
      }
      report(i, file_bytes(path), true);
    }
  };
  run_worker_threads(threads, worker);
  return model_of_files(files, options);
}

TraceModel model_of_files(std::vector<FileLoad>& files, const LoadOptions& options) {
  TraceModel model;
  // A non-trace JSON; a Kineto trace beside .moetrace files (input_checks.h).
  refuse_unusable_inputs(files, options.align_clocks);
  merge_into(model, files);
  if (options.align_clocks) align_clocks(model);
  if (options.detect_steps) detect_steps(model);
  return model;
}

}  // namespace moescope::analysis

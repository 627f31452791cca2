#include "moescope/viewer/event_description.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/viewer/time_axis.h"

namespace moescope::viewer {
namespace {

std::string printed(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printed(const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

std::string duration_text(double ns) {
  char text[32];
  format_duration(ns, text, sizeof(text));
  return text;
}

double gigabytes_per_second(uint64_t bytes, analysis::TimeNs duration) {
  return duration > 0 ? static_cast<double>(bytes) / static_cast<double>(duration) : 0.0;
}

}  // namespace

std::vector<std::string> describe_event(const analysis::TraceModel& model,
                                        const TimelineIndex& index, const EventRef& ref,
                                        bool long_form) {
  std::vector<std::string> lines;
  if (!ref.valid() || static_cast<size_t>(ref.track) >= index.tracks.size()) return lines;
  const TimelineTrack& track = index.tracks[static_cast<size_t>(ref.track)];
  if (static_cast<size_t>(ref.lane) >= track.lanes.size()) return lines;
  const Lane& lane = track.lanes[static_cast<size_t>(ref.lane)];
  if (static_cast<size_t>(ref.slot) >= lane.size()) return lines;
  const uint32_t event = lane.event[static_cast<size_t>(ref.slot)];
  const EventSummary summary = summarize_event(model, index, ref);
  const analysis::ProcessTrack& process = model.processes[track.process];
  const std::string& name = model.name(summary.name);
  lines.push_back(name.empty() ? "(unnamed)" : name);
  lines.push_back(printed("duration %s   start +%s   %s",
                          duration_text(double(summary.end_ns - summary.start_ns)).c_str(),
                          duration_text(double(summary.start_ns - model.begin)).c_str(),
                          track.label.c_str()));
  if (track.kind == TimelineTrackKind::kThread) {
    const auto& thread = process.threads[track.track];
    const analysis::Span& span = thread.spans[event];
    const std::string& domain = model.name(span.domain);
    lines.push_back(printed("depth %u%s%s%s", unsigned{span.depth},
                            domain.empty() ? "" : "   domain ", domain.c_str(),
                            span.flags & analysis::kSpanUnclosed ? "   (never closed)" : ""));
    if (long_form && span.parent >= 0) {
      lines.push_back("parent: " + model.name(thread.spans[static_cast<size_t>(span.parent)].name));
    }
  } else if (track.kind == TimelineTrackKind::kGpuStream) {
    const auto& stream = process.gpu_streams[track.track];
    const analysis::GpuOp& op = stream.ops[event];
    lines.push_back(
        printed("%s   correlation %u", analysis::gpu_op_kind_name(op.kind), op.correlation_id));
    if (op.bytes > 0) {
      lines.push_back(printed("%" PRIu64 " bytes   %.2f GB/s", op.bytes,
                              gigabytes_per_second(op.bytes, op.duration())));
    }
    if (op.kind == analysis::GpuOpKind::kKernel && op.detail < stream.kernel_details.size()) {
      const analysis::KernelDetail& detail = stream.kernel_details[op.detail];
      lines.push_back(printed("grid %u x %u x %u   block %u x %u x %u   %u regs   %u B shared",
                              detail.grid[0], detail.grid[1], detail.grid[2], detail.block[0],
                              detail.block[1], detail.block[2], detail.registers_per_thread,
                              detail.shared_memory_bytes));
    }
    if (long_form && op.launch_thread < process.threads.size() &&
        op.launch_call < process.threads[op.launch_thread].api_calls.size()) {
      const analysis::ApiCall& call = process.threads[op.launch_thread].api_calls[op.launch_call];
      lines.push_back(printed("launched by %s, %s before it ran", model.name(call.name).c_str(),
                              duration_text(double(op.start - call.start)).c_str()));
    }
  } else if (track.kind == TimelineTrackKind::kCommunicator) {
    const auto& communicator = process.communicators[track.track];
    const analysis::CommOp& op = communicator.ops[event];
    lines.push_back(printed("%s   %" PRIu64 " bytes   %.2f GB/s   rank %d of %d",
                            analysis::comm_kind_name(op.kind), op.bytes,
                            gigabytes_per_second(op.bytes, op.duration()), op.rank, op.num_ranks));
    if (op.peer >= 0) lines.push_back(printed("peer %d", op.peer));
    lines.push_back(printed("enqueued %s before the transfer started%s",
                            duration_text(double(op.start - op.enqueue)).c_str(),
                            op.flags & analysis::kCommEndUnknown ? "   (completion unknown)" : ""));
    if (long_form && op.num_splits > 0) {
      std::string splits = "bytes to each rank:";
      for (uint64_t bytes : communicator.splits(op)) splits += " " + std::to_string(bytes);
      lines.push_back(splits);
    }
  }
  return lines;
}

}  // namespace moescope::viewer

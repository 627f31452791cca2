#include "moescope/analysis/what_happened.h"

#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "moescope/analysis/comm_analysis.h"

namespace moescope::analysis {
namespace {

using trace::TriggerReason;
constexpr uint32_t kReasonPeer = static_cast<uint32_t>(TriggerReason::kPeer);
constexpr size_t kMaxStackLines = 40;

std::string hex_id(uint64_t id) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016" PRIx64, id);
  return text;
}

std::string bytes_text(uint64_t bytes) {
  char text[32];
  if (bytes >= (1u << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / 1048576.0);
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(text, sizeof(text), "%" PRIu64 " B", bytes);
  }
  return text;
}

// The signal's name (SIGSEGV). A table, not glibc's sigabbrev_np (2.32): the pip wheel's binaries
// may use nothing newer than glibc 2.28. The signals a crash or a kill of a rank can be.
std::string signal_text(int code) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [number, name] : kNames) {
    if (number == code) return name;
  }
  return "signal " + std::to_string(code);
}

// Where the trigger fired, in words.
std::string trigger_words(const TriggerEvent& trigger, const std::string& detail,
                          const RankStory* story) {
  std::string text = trigger_reason_name(trigger.reason);
  switch (static_cast<TriggerReason>(trigger.reason)) {
    case TriggerReason::kCrash:
      text += " (" + signal_text(trigger.code) + ")";
      break;
    case TriggerReason::kSignal:
      text += trigger.code ? " (" + signal_text(trigger.code) + ")" : " (moescope dump)";
      break;
    case TriggerReason::kExit:
      text += " (status " + std::to_string(trigger.code) + ")";
      break;
    case TriggerReason::kHang:
      if (story && story->since_progress_s >= 0) {
        char seconds[48];
        std::snprintf(seconds, sizeof(seconds), " (no step or collective progress for %.1f s)",
                      story->since_progress_s);
        text += seconds;
      }
      break;
    default:
      break;
  }
  if (!detail.empty()) text += ": " + detail;
  return text;
}

uint64_t parse_comm_id(const nlohmann::json& value) {
  if (!value.is_string()) return 0;
  return std::strtoull(value.get<std::string>().c_str(), nullptr, 16);
}

// From the dump's metadata (flight_monitor.cpp) when there; else from the completed ops of the
// trace (a crash dump has no metadata about collectives).
void read_collectives(const ProcessTrack& process, const nlohmann::json& flight, RankStory& story) {
  if (flight.contains("collectives") && flight["collectives"].is_array()) {
    for (const auto& entry : flight["collectives"]) {
      CollectiveState state;
      state.comm_id = parse_comm_id(entry.value("comm_id", nlohmann::json()));
      state.num_ranks = entry.value("num_ranks", 0);
      if (entry.contains("last_completed")) {
        const auto& done = entry["last_completed"];
        state.has_completed = true;
        state.completed_sequence = done.value("sequence", 0u);
        state.completed_kind = done.value("kind", 0u);
        state.completed_bytes = done.value("bytes", uint64_t{0});
      }
      if (entry.value("open", false) && entry.contains("last_entered")) {
        const auto& open = entry["last_entered"];
        state.has_open = true;
        state.open_sequence = open.value("sequence", 0u);
        state.open_kind = open.value("kind", 0u);
        state.open_bytes = open.value("bytes", uint64_t{0});
        state.open_for_s = open.value("ago_ns", uint64_t{0}) * 1e-9;
      }
      story.collectives.push_back(state);
    }
    return;
  }
  for (const auto& comm : process.communicators) {
    if (comm.ops.empty()) continue;
    const CommOp* last = &comm.ops.front();
    for (const auto& op : comm.ops) {
      if (op.sequence >= last->sequence) last = &op;
    }
    CollectiveState state;
    state.comm_id = comm.comm_id;
    state.num_ranks = comm.num_ranks;
    state.has_completed = true;
    state.completed_sequence = last->sequence;
    state.completed_kind = last->kind;
    state.completed_bytes = last->bytes;
    story.collectives.push_back(state);
  }
}

void read_open_spans(const TraceModel& model, const ProcessTrack& process, RankStory& story) {
  for (const auto& thread : process.threads) {
    std::vector<const Span*> chain;
    for (const auto& span : thread.spans) {
      if (span.flags & kSpanUnclosed) chain.push_back(&span);
    }
    if (chain.empty()) continue;
    std::sort(chain.begin(), chain.end(),
              [](const Span* a, const Span* b) { return a->depth < b->depth; });
    std::string text = (thread.name ? model.name(thread.name) : "thread") + ": ";
    for (size_t i = 0; i < chain.size() && i < 12; ++i) {
      text += (i ? " > " : "") + model.name(chain[i]->name);
    }
    story.open_spans.push_back(text);
  }
}

// Seconds between the last step or collective in the trace and the process's first trigger.
double progress_gap_from_trace(const ProcessTrack& process) {
  if (process.triggers.empty()) return -1;
  TimeNs last = 0;
  for (const auto& marker : process.step_markers) last = std::max(last, marker.time);
  for (const auto& comm : process.communicators) {
    for (const auto& op : comm.ops) last = std::max(last, std::max(op.end, op.enqueue));
  }
  TimeNs fired = process.triggers.front().time;
  return last && fired > last ? (fired - last) * 1e-9 : -1;
}

}  // namespace

WhatHappened explain_dump(const TraceModel& model) {
  WhatHappened what;
  const TriggerEvent* first = nullptr;
  for (const auto& process : model.processes) {
    if (process.triggers.empty()) continue;
    what.any = true;
    RankStory story;
    story.rank = process.rank;
    story.pid = process.pid;
    story.file = process.file;
    story.triggers = process.triggers;
    nlohmann::json metadata = nlohmann::json::parse(process.metadata_json, nullptr, false);
    nlohmann::json flight = metadata.is_object() && metadata.contains("flight_recorder")
                                ? metadata["flight_recorder"]
                                : nlohmann::json::object();
    if (flight.contains("trigger"))
      story.origin_reason = flight["trigger"].value("origin_reason", 0u);
    story.since_progress_s = flight.contains("last_progress_ago_ns")
                                 ? flight["last_progress_ago_ns"].get<double>() * 1e-9
                                 : progress_gap_from_trace(process);
    read_collectives(process, flight, story);
    read_open_spans(model, process, story);
    if (flight.contains("python_stacks") && flight["python_stacks"].is_string()) {
      story.python_stacks = flight["python_stacks"].get<std::string>();
    }
    for (const auto& trigger : process.triggers) {
      bool better = !first || (first->reason == kReasonPeer && trigger.reason != kReasonPeer) ||
                    ((first->reason == kReasonPeer) == (trigger.reason == kReasonPeer) &&
                     trigger.time < first->time);
      if (better) {
        first = &trigger;
        what.first_rank = process.rank;
      }
    }
    what.ranks.push_back(std::move(story));
  }
  if (!what.any) return what;
  what.first = *first;
  what.first_detail = first->detail ? model.name(first->detail) : "";
  // Mismatch: per communicator, the latest collective some rank entered; ranks behind it never
  // entered it.
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> latest;  // comm -> (sequence, kind)
  std::map<uint64_t, int32_t> comm_size;
  for (const auto& story : what.ranks) {
    for (const auto& state : story.collectives) {
      comm_size[state.comm_id] = std::max(comm_size[state.comm_id], state.num_ranks);
      if (!state.has_open) continue;
      auto [entry, inserted] =
          latest.try_emplace(state.comm_id, state.open_sequence, state.open_kind);
      if (!inserted && state.open_sequence > entry->second.first) {
        entry->second = {state.open_sequence, state.open_kind};
      }
    }
  }
  for (const auto& [comm_id, latest_op] : latest) {
    CollectiveMismatch mismatch;
    mismatch.comm_id = comm_id;
    mismatch.sequence = latest_op.first;
    mismatch.kind = latest_op.second;
    std::set<int32_t> seen;
    for (const auto& story : what.ranks) {
      for (const auto& state : story.collectives) {
        if (state.comm_id != comm_id) continue;
        seen.insert(story.rank);
        bool inside = state.has_open && state.open_sequence >= mismatch.sequence;
        bool past = state.has_completed && state.completed_sequence >= mismatch.sequence;
        if (inside) {
          mismatch.waiting.push_back(story.rank);
        } else if (!past) {
          mismatch.never_entered.push_back(story.rank);
        }
      }
    }
    // Ranks of the job whose dump shows nothing of this communicator at all.
    for (const auto& story : what.ranks) {
      if (!seen.count(story.rank) && comm_size[comm_id] > 0) {
        mismatch.never_entered.push_back(story.rank);
      }
    }
    if (!mismatch.never_entered.empty() || !mismatch.waiting.empty()) {
      what.mismatches.push_back(std::move(mismatch));
    }
  }
  return what;
}

namespace {

std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string text;
  for (int32_t rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

std::string collective_words(uint32_t sequence, uint32_t kind, uint64_t bytes) {
  return std::string(comm_kind_name(kind)) + " #" + std::to_string(sequence) + " (" +
         bytes_text(bytes) + ")";
}

}  // namespace

std::string render_what_happened(const WhatHappened& what, ReportFormat format) {
  if (!what.any) return {};
  const bool markdown = format == ReportFormat::kMarkdown;
  std::ostringstream out;
  out << (markdown ? "## What happened\n\n" : "What happened\n=============\n");
  const RankStory* origin = nullptr;
  for (const auto& story : what.ranks) {
    if (story.rank == what.first_rank) origin = &story;
  }
  out << (markdown ? "- " : "  ")
      << "Trigger: " << trigger_words(what.first, what.first_detail, origin) << " on rank "
      << what.first_rank << "\n";
  for (const auto& mismatch : what.mismatches) {
    out << (markdown ? "- " : "  ") << "Collective " << comm_kind_name(mismatch.kind) << " #"
        << mismatch.sequence << " of comm " << hex_id(mismatch.comm_id) << ": ";
    if (!mismatch.never_entered.empty()) {
      out << "rank" << (mismatch.never_entered.size() > 1 ? "s " : " ")
          << rank_list(mismatch.never_entered) << " never entered it";
      if (!mismatch.waiting.empty()) out << "; ";
    }
    if (!mismatch.waiting.empty()) {
      out << "rank" << (mismatch.waiting.size() > 1 ? "s " : " ") << rank_list(mismatch.waiting)
          << " wait" << (mismatch.waiting.size() > 1 ? "" : "s") << " in it";
    }
    out << "\n";
  }
  out << (markdown ? "\n" : "  Per rank:\n");
  for (const auto& story : what.ranks) {
    out << (markdown ? "- **rank " : "    rank ") << story.rank << (markdown ? "**" : "")
        << " (pid " << story.pid << "): ";
    const TriggerEvent& own = story.triggers.front();
    out << trigger_words(own, "", &story);
    if (own.reason == kReasonPeer) {
      out << " (rank " << own.origin_rank;
      if (story.origin_reason) out << ": " << trigger_reason_name(story.origin_reason);
      out << ")";
    }
    if (story.since_progress_s >= 0) {
      char seconds[64];
      std::snprintf(seconds, sizeof(seconds), "; last progress %.1f s before the dump",
                    story.since_progress_s);
      out << seconds;
    }
    out << "\n";
    const char* indent = markdown ? "  - " : "      ";
    for (const auto& state : story.collectives) {
      out << indent << "comm " << hex_id(state.comm_id) << ": last completed "
          << (state.has_completed ? collective_words(state.completed_sequence, state.completed_kind,
                                                     state.completed_bytes)
                                  : std::string("none"));
      if (state.has_open) {
        char seconds[48];
        std::snprintf(seconds, sizeof(seconds), ", for %.1f s", state.open_for_s);
        out << "; open: "
            << collective_words(state.open_sequence, state.open_kind, state.open_bytes) << seconds;
      } else {
        out << "; open: none";
      }
      out << "\n";
    }
    for (const auto& spans : story.open_spans) out << indent << "open spans: " << spans << "\n";
    if (!story.python_stacks.empty()) {
      out << indent << "Python stacks:\n";
      std::istringstream lines(story.python_stacks);
      std::string line;
      size_t count = 0;
      while (std::getline(lines, line) && count++ < kMaxStackLines) {
        out << (markdown ? "        " : "        ") << line << "\n";
      }
    }
  }
  out << "\n";
  return out.str();
}

std::string what_happened_json(const WhatHappened& what) {
  if (!what.any) return "null";
  nlohmann::json out;
  out["trigger"] = {{"reason", trigger_reason_name(what.first.reason)},
                    {"rank", what.first_rank},
                    {"code", what.first.code},
                    {"detail", what.first_detail}};
  nlohmann::json mismatches = nlohmann::json::array();
  for (const auto& mismatch : what.mismatches) {
    mismatches.push_back({{"comm_id", hex_id(mismatch.comm_id)},
                          {"sequence", mismatch.sequence},
                          {"kind", comm_kind_name(mismatch.kind)},
                          {"never_entered", mismatch.never_entered},
                          {"waiting", mismatch.waiting}});
  }
  out["mismatches"] = mismatches;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& story : what.ranks) {
    nlohmann::json rank = {{"rank", story.rank},
                           {"pid", story.pid},
                           {"file", story.file},
                           {"trigger", trigger_reason_name(story.triggers.front().reason)},
                           {"open_spans", story.open_spans}};
    if (story.since_progress_s >= 0) rank["since_progress_s"] = story.since_progress_s;
    nlohmann::json collectives = nlohmann::json::array();
    for (const auto& state : story.collectives) {
      nlohmann::json entry = {{"comm_id", hex_id(state.comm_id)}};
      if (state.has_completed) {
        entry["last_completed"] = {{"sequence", state.completed_sequence},
                                   {"kind", comm_kind_name(state.completed_kind)},
                                   {"bytes", state.completed_bytes}};
      }
      if (state.has_open) {
        entry["open"] = {{"sequence", state.open_sequence},
                         {"kind", comm_kind_name(state.open_kind)},
                         {"bytes", state.open_bytes},
                         {"for_s", state.open_for_s}};
      }
      collectives.push_back(entry);
    }
    rank["collectives"] = collectives;
    if (!story.python_stacks.empty()) rank["python_stacks"] = story.python_stacks;
    ranks.push_back(rank);
  }
  out["ranks"] = ranks;
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moescope::analysis

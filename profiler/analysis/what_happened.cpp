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
constexpr size_t kMaxRankStories = 16;  // ranks told one by one; beyond, only the ones named

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

// From the dump's metadata (flight_monitor.cpp) when there; else from the trace's completed ops
// and collective_open records (a crash dump has no metadata about collectives).
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
      // The earliest open collective blocks the communicator (dumps before it was written
      // name the latest entered).
      const char* open_key = entry.contains("earliest_open") ? "earliest_open" : "last_entered";
      if (entry.value("open", false) && entry.contains(open_key)) {
        const auto& open = entry[open_key];
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
  const TimeNs fired = process.triggers.empty() ? process.end : process.triggers.front().time;
  story.collectives = collectives_at_end(process, fired);
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

// The last step marker or collective of the trace (0 = none).
TimeNs last_progress(const ProcessTrack& process) {
  TimeNs last = 0;
  for (const auto& marker : process.step_markers) last = std::max(last, marker.time);
  for (const auto& comm : process.communicators) {
    for (const auto& op : comm.ops) last = std::max(last, std::max(op.end, op.enqueue));
  }
  return last;
}

// Seconds between the last step or collective in the trace and `until` (-1 unknown).
double progress_gap(const ProcessTrack& process, TimeNs until) {
  const TimeNs last = last_progress(process);
  return last && until > last ? (until - last) * 1e-9 : -1;
}

// A regular recording (no trigger) whose ranks' traces end inside a collective: a job that hung
// and was stopped. Each rank's collectives as its trace ends (collectives_at_end).
WhatHappened explain_trace_end(const TraceModel& model) {
  WhatHappened what;
  bool inside = false;
  for (const auto& process : model.processes) {
    RankStory story;
    story.rank = process.rank;
    story.pid = process.pid;
    story.file = process.file;
    const TimeNs until = recording_end(process);
    const double gap_s = progress_gap(process, until);
    story.since_progress_s = gap_s >= 0.05 ? gap_s : -1;
    story.collectives = collectives_at_end(process, until);
    if (story.collectives.empty()) continue;  // no collective at all (a launcher)
    for (const CollectiveState& state : story.collectives) inside = inside || state.has_open;
    read_open_spans(model, process, story);
    what.ranks.push_back(std::move(story));
  }
  if (!inside) return {};
  std::vector<RankCollectives> collectives;
  for (const auto& story : what.ranks) collectives.push_back({story.rank, story.collectives});
  what.mismatches = collective_mismatches(collectives);
  what.any = true;
  return what;
}

}  // namespace

std::string mismatch_line(const CollectiveMismatch& mismatch) {
  std::string line = std::string(comm_kind_name(mismatch.kind)) + " #" +
                     std::to_string(mismatch.sequence) + " of comm " + hex_id(mismatch.comm_id) +
                     ": ";
  if (!mismatch.never_entered.empty()) {
    line += (mismatch.never_entered.size() > 1 ? "ranks " : "rank ") +
            rank_runs(mismatch.never_entered) + " never entered it";
    if (!mismatch.waiting.empty()) line += "; ";
  }
  if (!mismatch.waiting.empty()) {
    line += (mismatch.waiting.size() > 1 ? "ranks " : "rank ") + rank_runs(mismatch.waiting) +
            (mismatch.waiting.size() > 1 ? " wait in it" : " waits in it");
  }
  return line;
}

std::string what_happened_headline(const WhatHappened& what) {
  if (!what.any) return "";
  std::string line = what.first_rank >= 0
                         ? std::string("flight-recorder dump: ") +
                               trigger_reason_name(what.first.reason) + " on rank " +
                               std::to_string(what.first_rank)
                         : std::string("the traces end inside a collective (a hung job)");
  if (!what.mismatches.empty()) {
    line += "; " + mismatch_line(what.mismatches.front());
    if (what.mismatches.size() > 1) {
      line += " (+" + std::to_string(what.mismatches.size() - 1) + " more communicators)";
    }
  }
  return line;
}

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
                                 : progress_gap(process, process.triggers.front().time);
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
  if (!what.any) return explain_trace_end(model);
  what.first = *first;
  what.first_detail = first->detail ? model.name(first->detail) : "";
  std::vector<RankCollectives> collectives;
  for (const auto& story : what.ranks) collectives.push_back({story.rank, story.collectives});
  what.mismatches = collective_mismatches(collectives);
  return what;
}

namespace {

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
  if (what.first_rank >= 0) {
    out << (markdown ? "- " : "  ")
        << "Trigger: " << trigger_words(what.first, what.first_detail, origin) << " on rank "
        << what.first_rank << "\n";
  } else {
    out << (markdown ? "- " : "  ")
        << "No flight-recorder trigger: the traces end with ranks inside a collective (the job "
           "hung, or was stopped while they waited)\n";
  }
  for (const auto& mismatch : what.mismatches) {
    out << (markdown ? "- " : "  ") << "Collective " << mismatch_line(mismatch) << "\n";
  }
  out << (markdown ? "\n" : "  Per rank:\n");
  // At many ranks, the story of the ranks named above (the one whose trigger fired first, those
  // that never entered a collective) up to kMaxRankStories; the JSON has every rank.
  std::set<int32_t> named = {what.first_rank};
  for (const auto& mismatch : what.mismatches) {
    named.insert(mismatch.never_entered.begin(), mismatch.never_entered.end());
  }
  const bool every_rank = what.ranks.size() <= kMaxRankStories;
  size_t told = 0;
  for (const auto& story : what.ranks) {
    if (!every_rank && (!named.count(story.rank) || told == kMaxRankStories)) continue;
    ++told;
    out << (markdown ? "- **rank " : "    rank ") << story.rank << (markdown ? "**" : "")
        << " (pid " << story.pid << "): ";
    if (story.triggers.empty()) {
      out << "trace ends";
    } else {
      const TriggerEvent& own = story.triggers.front();
      out << trigger_words(own, "", &story);
      if (own.reason == kReasonPeer) {
        out << " (rank " << own.origin_rank;
        if (story.origin_reason) out << ": " << trigger_reason_name(story.origin_reason);
        out << ")";
      }
    }
    if (story.since_progress_s >= 0) {
      char seconds[80];
      std::snprintf(seconds, sizeof(seconds), "; last progress %.1f s before %s",
                    story.since_progress_s, story.triggers.empty() ? "its trace ends" : "the dump");
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
        // A rank killed without stopping its recording has no closing statistics record: its
        // trace ends with the collective_open record itself, and there is no time to give.
        char seconds[48] = "";
        if (state.open_for_s >= 0.05) {
          std::snprintf(seconds, sizeof(seconds), ", for %.1f s", state.open_for_s);
        }
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
  if (told < what.ranks.size()) {
    out << (markdown ? "- " : "    ") << what.ranks.size() - told
        << " other ranks (`--format json` lists every rank)\n";
  }
  out << "\n";
  return out.str();
}

std::string what_happened_json(const WhatHappened& what) {
  if (!what.any) return "null";
  nlohmann::json out;
  if (what.first_rank >= 0) {
    out["trigger"] = {{"reason", trigger_reason_name(what.first.reason)},
                      {"rank", what.first_rank},
                      {"code", what.first.code},
                      {"detail", what.first_detail}};
  } else {
    out["trigger"] = nullptr;  // a regular recording that ends inside a collective
  }
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
    nlohmann::json rank = {
        {"rank", story.rank},
        {"pid", story.pid},
        {"file", story.file},
        {"trigger", story.triggers.empty()
                        ? nlohmann::json()
                        : nlohmann::json(trigger_reason_name(story.triggers.front().reason))},
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

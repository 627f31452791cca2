#include "shim_trace_path.h"

#include <sys/stat.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "moescope/trace/trace_reader.h"

namespace moescope::inject {

bool pattern_has_placeholder(const std::string& pattern, char letter) {
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    if (pattern[i + 1] == letter) return true;
    ++i;  // skip the escaped character ("%%" or another placeholder)
  }
  return false;
}

std::string pattern_with_pid(const std::string& pattern) {
  if (pattern_has_placeholder(pattern, 'p')) return pattern;
  size_t slash = pattern.rfind('/');
  size_t name_begin = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = pattern.rfind('.');
  // A dot that starts the name (".trace") is not an extension.
  if (dot == std::string::npos || dot <= name_begin) return pattern + ".%p";
  return pattern.substr(0, dot) + ".%p" + pattern.substr(dot);
}

std::string pattern_for_process(const std::string& pattern, bool rank_known, bool forked_child) {
  std::string result = pattern;
  bool needs_pid = forked_child;
  if (!rank_known && pattern_has_placeholder(pattern, 'r')) {
    std::string replaced;
    for (size_t i = 0; i < result.size(); ++i) {
      if (result[i] == '%' && i + 1 < result.size()) {
        if (result[i + 1] == 'r') {
          replaced += "norank";
        } else {
          replaced += result.substr(i, 2);
        }
        ++i;
        continue;
      }
      replaced += result[i];
    }
    result = replaced;
    needs_pid = true;
  }
  return needs_pid ? pattern_with_pid(result) : result;
}

bool trace_taken_by_session(const std::string& path, const std::string& session, int pid) {
  if (session.empty()) return false;
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return false;
  trace::TraceReader reader;
  if (!reader.open(path)) return false;
  auto metadata = nlohmann::json::parse(reader.metadata_json(), nullptr, false);
  if (!metadata.is_object() || !metadata.contains("session") || metadata["session"] != session) {
    return false;
  }
  // The same pid is this process before it called exec(): its image and trace are gone.
  return !(metadata.contains("pid") && metadata["pid"] == pid);
}

bool trace_is_empty_helper(const std::string& path, const std::string& session) {
  {
    trace::TraceReader reader;
    if (!reader.open(path)) return false;
    auto metadata = nlohmann::json::parse(reader.metadata_json(), nullptr, false);
    if (!metadata.is_object() || metadata.value("session", std::string()) != session) return false;
    const auto capture = metadata.find("capture");
    if (capture == metadata.end() || !capture->is_object() ||
        capture->value("primary_path", true)) {
      return false;
    }
  }
  return !trace_has_events(path);
}

bool trace_has_events(const std::string& path) {
  constexpr off_t kLargestFileRead = 4 << 20;
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return false;
  if (info.st_size > kLargestFileRead) return true;
  trace::TraceReader reader;
  if (!reader.open(path)) return true;  // unreadable: keep it, the user should see it
  // Instants in the "moescope" domain are the shim's own notes ("no CUDA driver"), not events
  // of the program. Strings follow the records that use them, so domains resolve at the end.
  std::set<uint32_t> instant_domains;
  std::map<uint32_t, std::string> strings;
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    for (trace::RecordView record : chunk) {
      switch (record.kind()) {
        case trace::RecordKind::kString: {
          auto string = record.as<trace::StringRecord>();
          strings[string.header.name] = std::string(
              reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), string.length);
          continue;
        }
        case trace::RecordKind::kInstant:
          instant_domains.insert(record.as<trace::InstantRecord>().domain);
          continue;
        case trace::RecordKind::kStats:
        case trace::RecordKind::kThreadInfo:
          continue;
        default:
          return true;
      }
    }
  }
  for (uint32_t domain : instant_domains) {
    auto it = strings.find(domain);
    if (it == strings.end() || it->second != "moescope") return true;
  }
  return false;
}

}  // namespace moescope::inject

// Interned strings of one recording: ids are dense from 1; each new string is also queued as a
// String record for the flush thread to write, so the trace defines every id it uses.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moescope/trace/trace_writer.h"

namespace moescope::recorder {

class StringTable {
 public:
  // Longest string kept; longer ones are truncated (a record's size is 16 bits).
  static constexpr size_t kMaxLength = 4096;

  uint32_t intern(std::string_view text);
  // Moves the String records of strings interned since the last call into `out`.
  void take_pending(trace::RecordBuffer& out);
  void clear();

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, uint32_t> ids_;
  trace::RecordBuffer pending_;
};

// Per-thread cache in front of the table for hot paths that pass strings by content (NVTX
// messages): a direct-mapped table keyed by a hash, verified against a private copy.
class ThreadStringCache {
 public:
  uint32_t intern(StringTable& table, std::string_view text);

 private:
  struct Entry {
    uint64_t hash = 0;
    uint32_t id = 0;
    std::string text;
  };
  static constexpr size_t kEntries = 256;
  Entry entries_[kEntries];
};

uint64_t hash_string(std::string_view text);

}  // namespace moescope::recorder

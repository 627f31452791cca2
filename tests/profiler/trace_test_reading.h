// Test helpers: read a whole trace into simple structures.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "moescope/trace/trace_reader.h"

namespace moescope::testing {

struct OwnedRecord {
  uint32_t stream;
  std::vector<uint8_t> bytes;
  trace::RecordKind kind() const { return static_cast<trace::RecordKind>(bytes[0]); }
  const trace::RecordHeader& header() const {
    return *reinterpret_cast<const trace::RecordHeader*>(bytes.data());
  }
  template <typename Record>
  Record as() const {
    Record record;
    std::memcpy(&record, bytes.data(), sizeof(Record));
    return record;
  }
  template <typename Value>
  Value tail(size_t fixed, size_t index) const {
    Value value;
    std::memcpy(&value, bytes.data() + fixed + index * sizeof(Value), sizeof(Value));
    return value;
  }
};

struct LoadedTrace {
  bool opened = false;
  bool complete = false;
  std::string metadata_json;
  std::vector<OwnedRecord> records;  // in file order, strings excluded
  std::map<uint32_t, std::string> strings;
  std::vector<trace::ReadError> errors;
  std::vector<OwnedRecord> of_kind(trace::RecordKind kind) const;
  // The names of the instant records, in file order.
  std::vector<std::string> instant_names() const;
};

LoadedTrace load_trace(const std::string& path);
LoadedTrace load_trace_memory(const std::vector<uint8_t>& image);
std::string temp_path(const std::string& name);

}  // namespace moescope::testing

#include "trace_test_reading.h"

#include <unistd.h>

namespace moescope::testing {
namespace {

LoadedTrace drain(trace::TraceReader& reader, bool opened) {
  LoadedTrace loaded;
  loaded.opened = opened;
  if (opened) {
    loaded.metadata_json = reader.metadata_json();
    trace::Chunk chunk;
    while (reader.next_chunk(chunk)) {
      for (trace::RecordView record : chunk) {
        if (record.kind() == trace::RecordKind::kString) {
          auto string = record.as<trace::StringRecord>();
          loaded.strings[string.header.name] = std::string(
              reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), string.length);
          continue;
        }
        loaded.records.push_back(OwnedRecord{
            chunk.stream, std::vector<uint8_t>(record.data(), record.data() + record.size())});
      }
    }
    loaded.complete = reader.saw_end();
  }
  loaded.errors = reader.errors();
  return loaded;
}

}  // namespace

std::vector<OwnedRecord> LoadedTrace::of_kind(trace::RecordKind kind) const {
  std::vector<OwnedRecord> out;
  for (const auto& record : records) {
    if (record.kind() == kind) out.push_back(record);
  }
  return out;
}

std::vector<std::string> LoadedTrace::instant_names() const {
  std::vector<std::string> names;
  for (const auto& record : of_kind(trace::RecordKind::kInstant)) {
    auto found = strings.find(record.header().name);
    if (found != strings.end()) names.push_back(found->second);
  }
  return names;
}

LoadedTrace load_trace(const std::string& path) {
  trace::TraceReader reader;
  bool opened = reader.open(path);
  return drain(reader, opened);
}

LoadedTrace load_trace_memory(const std::vector<uint8_t>& image) {
  trace::TraceReader reader;
  bool opened = reader.open_memory(image.data(), image.size(), "memory");
  return drain(reader, opened);
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/moescope_test_" + std::to_string(getpid()) +
         "_" + name;
}

}  // namespace moescope::testing

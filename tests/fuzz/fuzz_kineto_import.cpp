// libFuzzer target: a Kineto / Chrome trace JSON, imported and followed through report, export
// and diff (fuzz_pipeline.h). Nothing may crash, overflow or trip a sanitizer; unusable events
// are skipped and reported.
//
// Structure-aware: LLVMFuzzerCustomMutator parses the input as JSON and changes one value or
// its type inside it (a number where a string was, null, 1e300, INT64_MIN, a key removed, an
// event duplicated, a phase or category swapped for another that the importer knows), so most
// inputs stay valid JSON and reach the importer's field checks rather than the parser's.
//
// With MOESCOPE_FUZZ_KINETO_SEEDS=DIR and MOESCOPE_FUZZ_KINETO_SOURCES=a.json.gz:b.json.gz set,
// LLVMFuzzerInitialize first cuts the real traces into small valid seeds (windows of events
// plus the file's distributedInfo) written into DIR.
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fuzz_pipeline.h"
#include "json_mutator.h"

namespace {

using nlohmann::json;

std::string gunzip_file(const std::string& path) {
  std::string text;
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) return text;
  char buffer[1 << 16];
  int got;
  while ((got = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, size_t(got));
  gzclose(file);
  return text;
}

// Windows of `per_seed` consecutive events, and one seed per (phase, category) pair seen, so
// every kind of event the importer reads is in the corpus.
void write_seeds(const std::string& directory, const std::string& sources) {
  size_t written = 0;
  size_t begin = 0;
  while (begin <= sources.size()) {
    size_t end = sources.find(':', begin);
    if (end == std::string::npos) end = sources.size();
    const std::string source = sources.substr(begin, end - begin);
    begin = end + 1;
    if (source.empty()) continue;
    json root = json::parse(gunzip_file(source), nullptr, false);
    if (!root.is_object() || !root.contains("traceEvents")) continue;
    const json& events = root["traceEvents"];
    json head = json::object();
    if (root.contains("distributedInfo")) head["distributedInfo"] = root["distributedInfo"];
    auto write = [&](const json& seed_events) {
      json seed = head;
      seed["traceEvents"] = seed_events;
      const std::string text = seed.dump();
      moescope::fuzz::write_file(directory + "/real" + std::to_string(written++) + ".json",
                                 text.data(), text.size());
    };
    constexpr size_t kPerSeed = 24;
    const size_t stride = std::max<size_t>(kPerSeed, events.size() / 40);
    for (size_t first = 0; first < events.size(); first += stride) {
      json window = json::array();
      for (size_t i = first; i < events.size() && i < first + kPerSeed; ++i) {
        window.push_back(events[i]);
      }
      write(window);
    }
    std::vector<std::string> seen;
    json kinds = json::array();
    for (const json& event : events) {
      const std::string key = event.value("ph", "") + "/" + event.value("cat", "") +
                              (event.value("name", "") == "[memory]" ? "/memory" : "");
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      kinds.push_back(event);
    }
    write(kinds);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* directory = std::getenv("MOESCOPE_FUZZ_KINETO_SEEDS");
  const char* sources = std::getenv("MOESCOPE_FUZZ_KINETO_SOURCES");
  if (directory && sources) write_seeds(directory, sources);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  static const std::vector<std::string> kKeys = {
      "ph",          "cat",         "name",       "pid",         "tid",
      "ts",          "dur",         "args",       "device",      "stream",
      "bytes",       "correlation", "Bytes",      "Addr",        "Device Id",
      "Device Type", "rank",        "world_size", "traceEvents", "distributedInfo"};
  static const std::vector<std::string> kWords = {"X",
                                                  "i",
                                                  "I",
                                                  "C",
                                                  "M",
                                                  "s",
                                                  "kernel",
                                                  "gpu_memcpy",
                                                  "gpu_memset",
                                                  "cuda_sync",
                                                  "cuda_runtime",
                                                  "cuda_driver",
                                                  "cpu_op",
                                                  "[memory]",
                                                  "thread_name",
                                                  "ProfilerStep#7",
                                                  "gpu_user_annotation",
                                                  "Memcpy HtoD"};
  return moescope::fuzz::mutate_json_input(data, size, max_size, seed, kKeys, kWords);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = moescope::fuzz::scratch_path(".json");
  if (!moescope::fuzz::write_file(path, data, size)) return 0;
  moescope::fuzz::run_whole_pipeline({path});
  return 0;
}

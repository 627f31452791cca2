#include "trace_path.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

namespace moescope::recorder {
namespace {

int first_integer_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    long parsed = std::strtol(value, &end, 10);
    if (end && *end == '\0' && parsed >= 0 && parsed < (1L << 30)) return static_cast<int>(parsed);
  }
  return -1;
}

}  // namespace

ProcessIdentity current_process_identity() {
  ProcessIdentity identity;
  identity.rank = first_integer_env({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "LOCAL_RANK"});
  identity.local_rank =
      first_integer_env({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  identity.world_size = first_integer_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  identity.pid = static_cast<int>(getpid());
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) identity.host = host;
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string argument;
  while (std::getline(cmdline, argument, '\0')) {
    if (!identity.command_line.empty()) identity.command_line += ' ';
    identity.command_line += argument;
  }
  return identity;
}

std::string expand_trace_path(const std::string& pattern, const ProcessIdentity& identity) {
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      path += pattern[i];
      continue;
    }
    char placeholder = pattern[++i];
    switch (placeholder) {
      case 'r':
        path += std::to_string(identity.rank < 0 ? 0 : identity.rank);
        break;
      case 'p':
        path += std::to_string(identity.pid);
        break;
      case 'h':
        path += identity.host.empty() ? "localhost" : identity.host;
        break;
      case '%':
        path += '%';
        break;
      default:
        path += '%';
        path += placeholder;
    }
  }
  return path;
}

std::string build_metadata_json(const ProcessIdentity& identity, const char* extra_json,
                                unsigned long long start_ns) {
  nlohmann::json metadata = {
      {"format", "moescope"},
      {"recorder_version", "0.1.0"},
      {"host", identity.host},
      {"pid", identity.pid},
      {"rank", identity.rank},
      {"local_rank", identity.local_rank},
      {"world_size", identity.world_size},
      {"command_line", identity.command_line},
      {"clock", "CLOCK_MONOTONIC"},
      {"start_ns", start_ns},
      {"start_unix_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count()},
  };
  if (extra_json && *extra_json) {
    nlohmann::json extra = nlohmann::json::parse(extra_json, nullptr, /*allow_exceptions=*/false);
    if (extra.is_object()) {
      metadata.update(extra);
    } else {
      std::fprintf(stderr, "moescope: ignoring trace metadata that is not a JSON object\n");
    }
  }
  return metadata.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moescope::recorder

// --ranks (MOESCOPE_RANKS): the ranks not listed run without the shim in their path.
//
// A launcher (torchrun, mpirun) starts every rank with the environment `moescope record` gave
// it, LD_PRELOAD included. The launcher has no rank itself, so its shim stays idle and
// interposes execve(): a rank that is not listed (RANK in the new program's environment) is
// exec'd with moescope taken out of its environment (LD_PRELOAD, the NVTX/CUDA injection paths,
// the Python startup folder, MOESCOPE_OUTPUT), so it never loads the shim. A rank started some
// other way still finds the shim preloaded; it then stays idle (shim_session.cpp).
//
// execve() runs in a child between fork (or vfork) and exec: only async-signal-safe work here,
// no allocation; the environment is rebuilt on the stack.
#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include <cstring>

#include "moescope/trace/recording_environment.h"
#include "shim_options.h"

namespace moescope::inject {
namespace {

using ExecveFunction = int (*)(const char*, char* const[], char* const[]);

ExecveFunction g_real_execve = nullptr;
bool g_filter_ranks = false;
constexpr int kMaxSelectableRank = 1 << 16;
unsigned char g_selected[kMaxSelectableRank / 8];

bool starts_with(const char* text, const char* prefix) {
  return std::strncmp(text, prefix, std::strlen(prefix)) == 0;
}

// `entry` is "NAME=...".
bool assigns(const char* entry, const char* name) {
  return starts_with(entry, name) && entry[std::strlen(name)] == '=';
}

// The rank in `environment` (RANK=, else OMPI_COMM_WORLD_RANK=, else SLURM_PROCID=), -1 if none.
int rank_in(char* const environment[]) {
  static const char* const kNames[] = {"RANK=", "OMPI_COMM_WORLD_RANK=", "SLURM_PROCID="};
  for (const char* name : kNames) {
    for (char* const* entry = environment; entry && *entry; ++entry) {
      if (!starts_with(*entry, name)) continue;
      const char* digits = *entry + std::strlen(name);
      if (*digits < '0' || *digits > '9') return -1;
      long rank = 0;
      for (; *digits >= '0' && *digits <= '9' && rank < kMaxSelectableRank; ++digits) {
        rank = rank * 10 + (*digits - '0');
      }
      return static_cast<int>(rank);
    }
  }
  return -1;
}

bool selected(int rank) {
  if (rank < 0 || rank >= kMaxSelectableRank) return rank < 0;
  return g_selected[rank / 8] & (1u << (rank % 8));
}

// Copies the ':'-separated `value` into `out` without the entries that contain `drop`.
void copy_without(const char* value, const char* drop, char* out, size_t room) {
  size_t used = 0;
  const char* entry = value;
  while (*entry) {
    const char* end = entry;
    while (*end && *end != ':' && *end != ' ') ++end;
    size_t length = static_cast<size_t>(end - entry);
    bool keep = length > 0;
    if (keep) {
      // Does the entry contain `drop`?
      size_t drop_length = std::strlen(drop);
      for (size_t i = 0; i + drop_length <= length; ++i) {
        if (std::strncmp(entry + i, drop, drop_length) == 0) {
          keep = false;
          break;
        }
      }
    }
    if (keep && used + length + 2 < room) {
      if (used) out[used++] = ':';
      std::memcpy(out + used, entry, length);
      used += length;
    }
    entry = *end ? end + 1 : end;
  }
  out[used] = '\0';
}

// Resolved when the shim loads: dlsym is not safe between fork and exec.
__attribute__((constructor)) void resolve_real_execve() {
  g_real_execve = reinterpret_cast<ExecveFunction>(dlsym(RTLD_NEXT, "execve"));
}

}  // namespace

void install_rank_filter(const ShimOptions& options) {
  if (options.ranks.empty()) return;
  // The shim's constructor may run before this file's: resolve here too.
  if (!g_real_execve) resolve_real_execve();
  for (int rank = 0; rank < kMaxSelectableRank; ++rank) {
    if (rank_is_selected(options.ranks, rank)) g_selected[rank / 8] |= 1u << (rank % 8);
  }
  g_filter_ranks = g_real_execve != nullptr;
}

}  // namespace moescope::inject

extern "C" __attribute__((visibility("default"))) int execve(const char* path, char* const argv[],
                                                             char* const envp[]) {
  using namespace moescope::inject;
  ExecveFunction real = g_real_execve;
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (!g_filter_ranks || selected(rank_in(envp))) return real(path, argv, envp);
  size_t count = 0;
  while (envp && envp[count]) ++count;
  auto** filtered = static_cast<char**>(alloca((count + 1) * sizeof(char*)));
  constexpr size_t kRoom = 16384;
  char* preload = static_cast<char*>(alloca(kRoom));
  char* python_path = static_cast<char*>(alloca(kRoom));
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    const char* entry = envp[i];
    if (assigns(entry, moescope::trace::environment::kOutput) ||
        assigns(entry, "NVTX_INJECTION64_PATH") || assigns(entry, "CUDA_INJECTION64_PATH")) {
      continue;
    }
    if (starts_with(entry, "LD_PRELOAD=")) {
      std::memcpy(preload, "LD_PRELOAD=", 11);
      copy_without(entry + 11, "libmoescope_inject", preload + 11, kRoom - 11);
      filtered[kept++] = preload;
      continue;
    }
    if (starts_with(entry, "PYTHONPATH=")) {
      std::memcpy(python_path, "PYTHONPATH=", 11);
      copy_without(entry + 11, "moescope_startup", python_path + 11, kRoom - 11);
      filtered[kept++] = python_path;
      continue;
    }
    filtered[kept++] = const_cast<char*>(entry);
  }
  filtered[kept] = nullptr;
  return real(path, argv, filtered);
}

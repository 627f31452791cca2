// Calls the host-only NCCL functions (no GPU needed) of the REAL libnccl.so.2: run under the
// moescope shim, ncclGetVersion/ncclGetUniqueId go through the interposer, while the direct
// pncclGetVersion call gives the value to compare with.
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  int direct_version = 0;
  ncclResult_t version_result = ncclGetVersion(&version);
  ncclResult_t direct_result = pncclGetVersion(&direct_version);
  ncclUniqueId id{};
  ncclResult_t id_result = ncclGetUniqueId(&id);
  bool id_filled = false;
  for (char byte : id.internal) id_filled = id_filled || byte != 0;
  std::printf("version %d %d direct %d %d unique_id %d %d\n", static_cast<int>(version_result),
              version, static_cast<int>(direct_result), direct_version, static_cast<int>(id_result),
              id_filled ? 1 : 0);
  return 0;
}

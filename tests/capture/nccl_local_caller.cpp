// A library that links the REAL libnccl.so.2, opened by nccl_local_scope_program with
// RTLD_LOCAL: NCCL then sits in a local scope, as the torch wheel's copy does under Python.
#include <nccl.h>

extern "C" int local_caller_version(int* version) {
  return static_cast<int>(ncclGetVersion(version));
}

extern "C" int local_caller_unique_id_filled() {
  ncclUniqueId id{};
  if (ncclGetUniqueId(&id) != ncclSuccess) return -1;
  for (char byte : id.internal) {
    if (byte != 0) return 1;
  }
  return 0;
}

// How programs reach NCCL without linking it:
//   local LIBRARY  dlopen()s LIBRARY (which links the real libnccl.so.2) with RTLD_LOCAL, after
//                  the shim started, and calls NCCL through it;
//   probe          looks NCCL up with dlsym(RTLD_DEFAULT) with no NCCL loaded at all.
// Prints what the calls returned, for nccl_interpose_test.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc == 3 && !std::strcmp(argv[1], "local")) {
    void* library = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      std::printf("dlopen failed: %s\n", dlerror());
      return 2;
    }
    auto version_of = reinterpret_cast<int (*)(int*)>(dlsym(library, "local_caller_version"));
    auto unique_id = reinterpret_cast<int (*)()>(dlsym(library, "local_caller_unique_id_filled"));
    // The real library's own answer, from NCCL's profiling twin in the same local scope.
    auto direct = reinterpret_cast<int (*)(int*)>(dlsym(library, "pncclGetVersion"));
    int version = 0, direct_version = 0;
    int result = version_of(&version);
    int direct_result = direct ? direct(&direct_version) : -1;
    std::printf("version %d %d direct %d %d unique_id %d\n", result, version, direct_result,
                direct_version, unique_id());
    return 0;
  }
  if (argc == 2 && !std::strcmp(argv[1], "probe")) {
    auto probed = reinterpret_cast<int (*)(int*)>(dlsym(RTLD_DEFAULT, "ncclGetVersion"));
    int version = 0;
    std::printf("probe found %s result %d\n", probed ? "yes" : "no",
                probed ? probed(&version) : -1);
    return 0;
  }
  std::fprintf(stderr, "usage: %s local LIBRARY | probe\n", argv[0]);
  return 2;
}

// Finds the real NCCL a process loaded, wherever it loaded it, so the interposer can forward.
//
// `dlsym(RTLD_NEXT, ...)` only sees libraries in the global scope. The torch wheel loads
// libnccl.so.2 from its nvidia/ package folder as a dependency of libtorch_cuda.so, which
// Python opens with RTLD_LOCAL: the library's callers still bind to our preloaded `ncclX`
// (the global scope is searched first), but RTLD_NEXT does not see the real one. So the search
// goes: the global scope after us, then every loaded object (in load order) that defines the
// function, our own library excluded. A miss is not cached: NCCL may be loaded later.
#pragma once

#include <string>

namespace moescope::inject {

struct NcclLibrary {
  std::string path;           // the object that defines the functions ("" when none is loaded)
  bool global_scope = false;  // found through RTLD_NEXT (true) or in a local scope (false)
};

// The real entry point for `name` ("AllReduce"): `pncclAllReduce` (NCCL's profiling twin) or
// `ncclAllReduce` of the real library; nullptr when no loaded object other than ours has it.
void* find_real_nccl_function(const char* name);

// The library find_real_nccl_function found last (empty path before the first success).
NcclLibrary found_nccl_library();

}  // namespace moescope::inject

#include "nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace moescope::inject {
namespace {

// The object a found library was opened as, kept open: NCCL must not go away under pointers
// we handed out, even if the program dlclose()s it (torch never does).
struct FoundLibrary {
  std::mutex mutex;
  void* handle = nullptr;  // dlopen(RTLD_NOLOAD) of the object found in a local scope
  NcclLibrary described;
};

FoundLibrary& found() {
  static FoundLibrary* instance = new FoundLibrary;  // leaked: NCCL calls may come at exit
  return *instance;
}

const void* own_base() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&find_real_nccl_function), &info) ? info.dli_fbase
                                                                            : nullptr;
  }();
  return base;
}

std::string object_of(void* function) {
  Dl_info info{};
  return dladdr(function, &info) && info.dli_fname ? info.dli_fname : "";
}

bool is_ours(void* function) {
  Dl_info info{};
  return dladdr(function, &info) && info.dli_fbase == own_base();
}

// `pncclX` first: NCCL's own twin, never interposed by anyone; then `ncclX`.
void* lookup(void* handle, const char* name) {
  std::string profiling = std::string("pnccl") + name;
  void* function = dlsym(handle, profiling.c_str());
  if (!function) function = dlsym(handle, (std::string("nccl") + name).c_str());
  return function && !is_ours(function) ? function : nullptr;
}

std::vector<std::string> loaded_objects() {
  std::vector<std::string> paths;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && info->dlpi_name[0] == '/') {
          static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
        }
        return 0;
      },
      &paths);
  return paths;
}

// Every loaded object but ours, in load order; the first that defines `name` (or one of its
// dependencies does) wins. dlopen runs outside dl_iterate_phdr, which holds the loader's lock.
void* scan_loaded_objects(FoundLibrary& state, const char* name) {
  for (const std::string& path : loaded_objects()) {
    void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    void* function = lookup(handle, name);
    dlclose(handle);
    if (!function) continue;
    std::string provider = object_of(function);
    state.handle = dlopen(provider.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    state.described = {provider, false};
    return function;
  }
  return nullptr;
}

}  // namespace

void* find_real_nccl_function(const char* name) {
  FoundLibrary& state = found();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (void* function = lookup(RTLD_NEXT, name)) {
    if (state.described.path.empty()) state.described = {object_of(function), true};
    return function;
  }
  if (state.handle) {
    if (void* function = lookup(state.handle, name)) return function;
  }
  return scan_loaded_objects(state, name);
}

NcclLibrary found_nccl_library() {
  FoundLibrary& state = found();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.described;
}

}  // namespace moescope::inject

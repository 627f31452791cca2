// The shim as the NVTX injection library: NVTX calls `InitializeInjectionNvtx2` on the first NVTX
// call of each module that embeds NVTX (NVTX3 is header-only, so a process may call it several
// times), and we fill that module's CORE and CORE2 callback tables with the handlers below.
//
//   NVTX                                   recorder
//   nvtxRangePush / nvtxDomainRangePushEx  span begin (nested per thread)
//   nvtxRangePop / nvtxDomainRangePop      span end
//   nvtxRangeStart / End (any thread)      range start / range end (by id)
//   nvtxMark / nvtxDomainMarkEx            instant
//   domains, categories                    the span's domain: "<domain>[/<category name>]"
//   registered strings                     interned names
//   nvtxNameOsThread                       the thread's track name
//
// Handlers run on the host's hot paths: no locks or allocation for ASCII and registered
// messages (names are interned through the recorder's per-thread cache).
#include <nvtx3/nvToolsExt.h>
#include <sys/auxv.h>

#include <cstring>
#include <new>
#include <string>

#include "moescope/recorder.h"
#include "nvtx_handles.h"
#include "recorder.h"

namespace moescope::inject {
namespace {

// NVTX's push/pop levels per thread, returned to the caller as NVTX defines them (0-based
// level of the range pushed or popped; negative when nothing was open). Of these, the innermost
// `t_recorded_depth` were recorded: a pop of a range pushed before recording started (or by the
// parent of a forked child) writes no unmatched span end.
__attribute__((tls_model("initial-exec"))) thread_local int t_push_depth = 0;
__attribute__((tls_model("initial-exec"))) thread_local int t_recorded_depth = 0;

NvtxDomain& domain_of(nvtxDomainHandle_t handle) {
  return handle ? *reinterpret_cast<NvtxDomain*>(handle) : default_nvtx_domain();
}

// ASCII messages are nearly always string literals: a per-thread cache keyed by the pointer
// skips hashing. An entry is trusted only if its stored copy still equals the text (the same
// address may hold another string later) and it belongs to the current recording.
struct AsciiNameCache {
  struct Entry {
    const char* pointer = nullptr;
    uint64_t generation = 0;
    moescope_name_t id = 0;
    char text[52] = {};
  };
  Entry entries[64];
};
// A pointer in static TLS (the cache itself is on the heap): a few bytes, so the shim still
// loads with dlopen (static TLS left for dlopen'ed libraries is small).
__attribute__((tls_model("initial-exec"))) thread_local AsciiNameCache* t_ascii_names = nullptr;
// Frees the thread's cache when the thread exits (touched once, when the cache is created).
struct AsciiNameCacheOwner {
  ~AsciiNameCacheOwner() {
    delete t_ascii_names;
    t_ascii_names = nullptr;
  }
};
thread_local AsciiNameCacheOwner t_ascii_names_owner;

moescope_name_t intern_ascii(const char* text) {
  if (!text) return 0;
  AsciiNameCache* cache = t_ascii_names;
  if (!cache) {
    cache = t_ascii_names = new (std::nothrow) AsciiNameCache;
    if (!cache) return moescope_intern_n(text, std::strlen(text));
    (void)&t_ascii_names_owner;
  }
  auto& entry = cache->entries[(reinterpret_cast<uintptr_t>(text) >> 3) & 63];
  uint64_t generation = recorder::Recorder::instance().generation();
  if (entry.pointer == text && entry.generation == generation &&
      std::strcmp(entry.text, text) == 0) {
    return entry.id;
  }
  size_t length = std::strlen(text);
  moescope_name_t id = moescope_intern_n(text, length);
  if (length < sizeof(entry.text)) {
    std::memcpy(entry.text, text, length + 1);
    entry.pointer = text;
    entry.generation = generation;
    entry.id = id;
  } else {
    entry.pointer = nullptr;
  }
  return id;
}

moescope_name_t intern_wide(const wchar_t* text) {
  std::string utf8 = utf8_from_wide(text);
  return moescope_intern_n(utf8.data(), utf8.size());
}

bool has_field(const nvtxEventAttributes_t* attributes, size_t end_offset) {
  return attributes && attributes->size >= end_offset;
}

moescope_name_t message_name(const nvtxEventAttributes_t* attributes) {
  if (!has_field(attributes,
                 offsetof(nvtxEventAttributes_t, message) + sizeof(attributes->message))) {
    return 0;
  }
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return intern_ascii(attributes->message.ascii);
    case NVTX_MESSAGE_TYPE_UNICODE:
      return intern_wide(attributes->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return attributes->message.registered
                 ? reinterpret_cast<CachedName*>(attributes->message.registered)->id()
                 : 0;
    default:
      return 0;
  }
}

moescope_name_t event_domain(NvtxDomain& domain, const nvtxEventAttributes_t* attributes) {
  uint32_t category =
      has_field(attributes, offsetof(nvtxEventAttributes_t, category) + sizeof(uint32_t))
          ? attributes->category
          : 0;
  return domain.id_for_category(category);
}

// ---- push/pop ----------------------------------------------------------------------------------

int push(moescope_name_t domain, moescope_name_t name) {
  moescope_span_begin_impl(domain, name);
  ++t_recorded_depth;
  return t_push_depth++;
}

int pop() {
  if (t_push_depth <= 0) return -1;
  if (t_recorded_depth > 0) {
    --t_recorded_depth;
    if (moescope_recording) moescope_span_end_impl();
  }
  return --t_push_depth;
}

int NVTX_API on_range_push_a(const char* message) {
  if (!moescope_recording) return t_push_depth++;
  apply_pending_thread_name();
  return push(0, intern_ascii(message));
}

int NVTX_API on_range_push_w(const wchar_t* message) {
  if (!moescope_recording) return t_push_depth++;
  apply_pending_thread_name();
  return push(0, intern_wide(message));
}

int NVTX_API on_range_push_ex(const nvtxEventAttributes_t* attributes) {
  if (!moescope_recording) return t_push_depth++;
  apply_pending_thread_name();
  return push(event_domain(default_nvtx_domain(), attributes), message_name(attributes));
}

int NVTX_API on_range_pop() {
  return pop();
}

int NVTX_API on_domain_range_push_ex(nvtxDomainHandle_t domain,
                                     const nvtxEventAttributes_t* attributes) {
  if (!moescope_recording) return t_push_depth++;
  apply_pending_thread_name();
  return push(event_domain(domain_of(domain), attributes), message_name(attributes));
}

int NVTX_API on_domain_range_pop(nvtxDomainHandle_t) {
  return pop();
}

// ---- start/end ---------------------------------------------------------------------------------

nvtxRangeId_t NVTX_API on_range_start_a(const char* message) {
  return moescope_range_start(0, moescope_recording ? intern_ascii(message) : 0);
}

nvtxRangeId_t NVTX_API on_range_start_w(const wchar_t* message) {
  return moescope_range_start(0, moescope_recording ? intern_wide(message) : 0);
}

nvtxRangeId_t NVTX_API on_range_start_ex(const nvtxEventAttributes_t* attributes) {
  if (!moescope_recording) return moescope_range_start(0, 0);
  return moescope_range_start(event_domain(default_nvtx_domain(), attributes),
                              message_name(attributes));
}

nvtxRangeId_t NVTX_API on_domain_range_start_ex(nvtxDomainHandle_t domain,
                                                const nvtxEventAttributes_t* attributes) {
  if (!moescope_recording) return moescope_range_start(0, 0);
  return moescope_range_start(event_domain(domain_of(domain), attributes),
                              message_name(attributes));
}

void NVTX_API on_range_end(nvtxRangeId_t id) {
  moescope_range_end(id);
}

void NVTX_API on_domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
  moescope_range_end(id);
}

// ---- marks
// ---------------------------------------------------------------------------------------

void NVTX_API on_mark_a(const char* message) {
  if (moescope_recording) moescope_instant(0, intern_ascii(message));
}

void NVTX_API on_mark_w(const wchar_t* message) {
  if (moescope_recording) moescope_instant(0, intern_wide(message));
}

void NVTX_API on_mark_ex(const nvtxEventAttributes_t* attributes) {
  if (moescope_recording) {
    moescope_instant(event_domain(default_nvtx_domain(), attributes), message_name(attributes));
  }
}

void NVTX_API on_domain_mark_ex(nvtxDomainHandle_t domain,
                                const nvtxEventAttributes_t* attributes) {
  if (moescope_recording) {
    moescope_instant(event_domain(domain_of(domain), attributes), message_name(attributes));
  }
}

// ---- names
// ---------------------------------------------------------------------------------------

void NVTX_API on_name_category_a(uint32_t category, const char* name) {
  if (name) default_nvtx_domain().name_category(category, name);
}

void NVTX_API on_name_category_w(uint32_t category, const wchar_t* name) {
  if (name) default_nvtx_domain().name_category(category, utf8_from_wide(name));
}

void NVTX_API on_domain_name_category_a(nvtxDomainHandle_t domain, uint32_t category,
                                        const char* name) {
  if (name) domain_of(domain).name_category(category, name);
}

void NVTX_API on_domain_name_category_w(nvtxDomainHandle_t domain, uint32_t category,
                                        const wchar_t* name) {
  if (name) domain_of(domain).name_category(category, utf8_from_wide(name));
}

void NVTX_API on_name_os_thread_a(uint32_t thread_id, const char* name) {
  if (name) name_os_thread(thread_id, name);
}

void NVTX_API on_name_os_thread_w(uint32_t thread_id, const wchar_t* name) {
  if (name) name_os_thread(thread_id, utf8_from_wide(name));
}

nvtxStringHandle_t NVTX_API on_domain_register_string_a(nvtxDomainHandle_t, const char* text) {
  auto* registered = new (std::nothrow) CachedName(text ? text : "");
  return reinterpret_cast<nvtxStringHandle_t>(registered);
}

nvtxStringHandle_t NVTX_API on_domain_register_string_w(nvtxDomainHandle_t, const wchar_t* text) {
  auto* registered = new (std::nothrow) CachedName(utf8_from_wide(text));
  return reinterpret_cast<nvtxStringHandle_t>(registered);
}

nvtxDomainHandle_t NVTX_API on_domain_create_a(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new (std::nothrow) NvtxDomain(name ? name : ""));
}

nvtxDomainHandle_t NVTX_API on_domain_create_w(const wchar_t* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new (std::nothrow) NvtxDomain(utf8_from_wide(name)));
}

void NVTX_API on_domain_destroy(nvtxDomainHandle_t) {
  // Kept alive: another thread may still be inside a call with this handle.
}

// Resources (naming of user objects) are not recorded; a non-null handle keeps callers happy.
char g_resource_placeholder;
nvtxResourceHandle_t NVTX_API on_domain_resource_create(nvtxDomainHandle_t,
                                                        nvtxResourceAttributes_t*) {
  return reinterpret_cast<nvtxResourceHandle_t>(&g_resource_placeholder);
}

void NVTX_API on_domain_resource_destroy(nvtxResourceHandle_t) {}

void NVTX_API on_initialize(const void*) {}

// ---- installation
// --------------------------------------------------------------------------------

struct Handler {
  unsigned int id;
  NvtxFunctionPointer function;
};

template <typename Function>
Handler handler(unsigned int id, Function function) {
  return Handler{id, reinterpret_cast<NvtxFunctionPointer>(function)};
}

bool install_module(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module,
                    std::initializer_list<Handler> handlers) {
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(module, &table, &size) || !table) return false;
  for (const Handler& entry : handlers) {
    // `size` is the highest valid id; slots of a newer NVTX beyond our ids stay untouched.
    if (entry.id <= size && table[entry.id]) *table[entry.id] = entry.function;
  }
  return true;
}

}  // namespace

void forget_recorded_nvtx_ranges() {
  t_recorded_depth = 0;
}

}  // namespace moescope::inject

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  using namespace moescope::inject;
  // Setuid/setgid programs are left alone.
  if (getauxval(AT_SECURE) || !get_export_table) return 0;
  auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      !callbacks->GetModuleFunctionTable) {
    return 0;
  }
  bool core = install_module(
      callbacks, NVTX_CB_MODULE_CORE,
      {handler(NVTX_CBID_CORE_MarkEx, &on_mark_ex), handler(NVTX_CBID_CORE_MarkA, &on_mark_a),
       handler(NVTX_CBID_CORE_MarkW, &on_mark_w),
       handler(NVTX_CBID_CORE_RangeStartEx, &on_range_start_ex),
       handler(NVTX_CBID_CORE_RangeStartA, &on_range_start_a),
       handler(NVTX_CBID_CORE_RangeStartW, &on_range_start_w),
       handler(NVTX_CBID_CORE_RangeEnd, &on_range_end),
       handler(NVTX_CBID_CORE_RangePushEx, &on_range_push_ex),
       handler(NVTX_CBID_CORE_RangePushA, &on_range_push_a),
       handler(NVTX_CBID_CORE_RangePushW, &on_range_push_w),
       handler(NVTX_CBID_CORE_RangePop, &on_range_pop),
       handler(NVTX_CBID_CORE_NameCategoryA, &on_name_category_a),
       handler(NVTX_CBID_CORE_NameCategoryW, &on_name_category_w),
       handler(NVTX_CBID_CORE_NameOsThreadA, &on_name_os_thread_a),
       handler(NVTX_CBID_CORE_NameOsThreadW, &on_name_os_thread_w)});
  bool core2 =
      install_module(callbacks, NVTX_CB_MODULE_CORE2,
                     {handler(NVTX_CBID_CORE2_DomainMarkEx, &on_domain_mark_ex),
                      handler(NVTX_CBID_CORE2_DomainRangeStartEx, &on_domain_range_start_ex),
                      handler(NVTX_CBID_CORE2_DomainRangeEnd, &on_domain_range_end),
                      handler(NVTX_CBID_CORE2_DomainRangePushEx, &on_domain_range_push_ex),
                      handler(NVTX_CBID_CORE2_DomainRangePop, &on_domain_range_pop),
                      handler(NVTX_CBID_CORE2_DomainResourceCreate, &on_domain_resource_create),
                      handler(NVTX_CBID_CORE2_DomainResourceDestroy, &on_domain_resource_destroy),
                      handler(NVTX_CBID_CORE2_DomainNameCategoryA, &on_domain_name_category_a),
                      handler(NVTX_CBID_CORE2_DomainNameCategoryW, &on_domain_name_category_w),
                      handler(NVTX_CBID_CORE2_DomainRegisterStringA, &on_domain_register_string_a),
                      handler(NVTX_CBID_CORE2_DomainRegisterStringW, &on_domain_register_string_w),
                      handler(NVTX_CBID_CORE2_DomainCreateA, &on_domain_create_a),
                      handler(NVTX_CBID_CORE2_DomainCreateW, &on_domain_create_w),
                      handler(NVTX_CBID_CORE2_DomainDestroy, &on_domain_destroy),
                      handler(NVTX_CBID_CORE2_Initialize, &on_initialize)});
  (void)core2;  // NVTX without CORE2 (very old) still gets the CORE handlers
  return core ? 1 : 0;
}

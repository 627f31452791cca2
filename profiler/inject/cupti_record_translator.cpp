#include "cupti_record_translator.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace moescope::inject {
namespace {

// Bounds the kernel-name cache: a program generating kernels forever (JIT) must not grow it.
constexpr size_t kMaxCachedKernelNames = 1u << 16;

// A record's end, never before its start: CUPTI reports 0 timestamps when it lacked device
// memory to time the activity.
template <typename Record>
uint64_t end_not_before_start(const Record& record) {
  return record.end >= record.start ? record.end : record.start;
}

// What every GPU activity record says (CUPTI's kernel, memcpy and memset records name these
// fields alike) as the recorder's `Info` (moescope_gpu_kernel_info / moescope_gpu_copy_info):
// the kind-specific fields are the caller's.
template <typename Info, typename Record>
Info activity_info_of(const Record& record) {
  Info info{};
  info.start_ns = record.start;
  info.end_ns = end_not_before_start(record);
  info.correlation_id = record.correlationId;
  info.device = record.deviceId;
  info.stream = record.streamId;
  return info;
}

uint32_t copy_kind_of(uint8_t cupti_kind) {
  switch (cupti_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return MOESCOPE_COPY_HTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return MOESCOPE_COPY_DTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return MOESCOPE_COPY_DTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return MOESCOPE_COPY_HTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return MOESCOPE_COPY_PTOP;
    default:
      return MOESCOPE_COPY_UNKNOWN;
  }
}

uint32_t sync_kind_of(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return MOESCOPE_SYNC_EVENT;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return MOESCOPE_SYNC_STREAM_WAIT_EVENT;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return MOESCOPE_SYNC_STREAM;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
    default:
      return MOESCOPE_SYNC_DEVICE;
  }
}

bool is_device_memory(CUpti_ActivityMemoryKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return true;
    default:
      return false;
  }
}

}  // namespace

CuptiRecordTranslator::CuptiRecordTranslator(CuptiApi& api, bool keep_all_api_calls)
    : api_(api), keep_all_api_calls_(keep_all_api_calls) {}

void CuptiRecordTranslator::translate(const CUpti_Activity& record) {
  visit_cupti_record_type(record.kind, [&](auto type) {
    using Record = typename decltype(type)::type;
    if constexpr (std::is_void_v<Record>) {
      ++counts_.other;
    } else {
      translate_record(reinterpret_cast<const Record&>(record), record.kind);
    }
  });
}

void CuptiRecordTranslator::translate_record(const CuptiKernelRecord& kernel, CUpti_ActivityKind) {
  translate_kernel(kernel);
}
void CuptiRecordTranslator::translate_record(const CuptiMemcpyRecord& copy, CUpti_ActivityKind) {
  translate_copy(copy, counts_.copies);
}
void CuptiRecordTranslator::translate_record(const CuptiMemsetRecord& memset, CUpti_ActivityKind) {
  translate_copy(memset, counts_.memsets);
}
void CuptiRecordTranslator::translate_record(const CuptiMemoryRecord& memory, CUpti_ActivityKind) {
  translate_memory(memory);
}
void CuptiRecordTranslator::translate_record(const CuptiSyncRecord& sync, CUpti_ActivityKind) {
  translate_sync(sync);
}
void CuptiRecordTranslator::translate_record(const CuptiApiRecord& call, CUpti_ActivityKind kind) {
  translate_api(call, kind == CUPTI_ACTIVITY_KIND_DRIVER ? CUPTI_CB_DOMAIN_DRIVER_API
                                                         : CUPTI_CB_DOMAIN_RUNTIME_API);
}
void CuptiRecordTranslator::translate_record(const CuptiContextRecord& context,
                                             CUpti_ActivityKind) {
  learn_context(context.contextId, context.deviceId);
}

void CuptiRecordTranslator::translate_kernel(const CuptiKernelRecord& kernel) {
  learn_context(kernel.contextId, kernel.deviceId);
  auto info = activity_info_of<moescope_gpu_kernel_info>(kernel);
  info.name = kernel_name(kernel.name);
  info.context = kernel.contextId;
  info.grid[0] = static_cast<uint32_t>(kernel.gridX);
  info.grid[1] = static_cast<uint32_t>(kernel.gridY);
  info.grid[2] = static_cast<uint32_t>(kernel.gridZ);
  info.block[0] = static_cast<uint32_t>(kernel.blockX);
  info.block[1] = static_cast<uint32_t>(kernel.blockY);
  info.block[2] = static_cast<uint32_t>(kernel.blockZ);
  info.shared_memory_bytes =
      static_cast<uint32_t>(kernel.staticSharedMemory + kernel.dynamicSharedMemory);
  info.registers_per_thread = kernel.registersPerThread;
  moescope_gpu_kernel(&info);
  ++counts_.kernels;
}

// A memcpy and a memset are both a moescope copy: a memset with its value, a memcpy with its
// direction.
template <typename Record>
void CuptiRecordTranslator::translate_copy(const Record& copy, uint64_t& count) {
  learn_context(copy.contextId, copy.deviceId);
  auto info = activity_info_of<moescope_gpu_copy_info>(copy);
  info.bytes = copy.bytes;
  if constexpr (std::is_same_v<Record, CuptiMemsetRecord>) {
    info.value = copy.value;
    info.is_memset = 1;
  } else {
    info.copy_kind = copy_kind_of(copy.copyKind);
    info.is_memset = 0;
  }
  moescope_gpu_copy(&info);
  ++count;
}

void CuptiRecordTranslator::translate_memory(const CuptiMemoryRecord& memory) {
  bool is_free;
  switch (memory.memoryOperationType) {
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION:
      is_free = false;
      break;
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE:
      is_free = true;
      break;
    default:
      ++counts_.other;
      return;
  }
  learn_context(memory.contextId, memory.deviceId);
  int32_t device = is_device_memory(memory.memoryKind) ? static_cast<int32_t>(memory.deviceId) : -1;
  moescope_memory_event_at(memory.timestamp, memory.address, memory.bytes, device,
                           MOESCOPE_MEM_CUDA_DRIVER, is_free ? 1 : 0);
  ++counts_.memory;
}

void CuptiRecordTranslator::translate_sync(const CuptiSyncRecord& sync) {
  uint64_t end = end_not_before_start(sync);
  moescope_gpu_sync(sync_kind_of(sync.type), sync.start, end, device_of_context(sync.contextId),
                    sync.streamId, sync.correlationId);
  ++counts_.syncs;
}

void CuptiRecordTranslator::translate_api(const CuptiApiRecord& call, CUpti_CallbackDomain domain) {
  const ApiName& name = api_name(domain, call.cbid);
  if (!name.keep) {
    ++counts_.api_calls_skipped;
    return;
  }
  uint64_t end = end_not_before_start(call);
  moescope_api_call(name.name, call.start, end, call.correlationId);
  ++counts_.api_calls;
}

moescope_name_t CuptiRecordTranslator::kernel_name(const char* mangled) {
  if (!mangled) return moescope_intern("<unnamed kernel>");
  auto found = kernel_names_.find(mangled);
  if (found != kernel_names_.end()) return found->second;
  if (kernel_names_.size() >= kMaxCachedKernelNames) kernel_names_.clear();
  moescope_name_t id = moescope_intern(demangle(mangled).c_str());
  kernel_names_.emplace(mangled, id);
  return id;
}

const CuptiRecordTranslator::ApiName& CuptiRecordTranslator::api_name(CUpti_CallbackDomain domain,
                                                                      uint32_t cbid) {
  uint64_t key = (static_cast<uint64_t>(domain) << 32) | cbid;
  auto found = api_names_.find(key);
  if (found != api_names_.end()) return found->second;
  ApiName entry;
  const char* raw = api_.callback_name(domain, cbid);
  std::string name =
      raw ? strip_version_suffix(raw)
          : std::string(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "cudaApi#" : "cuApi#") +
                std::to_string(cbid);
  entry.keep = keep_all_api_calls_ || is_gpu_work_call(name);
  if (entry.keep) entry.name = moescope_intern(name.c_str());
  return api_names_.emplace(key, entry).first->second;
}

uint32_t CuptiRecordTranslator::device_of_context(uint32_t context_id) const {
  auto found = context_devices_.find(context_id);
  return found == context_devices_.end() ? kUnknownDevice : found->second;
}

void CuptiRecordTranslator::learn_context(uint32_t context_id, uint32_t device_id) {
  context_devices_[context_id] = device_id;
}

std::string CuptiRecordTranslator::strip_version_suffix(const char* callback_name) {
  std::string name(callback_name ? callback_name : "");
  size_t suffix = name.rfind("_v");
  if (suffix == std::string::npos || suffix == 0 || suffix + 2 == name.size()) return name;
  for (size_t i = suffix + 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(0, suffix);
}

bool CuptiRecordTranslator::is_gpu_work_call(const std::string& name) {
  static constexpr const char* kMarkers[] = {
      "Launch",      "Memcpy",          "Memset",      "Malloc",   "MemAlloc", "Free",
      "Synchronize", "StreamWaitEvent", "EventRecord", "cuMemMap", "MemPool"};
  for (const char* marker : kMarkers) {
    if (name.find(marker) != std::string::npos) return true;
  }
  return false;
}

std::string CuptiRecordTranslator::demangle(const char* name) {
  if (!name) return {};
  if (std::strncmp(name, "_Z", 2) != 0) return name;
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !readable) return name;
  std::string result(readable);
  std::free(readable);
  return result;
}

}  // namespace moescope::inject

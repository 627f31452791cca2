#include "cupti_compatibility.h"

namespace moescope::inject {
namespace {

// From CUDA 13.0 on the version reads xxyyzz (major, minor, CUPTI update); before it was a
// small counter (26 = CUDA 12.8), never compatible with the new scheme.
constexpr uint32_t kFirstDottedVersion = 130000;

const char* compiled_struct_name(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return "CUpti_ActivityKernel10";
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return "CUpti_ActivityMemcpy6";
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return "CUpti_ActivityMemset4";
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      return "CUpti_ActivityMemory4";
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return "CUpti_ActivitySynchronization2";
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return "CUpti_ActivityAPI";
    case CUPTI_ACTIVITY_KIND_CONTEXT:
      return "CUpti_ActivityContext3";
    default:
      return nullptr;
  }
}

}  // namespace

bool cupti_versions_compatible(uint32_t loaded, uint32_t compiled) {
  if (loaded < kFirstDottedVersion || compiled < kFirstDottedVersion) return loaded == compiled;
  return loaded / 100 == compiled / 100;  // same CUDA major.minor; the CUPTI update may differ
}

std::string cupti_version_refusal(uint32_t loaded, uint32_t compiled) {
  return "CUPTI " + std::to_string(loaded) + " does not match the compiled " +
         std::to_string(compiled) + ": GPU activity not recorded";
}

size_t compiled_record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      return sizeof(CUpti_ActivityMemory4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_CONTEXT:
      return sizeof(CUpti_ActivityContext3);
    default:
      return 0;
  }
}

std::string cupti_record_layout_refusal(CUpti_ActivityKind kind, size_t extent) {
  const size_t compiled = compiled_record_size(kind);
  if (compiled == 0 || extent >= compiled) return {};
  return "CUPTI record of kind " + std::to_string(static_cast<int>(kind)) + " spans " +
         std::to_string(extent) + " bytes, compiled " + compiled_struct_name(kind) + " is " +
         std::to_string(compiled) + ": GPU activity not recorded";
}

}  // namespace moescope::inject

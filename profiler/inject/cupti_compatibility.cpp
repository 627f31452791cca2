#include "cupti_compatibility.h"

#include <type_traits>

#include "cupti_record_types.h"

namespace moescope::inject {
namespace {

// From CUDA 13.0 on the version reads xxyyzz (major, minor, CUPTI update); before it was a
// small counter (26 = CUDA 12.8), never compatible with the new scheme.
constexpr uint32_t kFirstDottedVersion = 130000;

// The struct's size and name for `kind` (cupti_record_types.h); {0, nullptr} when not read.
struct CompiledRecord {
  size_t size = 0;
  const char* name = nullptr;
};

CompiledRecord compiled_record(CUpti_ActivityKind kind) {
  return visit_cupti_record_type(kind, [](auto type) {
    using Record = typename decltype(type)::type;
    if constexpr (std::is_void_v<Record>) {
      return CompiledRecord{};
    } else {
      return CompiledRecord{sizeof(Record), CuptiRecordName<Record>::value};
    }
  });
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
  return compiled_record(kind).size;
}

std::string cupti_record_layout_refusal(CUpti_ActivityKind kind, size_t extent) {
  const CompiledRecord compiled_struct = compiled_record(kind);
  const size_t compiled = compiled_struct.size;
  if (compiled == 0 || extent >= compiled) return {};
  return "CUPTI record of kind " + std::to_string(static_cast<int>(kind)) + " spans " +
         std::to_string(extent) + " bytes, compiled " + compiled_struct.name + " is " +
         std::to_string(compiled) + ": GPU activity not recorded";
}

}  // namespace moescope::inject

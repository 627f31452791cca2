// The CUPTI activity record structs the shim reads, named once (Kineto's `using` aliases), and
// the one mapping from an activity kind to its struct. Everything else (translator, layout
// check, tests) goes through these: moving to a new CUPTI struct version is one line here.
//
//   kind                                   struct (CUPTI 13.0)
//   CONCURRENT_KERNEL, KERNEL              CuptiKernelRecord   = CUpti_ActivityKernel10
//   MEMCPY                                 CuptiMemcpyRecord   = CUpti_ActivityMemcpy6
//   MEMSET                                 CuptiMemsetRecord   = CUpti_ActivityMemset4
//   MEMORY2                                CuptiMemoryRecord   = CUpti_ActivityMemory4
//   SYNCHRONIZATION                        CuptiSyncRecord     = CUpti_ActivitySynchronization2
//   RUNTIME, DRIVER                        CuptiApiRecord      = CUpti_ActivityAPI
//   CONTEXT                                CuptiContextRecord  = CUpti_ActivityContext3
#pragma once

#include <cupti_activity.h>

#include <cstddef>

namespace moescope::inject {

// The alias and the struct's name for messages, from one spelling.
#define MOESCOPE_CUPTI_RECORD(alias, cupti_struct)      \
  using alias = cupti_struct;                           \
  template <>                                           \
  struct CuptiRecordName<cupti_struct> {                \
    static constexpr const char* value = #cupti_struct; \
  };

template <typename Record>
struct CuptiRecordName;

MOESCOPE_CUPTI_RECORD(CuptiKernelRecord, CUpti_ActivityKernel10)
MOESCOPE_CUPTI_RECORD(CuptiMemcpyRecord, CUpti_ActivityMemcpy6)
MOESCOPE_CUPTI_RECORD(CuptiMemsetRecord, CUpti_ActivityMemset4)
MOESCOPE_CUPTI_RECORD(CuptiMemoryRecord, CUpti_ActivityMemory4)
MOESCOPE_CUPTI_RECORD(CuptiSyncRecord, CUpti_ActivitySynchronization2)
MOESCOPE_CUPTI_RECORD(CuptiApiRecord, CUpti_ActivityAPI)
MOESCOPE_CUPTI_RECORD(CuptiContextRecord, CUpti_ActivityContext3)
#undef MOESCOPE_CUPTI_RECORD

// A type as a value, for visitors; CuptiRecordType<void> for kinds the shim does not read.
template <typename Record>
struct CuptiRecordType {
  using type = Record;
};

// The one kind -> struct mapping: calls visitor(CuptiRecordType<Struct>{}) for `kind`.
template <typename Visitor>
decltype(auto) visit_cupti_record_type(CUpti_ActivityKind kind, Visitor&& visitor) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL:
      return visitor(CuptiRecordType<CuptiKernelRecord>{});
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return visitor(CuptiRecordType<CuptiMemcpyRecord>{});
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return visitor(CuptiRecordType<CuptiMemsetRecord>{});
    case CUPTI_ACTIVITY_KIND_MEMORY2:
      return visitor(CuptiRecordType<CuptiMemoryRecord>{});
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return visitor(CuptiRecordType<CuptiSyncRecord>{});
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return visitor(CuptiRecordType<CuptiApiRecord>{});
    case CUPTI_ACTIVITY_KIND_CONTEXT:
      return visitor(CuptiRecordType<CuptiContextRecord>{});
    default:
      return visitor(CuptiRecordType<void>{});
  }
}

}  // namespace moescope::inject

// Does the libcupti loaded at run time speak the record layouts this shim was compiled against?
//
// CUPTI hands out activity records as raw structs of its own version: CUDA 12.8's CUPTI (API
// version 26) fills CUpti_ActivityKernel9, 13.0's (130001) CUpti_ActivityKernel10, and a later
// minor release may move to the next struct version (the 13.x docs already list
// CUpti_ActivityContext4). Reading one as the other misreads every field silently. Two checks:
//
//   version  cuptiGetVersion() against CUPTI_API_VERSION of the headers we were built with:
//            the same CUDA major.minor (xxyy of the xxyyzz scheme, CUDA >= 13) is required;
//            a mismatch refuses the capture before anything is enabled, with the note
//            "CUPTI <loaded> does not match the compiled <n>: GPU activity not recorded".
//            MOESCOPE_CUPTI_ANY_VERSION=1 accepts any version (the layout check still runs).
//   layout   each record of a translated kind must span at least the compiled struct's size
//            in the completed buffer (the distance to the next record, or to the end of the
//            valid bytes); a shorter one means another layout, and the capture stops
//            translating instead of reading past it.
#pragma once

#include <cupti_activity.h>
#include <cupti_version.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace moescope::inject {

// CUPTI_API_VERSION of the headers the shim was compiled with.
inline constexpr uint32_t kCompiledCuptiApiVersion = CUPTI_API_VERSION;

// True when records of a CUPTI reporting `loaded` have the layouts compiled for `compiled`.
bool cupti_versions_compatible(uint32_t loaded, uint32_t compiled);

// "CUPTI 26 does not match the compiled 130001: GPU activity not recorded".
std::string cupti_version_refusal(uint32_t loaded, uint32_t compiled);

// Size of the struct the translator reads for `kind` (cupti_record_types.h: CuptiKernelRecord
// for CONCURRENT_KERNEL, ...), 0 for kinds it does not read.
size_t compiled_record_size(CUpti_ActivityKind kind);

// Empty when a record of `kind` spanning `extent` bytes can be read as the compiled struct,
// else why not ("CUPTI record of kind 10 spans 184 bytes, compiled CUpti_ActivityKernel10 is
// 200: GPU activity not recorded").
std::string cupti_record_layout_refusal(CUpti_ActivityKind kind, size_t extent);

}  // namespace moescope::inject

// The slice of NCCL's C ABI (nccl.h, NCCL 2.28) the interposer needs, declared here so the shim
// builds without NCCL headers and never links NCCL. Types live in a namespace so a test can
// include the real nccl.h next to this header and check values and sizes
// (tests/capture/nccl_abi_test.cpp). Enums are int-sized exactly like NCCL's C enums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moescope::inject::nccl {

enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
  kNumDataTypes = 12,
};

// ncclRedOp_t: built-in ops 0..4, user ops (ncclRedOpCreatePreMulSum) above. Passed through.
enum RedOp : int {};

inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};

struct Comm;            // struct ncclComm (opaque)
struct Config;          // ncclConfig_t (passed through untouched)
struct SimInfo;         // ncclSimInfo_t of ncclGroupSimulateEnd (passed through untouched)
struct CudaStreamImpl;  // struct CUstream_st (opaque)
using CommHandle = Comm*;
using Stream = CudaStreamImpl*;

inline constexpr int kSplitNoColor = -1;   // NCCL_SPLIT_NOCOLOR
inline constexpr int kShrinkAbort = 0x01;  // NCCL_SHRINK_ABORT: the parent's ops are aborted

// Bytes per element, 0 for an unknown type.
constexpr size_t data_type_bytes(int dtype) {
  switch (dtype) {
    case kInt8:
    case kUint8:
    case kFloat8e4m3:
    case kFloat8e5m2:
      return 1;
    case kFloat16:
    case kBfloat16:
      return 2;
    case kInt32:
    case kUint32:
    case kFloat32:
      return 4;
    case kInt64:
    case kUint64:
    case kFloat64:
      return 8;
    default:
      return 0;
  }
}

}  // namespace moescope::inject::nccl

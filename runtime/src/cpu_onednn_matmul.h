// float32 CPU matmuls through oneDNN instead of at::mm.
//
// LibTorch's CPU wheel runs float32 at::mm through MKL, which takes a generic AVX2 path on
// non-Intel CPUs (about 200 GFLOP/s on 2 cores of the AMD EPYC CI machine), while its bundled
// oneDNN runs the same matmul with AVX-512 at over twice that. LibTorch reaches oneDNN's float32
// matmul through its `mkldnn::_linear_pointwise` operator (the one TorchInductor uses on CPU),
// which takes strided dense operands, so no layout conversion is needed. bf16 at::mm already
// goes to oneDNN and is left alone.
#pragma once

#include <ATen/ATen.h>

namespace moescope::runtime::cpu_matmul {

/// The smallest matmul (M * K * N multiply-adds) sent to oneDNN. Each call through the
/// dispatcher costs about 20 us more than at::mm's (moe_train's 2 layers x 8 experts x ~256 rows
/// x 64 x 256 ran ~9% slower per step through oneDNN), which oneDNN's faster kernel repays only
/// on larger products (a 1024 x 512 x 2048 one takes ~10 ms instead of ~22 ms).
inline constexpr int64_t kOneDnnMinMultiplyAdds = int64_t{1} << 24;

/// True when mm_out_preferring_onednn sends a [M, K] @ b [K, N] to oneDNN: float32 CPU
/// matrices of at least kOneDnnMinMultiplyAdds, oneDNN's matmul present in this LibTorch, and
/// not switched off (set_cpu_float32_gemm).
bool onednn_applies(const at::Tensor& a, const at::Tensor& b);

/// out [M, N] = a [M, K] @ b [K, N] (any strides): through oneDNN's float32 matmul (float32
/// accumulation) where onednn_applies, else at::mm_out; also at::mm_out from the first time
/// oneDNN refuses operands (with one warning).
void mm_out_preferring_onednn(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

}  // namespace moescope::runtime::cpu_matmul

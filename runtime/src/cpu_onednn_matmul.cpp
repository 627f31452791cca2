#include "cpu_onednn_matmul.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <optional>

#include "moescope/runtime/grouped_experts.h"

namespace moescope::runtime {
namespace {

std::atomic<CpuFloat32Gemm> g_cpu_float32_gemm{CpuFloat32Gemm::kOneDnn};
// Set once oneDNN has refused an operand pair: from then on at::mm, with one warning.
std::atomic<bool> g_onednn_broken{false};

// The operator handle, looked up once; empty when this LibTorch has no oneDNN matmul.
const std::optional<c10::OperatorHandle>& linear_pointwise() {
  static const std::optional<c10::OperatorHandle> handle =
      at::hasMKLDNN() ? c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""})
                      : std::nullopt;
  return handle;
}

}  // namespace

void set_cpu_float32_gemm(CpuFloat32Gemm gemm) {
  g_cpu_float32_gemm.store(gemm);
}

CpuFloat32Gemm cpu_float32_gemm() {
  return g_cpu_float32_gemm.load();
}

namespace cpu_matmul {

bool onednn_applies(const at::Tensor& a, const at::Tensor& b) {
  return g_cpu_float32_gemm.load(std::memory_order_relaxed) == CpuFloat32Gemm::kOneDnn &&
         !g_onednn_broken.load(std::memory_order_relaxed) && a.is_cpu() && b.is_cpu() &&
         a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat && a.dim() == 2 &&
         b.dim() == 2 && a.size(0) * a.size(1) * b.size(1) >= kOneDnnMinMultiplyAdds &&
         linear_pointwise().has_value();
}

void mm_out_preferring_onednn(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (onednn_applies(a, b)) {
    // linear(x, w) = x @ w^T, so b [K, N] goes in as its transposed view [N, K].
    torch::jit::Stack stack{a,
                            b.t(),
                            c10::IValue(),
                            std::string("none"),
                            c10::List<std::optional<at::Scalar>>(),
                            std::string("")};
    try {
      linear_pointwise()->callBoxed(stack);
      out.copy_(stack.at(0).toTensor());
      return;
    } catch (const c10::Error& error) {
      g_onednn_broken.store(true);
      TORCH_WARN_ONCE("moescope: oneDNN's float32 matmul failed (", error.what_without_backtrace(),
                      "); the experts fall back to at::mm");
    }
  }
  at::mm_out(out, a, b);
}

}  // namespace cpu_matmul
}  // namespace moescope::runtime

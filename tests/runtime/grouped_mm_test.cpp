// The CPU matmul choice of grouped_mm / grouped_mm_weight_grad: float32 goes through oneDNN by
// default, at::mm on request, and both give the product of each group's rows with its weight.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "cpu_onednn_matmul.h"
#include "moe_reference.h"
#include "moescope/runtime/grouped_experts.h"

namespace moescope::runtime {
namespace {

using testing::max_abs_diff;

// Restores the process-wide choice when a test ends.
class CpuGemmChoice {
 public:
  explicit CpuGemmChoice(CpuFloat32Gemm gemm) : previous_(cpu_float32_gemm()) {
    set_cpu_float32_gemm(gemm);
  }
  ~CpuGemmChoice() { set_cpu_float32_gemm(previous_); }

 private:
  CpuFloat32Gemm previous_;
};

// Each group's product in float64 with at::mm, the independent reference. a [R, K], b [G, K, N].
at::Tensor reference_grouped_mm(const at::Tensor& a, const at::Tensor& b,
                                const std::vector<int64_t>& rows) {
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    parts.push_back(a.narrow(0, start, rows[g]).to(at::kDouble).mm(b[g].to(at::kDouble)));
    start += rows[g];
  }
  return at::cat(parts);
}

// Uneven groups: an empty one, a one-row one, odd sizes. With K = N = 256 the two large ones
// (>= 256 rows) pass oneDNN's size threshold, the small ones stay on at::mm.
const std::vector<int64_t> kRows = {7, 0, 1, 333, 0, 290};
constexpr int64_t kRowsTotal = 631, kK = 256, kN = 256;

TEST(GroupedMmCpu, Float32GoesThroughOneDnnWhereLibTorchHasIt) {
  // The pinned LibTorch wheel ships oneDNN; a build without it would silently lose the fast path.
  ASSERT_TRUE(at::hasMKLDNN()) << "this LibTorch has no oneDNN";
  const at::Tensor a = at::randn({6 * 300, kK});  // 300 rows per group on average
  const at::Tensor b = at::randn({6, kK, kN});
  EXPECT_EQ(std::string(grouped_mm_implementation(a, b, false)), "loop of oneDNN matmul");
  // Small products stay on at::mm: oneDNN's per-call cost would outweigh its gain.
  EXPECT_EQ(std::string(grouped_mm_implementation(a.narrow(0, 0, 60), b, false)), "loop of at::mm");
  EXPECT_TRUE(cpu_matmul::onednn_applies(a.narrow(0, 0, 256), b[0]));
  EXPECT_FALSE(cpu_matmul::onednn_applies(a.narrow(0, 0, 255), b[0]));
  CpuGemmChoice aten(CpuFloat32Gemm::kATen);
  EXPECT_EQ(std::string(grouped_mm_implementation(a, b, false)), "loop of at::mm");
  EXPECT_EQ(std::string(grouped_mm_implementation(a.to(at::kDouble), b.to(at::kDouble), false)),
            "loop of at::mm");
}

TEST(GroupedMmCpu, BothFloat32PathsMatchTheFloat64Reference) {
  torch::manual_seed(5);
  const at::Tensor a = at::randn({kRowsTotal, kK});
  const at::Tensor b = at::randn({6, kK, kN});
  const at::Tensor b_transposed = at::randn({6, kN, kK}).transpose(1, 2);  // strided [6, K, N]
  const at::Tensor d = at::randn({kRowsTotal, kN});
  for (CpuFloat32Gemm gemm : {CpuFloat32Gemm::kOneDnn, CpuFloat32Gemm::kATen}) {
    SCOPED_TRACE(gemm == CpuFloat32Gemm::kOneDnn ? "oneDNN" : "at::mm");
    CpuGemmChoice choice(gemm);
    EXPECT_LE(max_abs_diff(grouped_mm(a, b, kRows), reference_grouped_mm(a, b, kRows)), 1e-4);
    EXPECT_LE(max_abs_diff(grouped_mm(a, b_transposed, kRows),
                           reference_grouped_mm(a, b_transposed, kRows)),
              1e-4);
    // Weight gradient: group g's a^T d; empty groups are exactly zero.
    const at::Tensor grad = grouped_mm_weight_grad(a, d, kRows);
    int64_t start = 0;
    for (size_t g = 0; g < kRows.size(); ++g) {
      const at::Tensor expected = a.narrow(0, start, kRows[g])
                                      .to(at::kDouble)
                                      .t()
                                      .mm(d.narrow(0, start, kRows[g]).to(at::kDouble));
      EXPECT_LE(max_abs_diff(grad[static_cast<int64_t>(g)], expected), 1e-4) << "group " << g;
      if (kRows[g] == 0) {
        EXPECT_EQ(grad[static_cast<int64_t>(g)].abs().max().item<float>(), 0.0f);
      }
      start += kRows[g];
    }
  }
  // oneDNN ran and was not switched off by a refused call (which would fall back to at::mm
  // silently and still give the right numbers).
  EXPECT_TRUE(cpu_matmul::onednn_applies(a.narrow(0, 0, 333), b[0]));
}

TEST(GroupedMmCpu, ATenChoiceIsExactlyALoopOfAtMm) {
  torch::manual_seed(6);
  const at::Tensor a = at::randn({kRowsTotal, kK});
  const at::Tensor b = at::randn({6, kK, kN});
  CpuGemmChoice aten(CpuFloat32Gemm::kATen);
  const at::Tensor out = grouped_mm(a, b, kRows);
  int64_t start = 0;
  for (size_t g = 0; g < kRows.size(); ++g) {
    if (kRows[g] > 0) {
      EXPECT_TRUE(at::equal(out.narrow(0, start, kRows[g]),
                            a.narrow(0, start, kRows[g]).mm(b[static_cast<int64_t>(g)])));
    }
    start += kRows[g];
  }
}

}  // namespace
}  // namespace moescope::runtime

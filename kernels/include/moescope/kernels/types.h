// Plain types shared by the CUDA launchers and the CPU references of the MoE kernels.
// No CUDA and no torch types here: this header compiles with any C++20 compiler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace moescope::kernels {

/// Element type of activation/weight buffers. bf16 is stored as raw uint16_t bits.
enum class DType : int { kFloat32 = 0, kBFloat16 = 1 };

inline constexpr std::size_t dtype_size(DType dtype) {
  return dtype == DType::kFloat32 ? 4 : 2;
}

inline constexpr const char* dtype_name(DType dtype) {
  return dtype == DType::kFloat32 ? "float32" : "bfloat16";
}

/// bf16 bits -> float (exact).
inline float bf16_to_float(std::uint16_t bits) {
  std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

/// float -> bf16 bits, round to nearest even (what torch and __float2bfloat16_rn do); NaN stays
/// NaN.
inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  const std::uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

/// How router logits become scores.
enum class ScoreFunction : int { kSoftmax = 0, kSigmoid = 1 };

/// Router settings shared by the fused router kernel and its CPU reference.
/// Selection uses `score + expert_bias` (aux-loss-free balancing); the combine weights use the
/// unbiased score. With num_groups > 1 (DeepSeek-V3 group-limited routing) a group's score is
/// the sum of its top-2 selection scores (top-1 when a group holds one expert), the
/// `group_top_k` best groups are kept and the top-k experts are chosen inside them.
struct RouterConfig {
  int num_experts = 0;
  int top_k = 0;
  ScoreFunction score_function = ScoreFunction::kSoftmax;
  int num_groups = 1;
  int group_top_k = 1;
  /// Divide the k selected scores by their sum (plus kNormalizeEpsilon) before scaling.
  bool normalize_top_k = true;
  /// Multiplies the final weights (DeepSeek-V3's routed_scaling_factor).
  float scaling_factor = 1.0f;
};

/// The one statement of what makes a router config valid, used by the kernels' argument checks,
/// supports_router() and the runtime's MoEConfig validation: an empty string when `config` is
/// valid, else what is wrong with the first invalid field ("top_k must be in [1, num_experts=8],
/// got 9"). CUDA size limits are not rules of validity (see supports_router).
std::string router_config_error(const RouterConfig& config);

/// Added to the sum of the selected scores before normalizing, so an all-zero selection
/// (sigmoid underflow) gives zero weights instead of NaN.
inline constexpr float kNormalizeEpsilon = 1e-20f;

/// Rows of the permuted buffer each expert group is padded to, so that group starts stay
/// 16-byte aligned when the token dimension becomes the contiguous one (the weight-gradient
/// grouped GEMM reads the permuted activations transposed). torchtitan uses 8 (bf16), 16 (fp8).
inline constexpr int grouped_mm_row_alignment(DType dtype) {
  return static_cast<int>(16 / dtype_size(dtype));
}

/// Upper bound of the padded permuted row count: every group may add (row_alignment - 1)
/// padding rows. Allocate permuted buffers with this many rows; no host sync is needed.
inline constexpr std::int64_t permuted_row_capacity(std::int64_t num_assignments, int num_experts,
                                                    int row_alignment) {
  return num_assignments + static_cast<std::int64_t>(num_experts) * (row_alignment - 1);
}

}  // namespace moescope::kernels

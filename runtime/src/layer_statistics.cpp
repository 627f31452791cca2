#include "moescope/runtime/layer_statistics.h"

#include <ATen/ATen.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime {
namespace {

// An fp32 value is NaN or Inf when its exponent bits are all ones. Fixed-size blocks let -O2
// vectorize the compares (GCC's cheap vectorizer skips loops that would need an epilogue).
uint32_t count_nonfinite_fp32(const float* values, int64_t count) {
  constexpr uint32_t kExponent = 0x7f800000u;
  constexpr int64_t kBlock = 64;
  uint32_t nonfinite = 0;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    uint32_t bits[kBlock];
    std::memcpy(bits, values + i, sizeof(bits));
    uint32_t in_block = 0;
    for (int64_t j = 0; j < kBlock; ++j) in_block += (bits[j] & kExponent) == kExponent;
    nonfinite += in_block;
  }
  for (; i < count; ++i) {
    nonfinite += (std::bit_cast<uint32_t>(values[i]) & kExponent) == kExponent;
  }
  return nonfinite;
}

}  // namespace

RouterStatistics router_statistics(const at::Tensor& scores) {
  TORCH_CHECK(scores.dim() == 2, "router_statistics: scores must be [T, E], got ", scores.sizes());
  const at::Tensor host = scores.is_cpu() ? scores.detach().to(at::kFloat).contiguous()
                                          : copy_to_host(scores, at::kFloat);
  const int64_t tokens = host.size(0), experts = host.size(1);
  RouterStatistics statistics;
  statistics.mean_score.assign(static_cast<size_t>(experts), 0.0f);
  if (tokens == 0) {
    statistics.entropy = NAN;
    return statistics;
  }
  std::vector<double> score_sums(static_cast<size_t>(experts), 0.0);
  double entropy_sum = 0.0;
  const float* row = host.data_ptr<float>();
  for (int64_t t = 0; t < tokens; ++t, row += experts) {
    double row_sum = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
      row_sum += row[e];
      score_sums[static_cast<size_t>(e)] += row[e];
    }
    // Same guards as the torch formula -(p * log(max(p, 1e-20))).sum() with p = s / max(sum,
    // 1e-20).
    const double scale = 1.0 / std::max(row_sum, 1e-20);
    double entropy = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
      const double p = row[e] * scale;
      entropy -= p * std::log(std::max(p, 1e-20));
    }
    entropy_sum += entropy;
  }
  statistics.entropy = static_cast<float>(entropy_sum / static_cast<double>(tokens));
  for (int64_t e = 0; e < experts; ++e) {
    statistics.mean_score[static_cast<size_t>(e)] =
        static_cast<float>(score_sums[static_cast<size_t>(e)] / static_cast<double>(tokens));
  }
  return statistics;
}

uint32_t count_nonfinite(const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return 0;
  const at::Tensor values = tensor.detach();
  if (values.device().is_cpu() && values.scalar_type() == at::kFloat && values.is_contiguous()) {
    return count_nonfinite_fp32(values.data_ptr<float>(), values.numel());
  }
  // A finite sum means no NaN/Inf; only a non-finite sum (NaN/Inf inside, or an overflow) pays
  // for the exact count. One host sync either way on a device.
  const auto read = [&](const at::Tensor& scalar) {
    return values.is_cpu() ? scalar.item() : read_scalar(scalar);
  };
  if (std::isfinite(read(values.sum(at::kDouble)).to<double>())) return 0;
  return static_cast<uint32_t>(read(at::isfinite(values).logical_not().sum()).to<int64_t>());
}

}  // namespace moescope::runtime

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

StatisticsArithmetic default_statistics_arithmetic(const at::Device& device) {
  return device.is_cpu() ? StatisticsArithmetic::kHostLoops : StatisticsArithmetic::kTensorOps;
}

namespace {

// Offsets into the packed tensor of a layer with E experts (layout in the header).
struct PackedLayout {
  int64_t experts;
  int64_t mean_score() const { return experts; }
  int64_t entropy() const { return 2 * experts; }
  int64_t aux_loss() const { return 2 * experts + 1; }
  int64_t z_loss() const { return 2 * experts + 2; }
  int64_t nonfinite_logits() const { return 2 * experts + 3; }
  int64_t nonfinite_outputs() const { return 2 * experts + 4; }
  int64_t expert_bias() const { return 2 * experts + 5; }
  int64_t size(bool has_bias) const { return expert_bias() + (has_bias ? experts : 0); }
};

bool has_tokens(const at::Tensor& scores) {
  return scores.defined() && scores.size(0) > 0;
}

at::Tensor pack_with_host_loops(const LayerStatisticsInputs& inputs, const PackedLayout& layout) {
  const bool has_bias = inputs.expert_bias.defined();
  at::Tensor packed = at::empty({layout.size(has_bias)}, at::kDouble);
  double* out = packed.mutable_data_ptr<double>();
  const at::Tensor counts = inputs.tokens_per_expert.to(at::kLong).contiguous();
  const int64_t* count = counts.const_data_ptr<int64_t>();
  for (int64_t e = 0; e < layout.experts; ++e) out[e] = static_cast<double>(count[e]);
  if (has_tokens(inputs.scores)) {
    const RouterStatistics router = router_statistics(inputs.scores);
    std::copy(router.mean_score.begin(), router.mean_score.end(), out + layout.mean_score());
    out[layout.entropy()] = router.entropy;
  } else {
    std::fill(out + layout.mean_score(), out + layout.entropy() + 1, NAN);
  }
  const auto scalar_or_nan = [](const at::Tensor& scalar) {
    return scalar.defined() ? scalar.item<double>() : NAN;
  };
  out[layout.aux_loss()] = scalar_or_nan(inputs.aux_loss);
  out[layout.z_loss()] = scalar_or_nan(inputs.z_loss);
  out[layout.nonfinite_logits()] = count_nonfinite(inputs.logits);
  out[layout.nonfinite_outputs()] = count_nonfinite(inputs.expert_output);
  if (has_bias) {
    const at::Tensor bias = inputs.expert_bias.to(at::kDouble).contiguous();
    std::copy_n(bias.const_data_ptr<double>(), layout.experts, out + layout.expert_bias());
  }
  return packed;
}

// The same values from kernels queued on the tensors' stream: nothing here reads device memory
// on the host, so nothing waits. fp64 throughout, like the host loops' accumulation.
at::Tensor pack_with_tensor_ops(const LayerStatisticsInputs& inputs, const PackedLayout& layout) {
  const at::TensorOptions options = inputs.tokens_per_expert.options().dtype(at::kDouble);
  const auto nan = [&](int64_t count) { return at::full({count}, NAN, options); };
  const auto scalar_or_nan = [&](const at::Tensor& scalar) {
    return scalar.defined() ? scalar.detach().to(at::kDouble).reshape({1}) : nan(1);
  };
  const auto nonfinite = [&](const at::Tensor& tensor) {
    return tensor.defined()
               ? at::isfinite(tensor.detach()).logical_not().sum().to(at::kDouble).reshape({1})
               : at::zeros({1}, options);
  };
  std::vector<at::Tensor> parts;
  parts.push_back(inputs.tokens_per_expert.detach().to(at::kDouble).reshape({layout.experts}));
  if (has_tokens(inputs.scores)) {
    const at::Tensor scores = inputs.scores.detach().to(at::kDouble);
    // -(p * log(max(p, 1e-20))).sum() with p = s / max(sum, 1e-20), as the host loops.
    const at::Tensor probs = scores / scores.sum(-1, /*keepdim=*/true).clamp_min(1e-20);
    parts.push_back(scores.mean(0));
    parts.push_back((probs * probs.clamp_min(1e-20).log()).sum(-1).mean().neg().reshape({1}));
  } else {
    parts.push_back(nan(layout.experts + 1));
  }
  parts.push_back(scalar_or_nan(inputs.aux_loss));
  parts.push_back(scalar_or_nan(inputs.z_loss));
  parts.push_back(nonfinite(inputs.logits));
  parts.push_back(nonfinite(inputs.expert_output));
  if (inputs.expert_bias.defined()) {
    parts.push_back(inputs.expert_bias.detach().to(at::kDouble).reshape({layout.experts}));
  }
  return at::cat(parts);
}

}  // namespace

at::Tensor pack_layer_statistics(const LayerStatisticsInputs& inputs,
                                 StatisticsArithmetic arithmetic) {
  const at::Tensor& counts = inputs.tokens_per_expert;
  TORCH_CHECK(counts.defined() && counts.dim() == 1,
              "pack_layer_statistics: tokens_per_expert must be [num_experts]");
  const PackedLayout layout{counts.size(0)};
  const at::Device device = counts.device();
  for (const at::Tensor* tensor : {&inputs.scores, &inputs.logits, &inputs.expert_output,
                                   &inputs.aux_loss, &inputs.z_loss, &inputs.expert_bias}) {
    // Moving a tensor between devices here would be a blocking copy.
    TORCH_CHECK(!tensor->defined() || tensor->device() == device,
                "pack_layer_statistics: every input must be on tokens_per_expert's device ", device,
                ", got one on ", tensor->device());
  }
  TORCH_CHECK(!inputs.scores.defined() ||
                  (inputs.scores.dim() == 2 && inputs.scores.size(1) == layout.experts),
              "pack_layer_statistics: scores must be [T, ", layout.experts, "], got ",
              inputs.scores.sizes());
  TORCH_CHECK(!inputs.expert_bias.defined() || inputs.expert_bias.numel() == layout.experts,
              "pack_layer_statistics: expert_bias must be [", layout.experts, "], got ",
              inputs.expert_bias.sizes());
  if (arithmetic == StatisticsArithmetic::kHostLoops) {
    TORCH_CHECK(device.is_cpu(), "pack_layer_statistics: host loops need CPU tensors, got ", device,
                " (use StatisticsArithmetic::kTensorOps)");
    return pack_with_host_loops(inputs, layout);
  }
  return pack_with_tensor_ops(inputs, layout);
}

LayerStatistics unpack_layer_statistics(const at::Tensor& packed, int64_t num_experts) {
  const PackedLayout layout{num_experts};
  TORCH_CHECK(packed.is_cpu() && packed.scalar_type() == at::kDouble && packed.dim() == 1 &&
                  (packed.numel() == layout.size(false) || packed.numel() == layout.size(true)),
              "unpack_layer_statistics: expected a host fp64 tensor of ", layout.size(false),
              " or ", layout.size(true), " values (", num_experts, " experts), got ",
              packed.scalar_type(), " ", packed.sizes(), " on ", packed.device());
  const at::Tensor contiguous = packed.contiguous();
  const double* values = contiguous.const_data_ptr<double>();
  const auto floats = [&](int64_t offset) {
    return std::vector<float>(values + offset, values + offset + num_experts);
  };
  LayerStatistics statistics;
  statistics.tokens_per_expert.assign(values, values + num_experts);
  statistics.mean_score = floats(layout.mean_score());
  statistics.entropy = static_cast<float>(values[layout.entropy()]);
  statistics.aux_loss = static_cast<float>(values[layout.aux_loss()]);
  statistics.z_loss = static_cast<float>(values[layout.z_loss()]);
  statistics.nonfinite_logits = static_cast<uint32_t>(values[layout.nonfinite_logits()]);
  statistics.nonfinite_outputs = static_cast<uint32_t>(values[layout.nonfinite_outputs()]);
  if (packed.numel() == layout.size(true)) statistics.expert_bias = floats(layout.expert_bias());
  return statistics;
}

}  // namespace moescope::runtime

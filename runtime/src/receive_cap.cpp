#include "moescope/runtime/receive_cap.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <iterator>
#include <numeric>
#include <sstream>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime {
namespace {

std::string format_counts(const at::Tensor& counts) {
  const at::Tensor host = copy_to_host(counts, at::kLong);
  const int64_t* data = host.data_ptr<int64_t>();
  std::ostringstream out;
  out << '[';
  for (int64_t i = 0; i < host.numel(); ++i) out << (i ? ", " : "") << data[i];
  out << ']';
  return out.str();
}

void check_row_tensor(const at::Tensor& tensor, const char* name, int64_t num_rows) {
  TORCH_CHECK(tensor.defined(), "ReceiveCap::apply: ", name, " is required by this policy");
  TORCH_CHECK(tensor.dim() == 1 && tensor.size(0) == num_rows, "ReceiveCap::apply: ", name,
              " must be [", num_rows, "] (one entry per row), got ", tensor.sizes());
}

}  // namespace

const char* receive_cap_policy_name(ReceiveCapPolicy policy) {
  static constexpr const char* kNames[] = {"drop_lowest_probability", "drop_latest_position",
                                           "fail"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumReceiveCapPolicies);
  const int index = static_cast<int>(policy);
  return index >= 0 && index < kNumReceiveCapPolicies ? kNames[index] : "unknown";
}

ReceiveCap::ReceiveCap(const ReceiveCapOptions& options) : options_(options) {
  TORCH_CHECK(options.max_rows > 0, "ReceiveCap: max_rows must be > 0, got ", options.max_rows);
}

ReceiveCapResult ReceiveCap::apply(const at::Tensor& local_expert_of_row,
                                   const at::Tensor& row_weights, const at::Tensor& row_to_token,
                                   int64_t num_local_experts) {
  TORCH_CHECK(num_local_experts > 0, "ReceiveCap::apply: num_local_experts must be > 0, got ",
              num_local_experts);
  TORCH_CHECK(local_expert_of_row.defined() && local_expert_of_row.dim() == 1 &&
                  local_expert_of_row.scalar_type() == at::kLong,
              "ReceiveCap::apply: local_expert_of_row must be a 1-D int64 tensor [R]");
  const int64_t num_rows = local_expert_of_row.size(0);
  if (num_rows > 0) {
    const auto [min_expert, max_expert] = at::aminmax(local_expert_of_row);
    const int64_t lowest = read_scalar(min_expert).to<int64_t>();
    const int64_t highest = read_scalar(max_expert).to<int64_t>();
    TORCH_CHECK(lowest >= 0 && highest < num_local_experts,
                "ReceiveCap::apply: local_expert_of_row ", "holds expert ids in [", lowest, ", ",
                highest, "], outside [0, ", num_local_experts, ")");
  }

  ReceiveCapResult result;
  result.num_received_rows = num_rows;
  result.rows_per_expert = at::bincount(local_expert_of_row, /*weights=*/{}, num_local_experts);
  const int64_t cap = options_.max_rows;

  if (num_rows <= cap) {
    result.keep_mask = at::ones({num_rows}, local_expert_of_row.options().dtype(at::kBool));
  } else {
    at::Tensor kept_rows;  // [cap] indices of the rows kept
    switch (options_.policy) {
      case ReceiveCapPolicy::kFail:
        TORCH_CHECK(
            false, "ReceiveCap: this rank's experts received ", num_rows,
            " rows in one forward (per local expert: ", format_counts(result.rows_per_expert),
            "), over ReceiveCapOptions.max_rows = ", cap,
            " (policy fail; use a drop policy or a larger cap)");
        break;
      case ReceiveCapPolicy::kDropLowestProbability: {
        check_row_tensor(row_weights, "row_weights", num_rows);
        TORCH_CHECK(at::isFloatingType(row_weights.scalar_type()),
                    "ReceiveCap::apply: row_weights must be floating point, got ",
                    row_weights.scalar_type());
        // Stable descending sort: equal weights keep their row order (lower index kept).
        const at::Tensor order = std::get<1>(at::sort(row_weights.detach(), /*stable=*/true,
                                                      /*dim=*/0, /*descending=*/true));
        kept_rows = order.narrow(0, 0, cap);
        break;
      }
      case ReceiveCapPolicy::kDropLatestPosition: {
        check_row_tensor(row_to_token, "row_to_token", num_rows);
        TORCH_CHECK(row_to_token.scalar_type() == at::kLong,
                    "ReceiveCap::apply: row_to_token must be int64, got ",
                    row_to_token.scalar_type());
        const at::Tensor order =
            std::get<1>(at::sort(row_to_token, /*stable=*/true, /*dim=*/0, /*descending=*/false));
        kept_rows = order.narrow(0, 0, cap);
        break;
      }
    }
    result.keep_mask = at::zeros({num_rows}, local_expert_of_row.options().dtype(at::kBool));
    result.keep_mask.index_fill_(0, kept_rows, true);
  }
  result.kept_per_expert =
      at::bincount(local_expert_of_row.masked_select(result.keep_mask), {}, num_local_experts);
  result.dropped_per_expert = result.rows_per_expert - result.kept_per_expert;
  result.num_kept_rows = std::min(num_rows, cap);
  result.num_dropped_rows = num_rows - result.num_kept_rows;

  ++stats_.forwards;
  if (result.num_dropped_rows > 0) ++stats_.capped_forwards;
  stats_.received_rows += num_rows;
  stats_.dropped_rows += result.num_dropped_rows;
  stats_.max_received_rows = std::max(stats_.max_received_rows, num_rows);
  return result;
}

void ReceiveCap::record(const ReceiveCapResult& result) {
  // Interned per call: ids belong to one recording, and a recorder may restart.
  moescope_counter(moescope_intern("receive_cap.dropped_rows"),
                   static_cast<double>(result.num_dropped_rows));
}

at::Tensor split_receive_cap(const at::Tensor& incoming_rows, int64_t max_rows) {
  TORCH_CHECK(max_rows > 0, "split_receive_cap: max_rows must be > 0, got ", max_rows);
  TORCH_CHECK(incoming_rows.defined() && incoming_rows.dim() == 1 &&
                  incoming_rows.scalar_type() == at::kLong,
              "split_receive_cap: incoming_rows must be a 1-D int64 tensor [num_source_ranks]");
  const at::Tensor host = copy_to_host(incoming_rows);
  const int64_t num_sources = host.numel();
  const int64_t* incoming = host.data_ptr<int64_t>();
  int64_t total = 0;
  for (int64_t s = 0; s < num_sources; ++s) {
    TORCH_CHECK(incoming[s] >= 0, "split_receive_cap: incoming_rows[", s, "] is negative (",
                incoming[s], ")");
    total += incoming[s];
  }
  at::Tensor quota = host.clone();
  if (total <= max_rows) return quota.to(incoming_rows.device());

  int64_t* out = quota.data_ptr<int64_t>();
  std::vector<int64_t> remainder(static_cast<size_t>(num_sources));
  int64_t assigned = 0;
  for (int64_t s = 0; s < num_sources; ++s) {
    // 128-bit product: rows * cap can exceed int64 for large batches and caps.
    const __int128 scaled = static_cast<__int128>(incoming[s]) * max_rows;
    out[s] = static_cast<int64_t>(scaled / total);
    remainder[static_cast<size_t>(s)] = static_cast<int64_t>(scaled % total);
    assigned += out[s];
  }
  std::vector<int64_t> order(static_cast<size_t>(num_sources));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return remainder[static_cast<size_t>(a)] > remainder[static_cast<size_t>(b)];
  });
  // Fewer than num_sources rows are left over, and each goes to a source whose floor lost a
  // positive fraction, so quota <= incoming still holds.
  for (int64_t i = 0; assigned < max_rows; ++i, ++assigned) ++out[order[static_cast<size_t>(i)]];
  return quota.to(incoming_rows.device());
}

}  // namespace moescope::runtime

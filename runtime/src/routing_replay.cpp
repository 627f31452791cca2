#include "moescope/runtime/routing_replay.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdio>

#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime {

void RoutingReplay::record(int64_t layer, const at::Tensor& top_k_indices) {
  TORCH_CHECK(top_k_indices.dim() == 2 && top_k_indices.scalar_type() == at::kLong,
              "RoutingReplay::record: top_k_indices must be [T, K] int64, got ",
              top_k_indices.sizes(), " ", top_k_indices.scalar_type());
  // A copy even on the host: the caller may reuse top_k_indices.
  at::Tensor host = copy_to_host(top_k_indices).clone();
  std::lock_guard<std::mutex> lock(mutex_);
  choices_[{step_, layer}] = std::move(host);
}

at::Tensor RoutingReplay::replay(int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = choices_.find({step_, layer});
  TORCH_CHECK(it != choices_.end(), "RoutingReplay: no recorded routing for step ", step_,
              " layer ", layer, " (", choices_.size(), " step/layer entries recorded)");
  return it->second;
}

bool RoutingReplay::contains(int64_t step, int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_.count({step, layer}) > 0;
}

size_t RoutingReplay::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_.size();
}

void RoutingReplay::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  choices_.clear();
}

// Keys are "step<step>_layer<layer>" (archive keys must be identifiers); tensors stay
// bit-exact.
void RoutingReplay::save(const std::string& path) const {
  torch::serialize::OutputArchive archive;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, choices] : choices_) {
    archive.write("step" + std::to_string(key.first) + "_layer" + std::to_string(key.second),
                  choices,
                  /*is_buffer=*/true);
  }
  archive.save_to(path);
}

void RoutingReplay::load(const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& error) {
    TORCH_CHECK(false, "RoutingReplay::load: cannot read '", path,
                "': ", error.what_without_backtrace());
  }
  std::map<std::pair<int64_t, int64_t>, at::Tensor> loaded;
  for (const std::string& key : archive.keys()) {
    long long step = 0, layer = 0;
    TORCH_CHECK(std::sscanf(key.c_str(), "step%lld_layer%lld", &step, &layer) == 2,
                "RoutingReplay::load: '", path, "' has an entry '", key,
                "' that is not step<N>_layer<M>");
    at::Tensor choices;
    archive.read(key, choices, /*is_buffer=*/true);
    loaded[{static_cast<int64_t>(step), static_cast<int64_t>(layer)}] = choices;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  choices_ = std::move(loaded);
}

}  // namespace moescope::runtime

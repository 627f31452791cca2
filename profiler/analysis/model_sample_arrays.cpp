// Sample arrays of one process merged into the model's (trace_model.h): one rule for the
// traces' loader and the rank summaries.
#include <type_traits>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

void reserve_sample_arrays(ModelSampleArrays& to,
                           const std::vector<const ModelSampleArrays*>& parts) {
  for_each_sample_array([&](const auto& array) {
    size_t samples = (to.*array.samples).size(), tail = 0;
    for (const ModelSampleArrays* part : parts) samples += (part->*array.samples).size();
    (to.*array.samples).reserve(samples);
    if constexpr (std::decay_t<decltype(array)>::kHasTail) {
      tail = (to.*array.tail).size();
      for (const ModelSampleArrays* part : parts) tail += (part->*array.tail).size();
      (to.*array.tail).reserve(tail);
    }
  });
}

void append_sample_arrays(ModelSampleArrays& to, const ModelSampleArrays& from, uint32_t process) {
  for_each_sample_array([&](const auto& array) {
    uint32_t tail_base = 0;
    if constexpr (std::decay_t<decltype(array)>::kHasTail) {
      auto& tail = to.*array.tail;
      tail_base = static_cast<uint32_t>(tail.size());
      tail.insert(tail.end(), (from.*array.tail).begin(), (from.*array.tail).end());
    }
    auto& samples = to.*array.samples;
    for (auto sample : from.*array.samples) {
      if constexpr (std::decay_t<decltype(array)>::kHasTail) sample.offset += tail_base;
      sample.process = process;
      samples.push_back(sample);
    }
  });
}

}  // namespace moescope::analysis

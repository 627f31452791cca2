// The trace model's string table (TraceModel::strings): every name of every rank, interned once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace moescope::analysis {

using StringId = uint32_t;

// One table for every name of every rank. Id 0 is the empty string.
class StringTable {
 public:
  StringTable() : strings_{std::string()} { index_.emplace(std::string(), 0); }
  StringId intern(std::string_view text) {
    auto found = index_.find(std::string(text));
    if (found != index_.end()) return found->second;
    StringId id = static_cast<StringId>(strings_.size());
    strings_.emplace_back(text);
    index_.emplace(strings_.back(), id);
    return id;
  }
  // Id of `text`, or 0 when absent (without adding it).
  StringId find(std::string_view text) const {
    auto found = index_.find(std::string(text));
    return found == index_.end() ? 0 : found->second;
  }
  const std::string& operator[](StringId id) const {
    return id < strings_.size() ? strings_[id] : strings_[0];
  }
  size_t size() const { return strings_.size(); }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, StringId> index_;
};

}  // namespace moescope::analysis

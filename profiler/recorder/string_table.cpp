#include "string_table.h"

#include <cstring>

namespace moescope::recorder {

uint64_t hash_string(std::string_view text) {
  // FNV-1a over 8-byte words: short names hash in a few nanoseconds.
  uint64_t hash = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    hash = (hash ^ word) * 1099511628211ull;
  }
  for (; i < text.size(); ++i) hash = (hash ^ static_cast<uint8_t>(text[i])) * 1099511628211ull;
  return hash ^ (hash >> 29);
}

uint32_t StringTable::intern(std::string_view text) {
  if (text.size() > kMaxLength) text = text.substr(0, kMaxLength);
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = ids_.try_emplace(std::string(text), 0);
  if (inserted) {
    it->second = static_cast<uint32_t>(ids_.size());
    pending_.define_string(it->second, text);
  }
  return it->second;
}

void StringTable::take_pending(trace::RecordBuffer& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& bytes = pending_.bytes();
  out.bytes().insert(out.bytes().end(), bytes.begin(), bytes.end());
  pending_.clear();
}

void StringTable::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  ids_.clear();
  pending_.clear();
}

uint32_t ThreadStringCache::intern(StringTable& table, std::string_view text) {
  uint64_t hash = hash_string(text);
  Entry& entry = entries_[hash % kEntries];
  if (entry.id != 0 && entry.hash == hash && entry.text == text) return entry.id;
  entry.id = table.intern(text);
  entry.hash = hash;
  entry.text.assign(text.data(), text.size());
  return entry.id;
}

}  // namespace moescope::recorder

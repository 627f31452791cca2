// The JSON mutator (see json_mutator.h).
#include "json_mutator.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <random>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace moescope::fuzz {
namespace {

using nlohmann::json;

// Values that have broken readers: type confusions and the limits of every conversion.
json hostile_value(std::mt19937_64& random, const json& old,
                   const std::vector<std::string>& words) {
  switch (random() % 24) {
    case 0:
      return nullptr;
    case 1:
      return true;
    case 2:
      return json::array();
    case 3:
      return json::object();
    case 4:
      return "";
    case 5:
      return "stream 7";
    case 6:
      return 1e300;
    case 7:
      return -1e300;
    case 8:
      return std::numeric_limits<int64_t>::min();
    case 9:
      return std::numeric_limits<int64_t>::max();
    case 10:
      return std::numeric_limits<uint64_t>::max();
    case 11:
      return int64_t{1} << 31;
    case 12:
      return 4294967296.0;
    case 13:
      return -1;
    case 14:
      return 0;
    case 15:
      return 9.2233720368547758e18;
    case 16:
      return 0.5;
    case 17:
      return json::array({old});
    case 18:
      return old.is_number() ? json(-old.get<double>()) : json(1);
    case 19:
      return old.is_number() ? json(old.get<double>() * 1e6) : json("1e6");
    case 20:
      return old.is_string() ? json(old.get<std::string>() + "\xc3\xa9") : json("x");
    case 21:
      return old.dump();  // the value as a string: "123"
    default:              // a word the reader looks for, so the mutation changes what an item is
      return words.empty() ? json("x") : json(words[random() % words.size()]);
  }
}

// Every value in the document (iteratively: documents may nest deeply). False when it nests
// deeper than dump() (recursive) can safely write back.
bool collect(json& root, std::vector<json*>& values) {
  std::vector<std::pair<json*, int>> stack = {{&root, 0}};
  while (!stack.empty() && values.size() < 100000) {
    auto [value, depth] = stack.back();
    stack.pop_back();
    if (depth > 256) return false;
    values.push_back(value);
    if (value->is_structured()) {
      for (auto& child : *value) stack.push_back({&child, depth + 1});
    }
  }
  return true;
}

bool mutate_json(json& root, std::mt19937_64& random, const std::vector<std::string>& keys,
                 const std::vector<std::string>& words) {
  std::vector<json*> values;
  if (!collect(root, values) || values.empty()) return false;
  json& target = *values[random() % values.size()];
  switch (random() % 6) {
    case 0:  // remove a key or an element
      if (target.is_object() && !target.empty()) {
        auto item = target.begin();
        std::advance(item, random() % target.size());
        target.erase(item);
        return true;
      }
      if (target.is_array() && !target.empty()) {
        target.erase(target.begin() + static_cast<long>(random() % target.size()));
        return true;
      }
      break;
    case 1:  // duplicate an element (counts, repeated ids)
      if (target.is_array() && !target.empty() && target.size() < 5000) {
        target.push_back(target[random() % target.size()]);
        return true;
      }
      break;
    case 2:  // add a key the importer reads
      if (target.is_object()) {
        if (keys.empty()) break;
        target[keys[random() % keys.size()]] = hostile_value(random, nullptr, words);
        return true;
      }
      break;
    default:
      break;
  }
  target = hostile_value(random, target, words);
  return true;
}

}  // namespace

size_t mutate_json_input(uint8_t* data, size_t size, size_t max_size, unsigned int seed,
                         const std::vector<std::string>& keys,
                         const std::vector<std::string>& words) {
  std::mt19937_64 random(seed);
  if (random() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  json root = json::parse(data, data + size, nullptr, false);
  if (root.is_discarded()) return LLVMFuzzerMutate(data, size, max_size);
  const int rounds = 1 + static_cast<int>(random() % 3);
  for (int i = 0; i < rounds; ++i) {
    if (!mutate_json(root, random, keys, words)) return LLVMFuzzerMutate(data, size, max_size);
  }
  const std::string text = root.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::copy(text.begin(), text.end(), data);
  return text.size();
}

}  // namespace moescope::fuzz

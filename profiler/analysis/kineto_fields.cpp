// Checked access to Kineto event fields (see kineto_fields.h).
#include "kineto_fields.h"

#include <cmath>

#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis::kineto {

std::string short_dump(const nlohmann::json& value) {
  // Containers are described, not dumped: they may be huge or nested thousands deep.
  if (value.is_array()) return "an array of " + std::to_string(value.size()) + " item(s)";
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " key(s)";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

const nlohmann::json* find_field(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto found = object.find(key);
  if (found == object.end()) return nullptr;  // null is present: a wrong type
  return &*found;
}

std::optional<std::string> string_field(const nlohmann::json& object, const char* key) {
  const nlohmann::json* value = find_field(object, key);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    throw BadField(std::string("'") + key + "' is " + short_dump(*value) + ", not a string");
  }
  return value->get<std::string>();
}

namespace {

[[noreturn]] void out_of_range(const char* key, const std::string& value, int64_t min,
                               int64_t max) {
  throw BadField(std::string("'") + key + "' is " + value + ", not an integer in [" +
                 std::to_string(min) + ", " + std::to_string(max) + "]");
}

}  // namespace

std::optional<int64_t> integer_field(const nlohmann::json& object, const char* key, int64_t min,
                                     int64_t max, bool digits_in_strings) {
  const nlohmann::json* value = find_field(object, key);
  if (!value) return std::nullopt;
  std::optional<int64_t> result;
  if (value->is_number_unsigned()) {
    const uint64_t number = value->get<uint64_t>();
    if (number <= uint64_t(INT64_MAX)) result = static_cast<int64_t>(number);
  } else if (value->is_number_integer()) {
    result = value->get<int64_t>();
  } else if (value->is_number_float()) {
    const double number = value->get<double>();
    if (std::trunc(number) == number) result = trace::checked_int64(number);
  } else if (value->is_string() && digits_in_strings) {
    // Kineto writes some ids as strings ("stream 7"): keep the digits.
    std::string digits;
    for (char c : value->get_ref<const std::string&>()) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (digits.empty()) return std::nullopt;  // a name such as "PyTorch Profiler": no number
    if (digits.size() <= 18) result = std::stoll(digits);
  } else {
    throw BadField(std::string("'") + key + "' is " + short_dump(*value) + ", not a number");
  }
  if (!result || *result < min || *result > max) out_of_range(key, short_dump(*value), min, max);
  return result;
}

std::optional<double> number_field(const nlohmann::json& object, const char* key) {
  const nlohmann::json* value = find_field(object, key);
  if (!value) return std::nullopt;
  if (!value->is_number()) {
    throw BadField(std::string("'") + key + "' is " + short_dump(*value) + ", not a number");
  }
  const double number = value->get<double>();
  if (!std::isfinite(number)) {
    throw BadField(std::string("'") + key + "' is " + short_dump(*value) + ", not finite");
  }
  return number;
}

std::optional<TimeNs> micros_field(const nlohmann::json& object, const char* key) {
  std::optional<double> micros = number_field(object, key);
  if (!micros) return std::nullopt;
  std::optional<TimeNs> ns = trace::checked_micros_to_ns(*micros);
  if (!ns) {
    throw BadField(std::string("'") + key + "' is " + short_dump(*find_field(object, key)) +
                   " us, outside the times a trace can hold (+-" +
                   std::to_string(trace::kMaxPlausibleTimeNs / 1000) + " us)");
  }
  return ns;
}

void SkippedEvents::skip(size_t index, const std::string& reason) {
  ++count_;
  if (listed_.size() < kListed) {
    listed_.push_back(
        {file_, 0, "traceEvents[" + std::to_string(index) + "]: " + reason + ": event skipped"});
  }
}

void SkippedEvents::report(std::vector<LoadError>& errors) const {
  if (count_ == 0) return;
  errors.insert(errors.end(), listed_.begin(), listed_.end());
  std::string total = std::to_string(count_) + " event(s) skipped as unusable";
  if (count_ > listed_.size())
    total += " (the first " + std::to_string(listed_.size()) + " listed)";
  errors.push_back({file_, 0, total + "; the rest of the file was read"});
}

}  // namespace moescope::analysis::kineto

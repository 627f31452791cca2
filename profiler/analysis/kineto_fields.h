// Typed, range-checked access to the fields of one Kineto / Chrome trace event, and the counted
// warnings of the events a file had to skip. Internal to the analysis library.
//
// A Kineto JSON comes from anyone's machine: every field may be missing, of another type
// (null, array, object, string where a number is expected), NaN-free but huge (1e300), or
// negative where only counts make sense. Each accessor returns nullopt for "absent" and throws
// BadField (caught per event by the importer) for "present but unusable", so one bad event is
// skipped with a warning naming its index and the rest of the file is still read.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis::kineto {

// A field that is present but cannot be used; the message names the field and the value.
class BadField : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The value as short text for messages (at most ~40 characters).
std::string short_dump(const nlohmann::json& value);

// object[key] when the object has it (null included: null where a value is expected is a bad
// field, not an absent one).
const nlohmann::json* find_field(const nlohmann::json& object, const char* key);

// A string field; BadField when it is not a string.
std::optional<std::string> string_field(const nlohmann::json& object, const char* key);

// An integer field in [min, max]. Integral floats (3.0) are accepted; Kineto also writes some
// ids as strings ("stream 7"), whose digits are used when `digits_in_strings` is set.
std::optional<int64_t> integer_field(const nlohmann::json& object, const char* key, int64_t min,
                                     int64_t max, bool digits_in_strings = false);

// A finite number field.
std::optional<double> number_field(const nlohmann::json& object, const char* key);

// A time in microseconds (`ts`, `dur`) as nanoseconds inside +-trace::kMaxPlausibleTimeNs.
std::optional<TimeNs> micros_field(const nlohmann::json& object, const char* key);

// The warnings of one file: every skipped event is counted; the first kListed are listed with
// their position, then one line gives the total.
class SkippedEvents {
 public:
  static constexpr size_t kListed = 20;
  explicit SkippedEvents(std::string file) : file_(std::move(file)) {}
  void skip(size_t index, const std::string& reason);
  uint64_t count() const { return count_; }
  // Appends the listed warnings and the total to `errors`.
  void report(std::vector<LoadError>& errors) const;

 private:
  std::string file_;
  uint64_t count_ = 0;
  std::vector<LoadError> listed_;
};

}  // namespace moescope::analysis::kineto

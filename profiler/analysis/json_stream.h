// A streaming JSON writer for the Chrome trace export: numbers, strings and times appended to a
// buffer that is flushed to a FILE every megabyte; the first write error is kept.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "moescope/analysis/chrome_export.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {

// Output through a fixed buffer; the first write error is kept.
class JsonStream {
 public:
  explicit JsonStream(std::FILE* file) : file_(file) { buffer_.reserve(kFlushBytes + 4096); }
  void raw(std::string_view text) {
    buffer_.append(text);
    maybe_flush();
  }
  void raw(char c) { buffer_.push_back(c); }
  void string(std::string_view text) { append_json_string(buffer_, text); }
  void integer(int64_t value) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    buffer_.append(digits, static_cast<size_t>(end - digits));
  }
  void unsigned_integer(uint64_t value) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    buffer_.append(digits, static_cast<size_t>(end - digits));
  }
  void number(double value) {
    if (!std::isfinite(value)) {
      buffer_.append("null");
      return;
    }
    char digits[32];
    auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    buffer_.append(digits, static_cast<size_t>(end - digits));
  }
  // Nanoseconds as microseconds with exactly 3 decimals. Defined for every int64, INT64_MIN
  // included (its negation does not fit an int64: the magnitude is taken as unsigned).
  void micros(int64_t ns) {
    if (ns < 0) buffer_.push_back('-');
    const uint64_t magnitude = trace::magnitude(ns);
    unsigned_integer(magnitude / 1000);
    const uint64_t fraction = magnitude % 1000;
    char tail[4] = {'.', char('0' + fraction / 100), char('0' + fraction / 10 % 10),
                    char('0' + fraction % 10)};
    buffer_.append(tail, 4);
  }
  void end_event() {
    buffer_.append("},\n");
    ++events_;
    maybe_flush();
  }
  bool finish() {
    flush();
    if (std::fflush(file_) != 0 && error_.empty()) error_ = std::strerror(errno);
    return error_.empty();
  }
  const std::string& error() const { return error_; }
  uint64_t bytes() const { return bytes_ + buffer_.size(); }
  uint64_t events() const { return events_; }

 private:
  static constexpr size_t kFlushBytes = 1 << 20;
  void maybe_flush() {
    if (buffer_.size() >= kFlushBytes) flush();
  }
  void flush() {
    if (buffer_.empty()) return;
    if (error_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size()) {
      error_ = std::strerror(errno);
    }
    bytes_ += buffer_.size();
    buffer_.clear();
  }
  std::FILE* file_;
  std::string buffer_;
  std::string error_;
  uint64_t bytes_ = 0;
  uint64_t events_ = 0;
};

}  // namespace moescope::analysis

// Operator span names with input shapes, interned with a cap (see operator_span_names.h).
#include "operator_span_names.h"

#include <mutex>

namespace moescope::torch_capture {

OperatorSpanName::OperatorSpanName(std::string_view operator_name) {
  text_.reserve(operator_name.size() + 48);
  text_.append(operator_name);
  text_.append(", sizes = [");
}

void OperatorSpanName::separate() {
  bool& first = in_list_ ? first_in_list_ : first_input_;
  if (!first) text_.append(", ");
  first = false;
}

void OperatorSpanName::add_tensor(const int64_t* sizes, size_t num_dims) {
  separate();
  text_.push_back('[');
  for (size_t d = 0; d < num_dims; ++d) {
    if (d) text_.append(", ");
    text_.append(std::to_string(sizes[d]));
  }
  text_.push_back(']');
}

void OperatorSpanName::begin_tensor_list() {
  separate();
  text_.push_back('[');
  in_list_ = true;
  first_in_list_ = true;
}

void OperatorSpanName::end_tensor_list() {
  text_.push_back(']');
  in_list_ = false;
}

void OperatorSpanName::add_other() {
  separate();
  text_.append("[]");
}

const std::string& OperatorSpanName::finish() {
  text_.push_back(']');
  return text_;
}

CappedNameInterner::CappedNameInterner(size_t max_names, InternFunction intern)
    : max_names_(max_names), intern_(intern) {}

moescope_name_t CappedNameInterner::intern_locked(std::string_view name) {
  moescope_name_t id = intern_(name.data(), name.size());
  ids_.emplace(std::string(name), id);
  return id;
}

moescope_name_t CappedNameInterner::intern(const std::string& name, std::string_view fallback) {
  const std::string& key = name;
  {
    std::shared_lock lock(mutex_);
    auto found = ids_.find(key);
    if (found != ids_.end()) return found->second;
    if (num_full_names_ >= max_names_) {
      auto bare = ids_.find(std::string(fallback));
      if (bare != ids_.end()) return bare->second;
    }
  }
  std::unique_lock lock(mutex_);
  auto found = ids_.find(key);
  if (found != ids_.end()) return found->second;
  if (num_full_names_ < max_names_) {
    ++num_full_names_;
    return intern_locked(name);
  }
  // Bare operator names are few (one per operator), so they do not count against the cap.
  auto bare = ids_.find(std::string(fallback));
  return bare != ids_.end() ? bare->second : intern_locked(fallback);
}

size_t CappedNameInterner::num_full_names() const {
  std::shared_lock lock(mutex_);
  return num_full_names_;
}

bool CappedNameInterner::capped() const {
  return num_full_names() >= max_names_;
}

}  // namespace moescope::torch_capture

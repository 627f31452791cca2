// Names of operator spans in --torch-ops mode: the operator and its input shapes, formatted
// like Nsight Systems' `--pytorch=autograd-nvtx` ("aten::addmm, sizes = [[8], [8, 16], []]"),
// interned with a cap on how many distinct names one process may add to its trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "moescope/recorder.h"

namespace moescope::torch_capture {

// Builds "<operator>, sizes = [<input>, <input>, ...]" where a tensor input is its shape
// ("[8, 16]"), a tensor list the list of shapes ("[[8], [8]]") and anything else "[]".
class OperatorSpanName {
 public:
  explicit OperatorSpanName(std::string_view operator_name);
  void add_tensor(const int64_t* sizes, size_t num_dims);
  void begin_tensor_list();
  void end_tensor_list();
  void add_other();
  // The name; the builder may not be used afterwards.
  const std::string& finish();

 private:
  void separate();
  std::string text_;
  bool first_input_ = true;
  bool first_in_list_ = true;
  bool in_list_ = false;
};

// Interns names (moescope_intern_n through `intern`), at most `max_names` distinct full names
// per process; past that an operator keeps its bare name, so a program whose shapes change every
// step cannot grow its trace's string table without bound. Thread-safe.
class CappedNameInterner {
 public:
  using InternFunction = moescope_name_t (*)(const char* text, size_t length);
  CappedNameInterner(size_t max_names, InternFunction intern);

  moescope_name_t intern(const std::string& name, std::string_view fallback);
  size_t num_full_names() const;
  bool capped() const;

 private:
  moescope_name_t intern_locked(std::string_view name);
  const size_t max_names_;
  const InternFunction intern_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, moescope_name_t> ids_;
  size_t num_full_names_ = 0;
};

}  // namespace moescope::torch_capture

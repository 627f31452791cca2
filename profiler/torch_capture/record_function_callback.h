// Removing a global RecordFunction callback, shared by the two captures that add one
// (collective_capture.cpp, operator_capture.cpp). Includes torch headers.
#pragma once

#include <ATen/record_function.h>

#include <exception>

namespace moescope::torch_capture {

// Removes the callback `handle` names (0: none) and clears it; never throws.
inline void remove_record_function_callback(at::CallbackHandle& handle) {
  try {
    if (handle) at::removeCallback(handle);
  } catch (const std::exception&) {
    // Already removed by torch: nothing left to undo.
  }
  handle = 0;
}

}  // namespace moescope::torch_capture

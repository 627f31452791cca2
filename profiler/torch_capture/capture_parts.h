// The two captures behind the C API (torch_capture_api.cpp), each in its own translation unit
// with the torch headers. Start functions return false with a reason and leave nothing
// installed; stop functions are idempotent. Called with the C API's lock held.
#pragma once

#include <string>

namespace moescope::torch_capture {

// collective_capture.cpp: a kernel on the c10d operators (dispatch key ADInplaceOrView) and a
// user-scope RecordFunction callback for the backends' execution ranges.
// `nccl_left_to_shim`: NCCL collectives are recorded by the shim's interposer, so only their
// process group's description is added here.
bool start_collective_capture(bool nccl_left_to_shim, std::string* reason);
void stop_collective_capture();

// operator_capture.cpp: a global RecordFunction callback (needs inputs) for every operator.
bool start_operator_capture(std::string* reason);
void stop_operator_capture();

}  // namespace moescope::torch_capture

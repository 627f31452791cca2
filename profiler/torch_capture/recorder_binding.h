// The recorder C API as this library sees it: referenced weakly, never linked. The symbols are
// resolved at load time from the capture shim `moescope record` preloads (or from
// libmoescope_recorder.so in a program linked with it), so a process keeps exactly one recorder;
// without one they stay null and moescope_torch_capture_start() refuses with a reason. Every
// translation unit that calls the recorder includes this header instead of recorder.h.
#pragma once

#include "moescope/recorder.h"

#pragma weak moescope_recording
#pragma weak moescope_intern
#pragma weak moescope_intern_n
#pragma weak moescope_now_ns
#pragma weak moescope_span_complete
#pragma weak moescope_instant
#pragma weak moescope_comm_op
#pragma weak moescope_comm_op_enter

namespace moescope::torch_capture {

// nullptr when every recorder function this library calls is present; otherwise a sentence
// saying what is missing.
const char* missing_recorder_reason();

}  // namespace moescope::torch_capture

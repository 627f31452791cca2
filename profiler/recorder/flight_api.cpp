// The C API of the collective progress (moescope/recorder.h, collective_progress.h), and the
// hook moescope_trigger() takes under the flight recorder.
#include "moescope/recorder.h"
#include "recorder.h"

using moescope::recorder::Recorder;

extern "C" void moescope_comm_op_enter(const moescope_comm_op_info* op) {
  if (!op || !moescope_recording) return;
  Recorder& recorder = Recorder::instance();
  if (!recorder.active()) return;
  recorder.collective_progress().entered(*op, moescope::recorder::monotonic_ns());
}

namespace moescope::recorder {

bool flight_recorder_takes(const moescope_trigger_info* trigger) {
  if (!moescope_recording) return false;
  Recorder& recorder = Recorder::instance();
  if (!recorder.flight_mode()) return false;
  if (Recorder::TriggerHandler handler = recorder.trigger_handler()) {
    handler(trigger);
  } else {
    recorder.dump(*trigger, "{}");
  }
  return true;
}

void collective_completed(const moescope_comm_op_info* op) {
  Recorder& recorder = Recorder::instance();
  if (recorder.active()) recorder.collective_progress().completed(*op, monotonic_ns());
}

}  // namespace moescope::recorder

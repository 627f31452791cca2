// Records one span into argv[1] and reads it back through the installed libraries.
#include <moescope/recorder.h>
#include <moescope/trace/trace_reader.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2 || moescope_recorder_start(argv[1], nullptr) != 0) return 2;
  moescope_span_begin(0, moescope_intern("installed"));
  moescope_span_end();
  moescope_recorder_stop();
  moescope::trace::TraceReader reader;
  if (!reader.open(argv[1])) return 3;
  moescope::trace::Chunk chunk;
  int spans = 0;
  while (reader.next_chunk(chunk)) {
    for (auto record : chunk) spans += record.kind() == moescope::trace::RecordKind::kSpanBegin;
  }
  std::printf("spans=%d\n", spans);
  return spans == 1 ? 0 : 4;
}

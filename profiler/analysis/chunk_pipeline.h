// Decodes a file's chunks on a second thread while the caller turns them into tracks: a
// bounded queue of decoded chunks whose buffers are recycled. Used when there are fewer files
// than hardware threads, so one big file still uses two cores. Internal to the analysis library.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "file_load.h"
#include "moescope/trace/trace_reader.h"

namespace moescope::analysis {

class ChunkPipeline {
 public:
  // Starts decoding `reader` (already opened) at once. `progress` is called from the decoder.
  ChunkPipeline(trace::TraceReader& reader, const std::atomic<bool>* cancel,
                const BytesProgress& progress, size_t depth = 4);
  ~ChunkPipeline();  // stops and joins the decoder
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  // Swaps the next decoded chunk into `chunk` (its old buffer is reused). False at the end.
  bool next(trace::Chunk& chunk);
  // Waits for the decoder to finish; afterwards the reader may be used again (errors()...).
  void join();

 private:
  void decode();

  trace::TraceReader& reader_;
  const std::atomic<bool>* cancel_;
  BytesProgress progress_;
  size_t depth_;
  std::mutex mutex_;
  std::condition_variable ready_;  // a chunk was queued or decoding ended
  std::condition_variable space_;  // a slot was freed
  std::deque<trace::Chunk> queue_;
  std::vector<trace::Chunk> spare_;
  bool finished_ = false;
  bool stop_ = false;
  std::thread decoder_;
};

}  // namespace moescope::analysis

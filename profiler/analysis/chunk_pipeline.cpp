#include "chunk_pipeline.h"

namespace moescope::analysis {

ChunkPipeline::ChunkPipeline(trace::TraceReader& reader, const std::atomic<bool>* cancel,
                             const BytesProgress& progress, size_t depth)
    : reader_(reader), cancel_(cancel), progress_(progress), depth_(depth) {
  decoder_ = std::thread([this] { decode(); });
}

ChunkPipeline::~ChunkPipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  space_.notify_all();
  join();
}

void ChunkPipeline::join() {
  if (decoder_.joinable()) decoder_.join();
}

void ChunkPipeline::decode() {
  uint64_t reported = 0;
  for (;;) {
    trace::Chunk chunk;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
      if (stop_) break;
      if (!spare_.empty()) {
        chunk = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if ((cancel_ && cancel_->load(std::memory_order_relaxed)) || !reader_.next_chunk(chunk)) break;
    if (progress_ && reader_.position() - reported >= (4u << 20)) {
      reported = reader_.position();
      progress_(reported, reader_.file_size());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(chunk));
    }
    ready_.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  ready_.notify_all();
}

bool ChunkPipeline::next(trace::Chunk& chunk) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return finished_ || !queue_.empty(); });
  if (queue_.empty()) return false;
  spare_.push_back(std::move(chunk));
  chunk = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  space_.notify_one();
  return true;
}

}  // namespace moescope::analysis

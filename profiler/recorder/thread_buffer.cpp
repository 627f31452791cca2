#include "thread_buffer.h"

namespace moescope::recorder {

BlockPool::~BlockPool() {
  for (Block* block : free_) delete block;
}

Block* BlockPool::acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = nullptr;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (allocated_ < max_blocks_) {
    block = new (std::nothrow) Block;
    if (!block) return nullptr;
    ++allocated_;
  } else {
    return nullptr;
  }
  block->committed.store(0, std::memory_order_relaxed);
  block->next.store(nullptr, std::memory_order_relaxed);
  return block;
}

void BlockPool::release(Block* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (allocated_ > max_blocks_) {
    delete block;
    --allocated_;
    return;
  }
  free_.push_back(block);
}

void BlockPool::set_max_blocks(size_t max_blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_blocks_ = max_blocks;
  while (allocated_ > max_blocks_ && !free_.empty()) {
    delete free_.back();
    free_.pop_back();
    --allocated_;
  }
}

size_t BlockPool::blocks_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_ - free_.size();
}

ThreadBuffer::ThreadBuffer(BlockPool& pool, uint32_t stream, uint64_t generation)
    : pool_(pool), stream_(stream), generation_(generation) {}

uint8_t* ThreadBuffer::reserve_slow(uint32_t bytes) {
  if (bytes > Block::kBlockBytes) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Block* block = pool_.acquire();
  if (!block) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (write_block_) {
    // Publish the switch: everything in the old block is committed before `next` is seen.
    write_block_->next.store(block, std::memory_order_release);
  } else {
    first_block_.store(block, std::memory_order_release);
  }
  write_block_ = block;
  write_pos_ = 0;
  return block->data;
}

void ThreadBuffer::release_blocks() {
  Block* block = read_block_ ? read_block_ : first_block_.load(std::memory_order_acquire);
  while (block) {
    Block* next = block->next.load(std::memory_order_acquire);
    pool_.release(block);
    block = next;
  }
  read_block_ = write_block_ = nullptr;
  write_pos_ = Block::kBlockBytes;
  first_block_.store(nullptr, std::memory_order_relaxed);
}

size_t ThreadBuffer::drain(std::vector<uint8_t>& out) {
  size_t before = out.size();
  if (!read_block_) {
    read_block_ = first_block_.load(std::memory_order_acquire);
    read_pos_ = 0;
    if (!read_block_) return 0;
  }
  for (;;) {
    // Load `next` first: if it is set, the producer finished this block before setting it.
    Block* next = read_block_->next.load(std::memory_order_acquire);
    uint32_t committed = read_block_->committed.load(std::memory_order_acquire);
    if (committed > read_pos_) {
      out.insert(out.end(), read_block_->data + read_pos_, read_block_->data + committed);
      read_pos_ = committed;
    }
    if (!next) break;
    pool_.release(read_block_);
    read_block_ = next;
    read_pos_ = 0;
  }
  return out.size() - before;
}

}  // namespace moescope::recorder

// Per-thread event buffers: a single-producer single-consumer byte stream of records.
//
//   producer (the recording thread)          consumer (the flush thread)
//   reserve(n) -> write record -> commit()   drain(): copy [read, committed) of each block
//
//   Block: | committed (atomic) | next (atomic) | data[kBlockBytes] |
//            ^ release-stored after each record; the consumer reads up to it
//
// The producer never locks or allocates except when a block fills (every few thousand
// records), when it takes a block from the pool. The pool is bounded: when it is exhausted
// the record is dropped and counted, so a stalled disk never grows memory without bound.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "string_table.h"

namespace moescope::recorder {

struct Block {
  static constexpr uint32_t kBlockBytes = 128 * 1024;
  std::atomic<uint32_t> committed{0};
  std::atomic<Block*> next{nullptr};
  alignas(8) uint8_t data[kBlockBytes];
};

class BlockPool {
 public:
  explicit BlockPool(size_t max_blocks) : max_blocks_(max_blocks) {}
  ~BlockPool();
  Block* acquire();  // nullptr when the budget is used up
  void release(Block* block);
  // A new recording's budget (MOESCOPE_BUFFER_MB); free blocks above it are freed now, blocks
  // in use above it as they come back.
  void set_max_blocks(size_t max_blocks);
  size_t blocks_in_use() const;

 private:
  mutable std::mutex mutex_;
  std::vector<Block*> free_;
  size_t allocated_ = 0;
  size_t max_blocks_;
};

class ThreadBuffer {
 public:
  ThreadBuffer(BlockPool& pool, uint32_t stream, uint64_t generation);

  // Returns space for `bytes` (a multiple of 8, at most a block) or nullptr if dropped.
  uint8_t* reserve(uint32_t bytes) {
    if (write_block_ && write_pos_ + bytes <= Block::kBlockBytes) {
      return write_block_->data + write_pos_;
    }
    return reserve_slow(bytes);
  }
  void commit(uint32_t bytes) {
    write_pos_ += bytes;
    write_block_->committed.store(write_pos_, std::memory_order_release);
  }

  // Hot path: space in the current block, remembered with where it ends, so that committing
  // needs no reload of the buffer's state after the record's bytes were stored (stores through
  // a byte pointer may alias anything, so the compiler would reload it).
  struct Reservation {
    uint8_t* data;
    Block* block;
    uint32_t end;
  };
  // False when the caller must take the slow path (no block yet, or the block is full).
  bool try_reserve(uint32_t bytes, Reservation& out) {
    uint32_t end = write_pos_ + bytes;
    if (end > Block::kBlockBytes) return false;  // also when there is no block (see write_pos_)
    out = Reservation{write_block_->data + write_pos_, write_block_, end};
    return true;
  }
  void commit(const Reservation& reservation) {
    write_pos_ = reservation.end;
    reservation.block->committed.store(reservation.end, std::memory_order_release);
  }

  // Consumer side: appends every committed record since the last drain to `out`; returns the
  // number of bytes appended. Frees blocks the producer has left.
  size_t drain(std::vector<uint8_t>& out);

  // Returns every block to the pool; only once the producer thread is gone.
  void release_blocks();

  uint32_t stream() const { return stream_; }
  // Consumer side: the time of this buffer's last tick-stamped record written to the trace
  // (TickConverter::to_ns_not_before keeps the next ones from going back before it).
  uint64_t& last_tick_time_ns() { return last_tick_time_ns_; }
  uint64_t generation() const { return generation_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Names interned by content on this thread (NVTX messages); touched by the producer only.
  ThreadStringCache& string_cache() { return string_cache_; }
  void mark_finished() { finished_.store(true, std::memory_order_release); }
  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  uint8_t* reserve_slow(uint32_t bytes);

  BlockPool& pool_;
  const uint32_t stream_;
  const uint64_t generation_;
  // Producer state.
  Block* write_block_ = nullptr;
  // kBlockBytes while there is no block, so that one bounds check sends the first record (and
  // any after the pool ran dry) to the slow path.
  uint32_t write_pos_ = Block::kBlockBytes;
  // Consumer state.
  Block* read_block_ = nullptr;
  uint32_t read_pos_ = 0;
  uint64_t last_tick_time_ns_ = 0;
  std::atomic<Block*> first_block_{nullptr};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<bool> finished_{false};
  ThreadStringCache string_cache_;
};

}  // namespace moescope::recorder

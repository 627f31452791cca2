// Runs one worker function on several threads at once, for loaders that pull files off a shared
// counter (trace_loader.cpp, summary_load.cpp).
#pragma once

#include <thread>
#include <vector>

namespace moescope::analysis {

// Calls `worker` on `threads` threads and waits for all; with 0 or 1, on the calling thread
// (no thread is started for the single-file case).
template <typename Worker>
void run_worker_threads(unsigned threads, Worker& worker) {
  if (threads <= 1) {
    worker();
    return;
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& thread : pool) thread.join();
}

}  // namespace moescope::analysis

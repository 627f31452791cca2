// What one MoE layer measured of its own costs since the rebalancer last took them, as running
// line fits (y: host milliseconds), which the rebalancer sums over layers and ranks and turns
// into the rates of its cost rule (balancer/rebalance_cost_model.h).
//
// Measured only where the host time of a phase is its run: on CPU devices. On a GPU the host
// returns once the work is queued, so a layer there measures nothing and the rebalancer falls
// back to its assumed rates (RebalancerOptions).
#pragma once

#include <chrono>

#include "moescope/balancer/running_line_fit.h"

namespace moescope::runtime {

struct LayerCostSamples {
  balancer::RunningLineFit expert_compute;  // one forward's grouped experts vs rows received
  // One dispatch all-to-all vs the bytes this rank received. The counts exchange right before
  // it is where the ranks meet, so its time is transfer, not waiting for the busiest rank.
  balancer::RunningLineFit dispatch;
  balancer::RunningLineFit all_reduce;  // one replica-gradient all-reduce vs its bytes
};

/// Host milliseconds since `start`.
inline double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace moescope::runtime

// Expert parallelism with real processes: 2 and 4 ranks of moe_ep_worker on loopback
// (TCPStore + ProcessGroupGloo), launched and supervised from here with a hard deadline, so a
// hang fails the test instead of blocking CI.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string worker_path() {
  char self[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/moe_ep_worker";
}

// A port that was free a moment ago (the kernel picks it).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

struct WorkerResult {
  int exit_code = -1;  // -1: killed at the deadline
  std::string output;
};

// Starts `world` workers and waits for all of them, killing every one still running at
// `deadline`.
std::vector<WorkerResult> run_workers(const std::string& mode, int world, int timeout_ms,
                                      std::chrono::seconds deadline) {
  const std::string exe = worker_path();
  const int port = free_port();
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (int rank = 0; rank < world; ++rank) {
    logs.push_back(::testing::TempDir() + "moe_ep_worker." + std::to_string(getpid()) + "." +
                   std::to_string(rank) + ".log");
    const pid_t pid = fork();
    if (pid == 0) {
      FILE* log = std::freopen(logs.back().c_str(), "w", stdout);
      if (log) dup2(fileno(stdout), STDERR_FILENO);
      const std::string r = std::to_string(rank), w = std::to_string(world),
                        p = std::to_string(port), t = std::to_string(timeout_ms);
      execl(exe.c_str(), exe.c_str(), mode.c_str(), r.c_str(), w.c_str(), p.c_str(), t.c_str(),
            static_cast<char*>(nullptr));
      std::perror("execl moe_ep_worker");
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<WorkerResult> results(static_cast<size_t>(world));
  std::vector<bool> done(static_cast<size_t>(world), false);
  const auto until = std::chrono::steady_clock::now() + deadline;
  int remaining = world;
  while (remaining > 0) {
    for (int rank = 0; rank < world; ++rank) {
      if (done[rank]) continue;
      int status = 0;
      if (waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        done[rank] = true;
        --remaining;
        results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > until) {
      for (int rank = 0; rank < world; ++rank) {
        if (!done[rank]) {
          kill(pids[rank], SIGKILL);
          waitpid(pids[rank], nullptr, 0);
          results[rank].exit_code = -1;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(logs[rank]);
    std::stringstream text;
    text << in.rdbuf();
    results[rank].output = text.str();
    std::remove(logs[rank].c_str());
  }
  return results;
}

void expect_equal_to_one_process(int world) {
  const auto results = run_workers("equality", world, 30000, std::chrono::seconds(120));
  const std::regex result_line(
      R"(RESULT case=(\S+) rank=(\d+) max_diff=(\S+) grad_magnitude=(\S+))");
  for (int rank = 0; rank < world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + results[rank].output);
    ASSERT_EQ(results[rank].exit_code, 0);
    int cases = 0;
    for (std::sregex_iterator
             it(results[rank].output.begin(), results[rank].output.end(), result_line),
         end;
         it != end; ++it) {
      ++cases;
      EXPECT_EQ(std::stoi((*it)[2]), rank);
      EXPECT_LE(std::stod((*it)[3]), 1e-10) << "case " << (*it)[1];
      EXPECT_GT(std::stod((*it)[4]), 1e-3) << "case " << (*it)[1] << ": gradients are ~0";
    }
    EXPECT_EQ(cases, 3);
  }
}

TEST(ExpertParallel, TwoRanksMatchOneProcessHoldingAllExperts) {
  expect_equal_to_one_process(2);
}

TEST(ExpertParallel, FourRanksMatchOneProcessHoldingAllExperts) {
  expect_equal_to_one_process(4);
}

TEST(ExpertParallel, DeadRankMakesTheOthersFailWithinTheTimeout) {
  const int timeout_ms = 5000;
  const auto results = run_workers("dead_peer", 4, timeout_ms, std::chrono::seconds(60));
  const std::regex error_line(R"(DEAD_PEER_ERROR rank=(\d+) seconds=(\S+) message=(.*))");
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + results[rank].output);
    ASSERT_NE(results[rank].exit_code, -1) << "rank hung past the deadline";
    EXPECT_EQ(results[rank].exit_code, 0);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(results[rank].output, match, error_line));
    EXPECT_LE(std::stod(match[2]), timeout_ms / 1000.0 + 10.0);
    EXPECT_NE(match[3].str().find("expert parallelism"), std::string::npos) << match[3];
    EXPECT_NE(match[3].str().find("rank " + std::to_string(rank) + " of 4"), std::string::npos)
        << match[3];
  }
  EXPECT_NE(results[3].output.find("DEAD_PEER_EXITING"), std::string::npos);
}

TEST(ExpertParallel, FourRanksRebalanceWithoutChangingTheModel) {
  const auto results = run_workers("rebalance", 4, 30000, std::chrono::seconds(150));
  const std::regex migration_line(
      R"(MIGRATION rank=(\d+) step=(\d+) output_diff=(\S+) input_grad_diff=(\S+) )"
      R"(weight_grad_diff=(\S+) moved_grad_diff=(\S+) state_diff=(\S+) packed_sync_diff=(\S+) )"
      R"(bytes_received=(\d+))");
  int64_t bytes_received = 0;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + results[rank].output);
    ASSERT_EQ(results[rank].exit_code, 0);
    int migrations = 0;
    for (std::sregex_iterator
             it(results[rank].output.begin(), results[rank].output.end(), migration_line),
         end;
         it != end; ++it) {
      ++migrations;
      EXPECT_EQ(std::stoi((*it)[1]), rank);
      for (int field = 3; field <= 8; ++field) {
        EXPECT_LE(std::stod((*it)[field]), 1e-10) << "field " << field << " at step " << (*it)[2];
      }
      bytes_received += std::stoll((*it)[9]);
    }
    EXPECT_GE(migrations, 1) << "the skewed run never migrated";
  }
  EXPECT_GT(bytes_received, 0) << "no expert crossed ranks";
  std::smatch load;
  ASSERT_TRUE(std::regex_search(results[0].output, load,
                                std::regex(R"(LOAD before=(\S+) after=(\S+) migrations=(\d+))")));
  const double before = std::stod(load[1]), after = std::stod(load[2]);
  EXPECT_GT(before, 1.3) << "the router skew should overload one rank";
  EXPECT_LT(after, before * 0.85) << "rebalancing did not lower max/mean rows per rank";
}

// A rebalancer saved after it moved experts (with the layer and Adam, as a checkpoint holds
// them) and loaded into freshly built ones has the same placement, computes the same function
// and takes the same next decision; one built for another layer refuses the archive.
TEST(ExpertParallel, RebalancerCheckpointRestoresThePlacementAndTheNextDecision) {
  const auto results = run_workers("rebalance_checkpoint", 2, 30000, std::chrono::seconds(120));
  const std::regex saved_line(
      R"(SAVED rank=(\d+) step=(\d+) moved=(\d) same_placement=(\d) same_forecast=(\d) )"
      R"(output_diff=(\S+))");
  const std::regex next_line(
      R"(NEXT rank=(\d+) step=(\d+) decided=(\d) same_decisions=(\d) same_placement=(\d) )"
      R"(output_diff=(\S+) applied=(\d+))");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + results[rank].output);
    ASSERT_EQ(results[rank].exit_code, 0);
    std::smatch saved, next;
    ASSERT_TRUE(std::regex_search(results[rank].output, saved, saved_line));
    EXPECT_EQ(saved[3], "1") << "no expert moved before the save";
    EXPECT_EQ(saved[4], "1");
    EXPECT_EQ(saved[5], "1");
    EXPECT_EQ(std::stod(saved[6]), 0.0);  // same weights in the same slots
    ASSERT_TRUE(std::regex_search(results[rank].output, next, next_line));
    EXPECT_EQ(next[3], "1") << "no decision after the load";
    EXPECT_EQ(next[4], "1");
    EXPECT_EQ(next[5], "1");
    EXPECT_EQ(std::stod(next[6]), 0.0);
    EXPECT_NE(results[rank].output.find("MISMATCH rank=" + std::to_string(rank) +
                                        " message=test archive/layer0: saved for layer 0"),
              std::string::npos);
  }
}

TEST(ExpertParallel, PoolAllocatesNothingInSteadyStateAndTheReceiveCapHoldsAColdStart) {
  const auto results = run_workers("memory", 2, 30000, std::chrono::seconds(120));
  const std::regex pool_line(
      R"(POOL rank=(\d+) output_diff=(\S+) grad_diff=(\S+) allocations_after_warmup=(-?\d+) )"
      R"(growths_after_warmup=(-?\d+) reuses=(\d+) allocations=(\d+))");
  const std::regex cap_line(R"(CAP rank=(\d+) received=(\d+) dropped=(\d+) finite=(\d))");
  const std::regex fail_line(R"(CAP_FAIL rank=(\d+) message=(.*))");
  int64_t dropped = 0;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " output:\n" + results[rank].output);
    ASSERT_EQ(results[rank].exit_code, 0);
    std::smatch pool, cap, fail;
    ASSERT_TRUE(std::regex_search(results[rank].output, pool, pool_line));
    EXPECT_EQ(std::stod(pool[2]), 0.0) << "the pool changed the layer's output";
    EXPECT_EQ(std::stod(pool[3]), 0.0) << "the pool changed the gradients";
    EXPECT_EQ(std::stoll(pool[4]), 0) << "allocations after warm-up";
    EXPECT_EQ(std::stoll(pool[5]), 0) << "growths after warm-up";
    EXPECT_GE(std::stoll(pool[6]), 3 * 12) << "three buffers reused on every later step";
    EXPECT_GE(std::stoll(pool[7]), 3);

    ASSERT_TRUE(std::regex_search(results[rank].output, cap, cap_line));
    EXPECT_LE(std::stoll(cap[2]), 60) << "a rank received more rows than its cap";
    EXPECT_EQ(cap[4], "1") << "non-finite outputs or gradients";
    dropped += std::stoll(cap[3]);

    ASSERT_TRUE(std::regex_search(results[rank].output, fail, fail_line));
    EXPECT_NE(fail[2].str().find("receive_cap_rows = 60"), std::string::npos) << fail[2];
  }
  EXPECT_GT(dropped, 0) << "the skewed cold start dropped nothing";
}

}  // namespace

#include "flight_monitor.h"

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/trace/trigger_reason.h"
#include "python_stack_file.h"
#include "recorder.h"
#include "run_folder.h"
#include "shim_options.h"
#include "trace_path.h"

namespace moescope::inject {
namespace {

using recorder::monotonic_ns;
using recorder::Recorder;

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr int kTickMs = 100;

struct Monitor {
  std::mutex trigger_mutex;  // one dump at a time
  // Wakes the monitor (a SIGUSR1, or the stop). A semaphore, not a pipe: a program that closes
  // every descriptor it did not open reuses the numbers, and the monitor must never read from
  // or write to one of its files. sem_post is async-signal-safe.
  sem_t wake;
  std::atomic<bool> wake_ready{false};
  std::atomic<int> dump_requests{0};  // SIGUSR1s not yet served
  std::atomic<bool> running{false};
  std::atomic<bool> stop_requested{false};
  pthread_t thread{};
  int32_t rank = -1;
  int64_t pid = 0;
  uint64_t hang_timeout_ns = 0;
  double slow_step_factor = 0;
  std::string run_dir, trigger_path, scratch_path;
  uint64_t seen_sequence = 0;      // latest run-folder trigger seen (under trigger_mutex)
  uint64_t hang_fired_at = 0;      // the progress time a hang was reported for
  uint64_t slow_fired_step = 0;    // the step start a slow step was reported for
  std::vector<std::string> dumps;  // paths written
  uint64_t last_dump_ns = 0;
  PythonStackFile python_stacks;  // Python processes: every thread's stack in a dump
  std::atomic<bool> crashing{false};
  bool handlers_installed = false;
};

Monitor& monitor() {
  static Monitor* instance = new Monitor;  // leaked: exit paths use it until the end
  return *instance;
}

uint64_t last_progress_ns() {
  Recorder& recorder = Recorder::instance();
  return std::max(recorder.flight_ring().last_progress_ns(),
                  recorder.collective_progress().last_change_ns());
}

void write_process_entry_now(bool exited) {
  Monitor& m = monitor();
  if (m.run_dir.empty()) return;
  nlohmann::json entry = {{"pid", m.pid},
                          {"rank", m.rank},
                          {"trace", Recorder::instance().path()},
                          {"dumps", m.dumps},
                          {"exited", exited}};
  write_process_entry(m.run_dir, m.pid, entry.dump());
}

std::string dump_metadata(const moescope_trigger_info& trigger, uint32_t origin_reason) {
  Monitor& m = monitor();
  uint64_t now = monotonic_ns();
  nlohmann::json flight = nlohmann::json::object();
  nlohmann::json described = {
      {"reason", trigger.reason}, {"origin_rank", trigger.origin_rank}, {"code", trigger.code}};
  if (origin_reason) described["origin_reason"] = origin_reason;
  flight["trigger"] = described;
  nlohmann::json collectives = nlohmann::json::parse(
      Recorder::instance().collective_progress().describe_json(now), nullptr, false);
  if (!collectives.is_discarded()) flight["collectives"] = collectives["communicators"];
  uint64_t progress = last_progress_ns();
  if (progress) flight["last_progress_ago_ns"] = now > progress ? now - progress : 0;
  if (m.hang_timeout_ns) flight["hang_timeout_s"] = m.hang_timeout_ns * 1e-9;
  if (std::string stacks = m.python_stacks.read_all_threads(); !stacks.empty())
    flight["python_stacks"] = stacks;
  return nlohmann::json{{"flight_recorder", flight}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

// Writes the ring for `trigger`; a trigger of this process is announced to the job first, so the
// other ranks dump while this one writes. `origin_reason`: what the origin of a peer trigger saw.
void dump_for(moescope_trigger_info trigger, uint32_t origin_reason = 0) {
  Monitor& m = monitor();
  std::lock_guard<std::mutex> lock(m.trigger_mutex);
  // The consequences of what was just dumped (a peer's death raises here too, then the process
  // exits non-zero) are the same story: no second dump for them.
  bool consequence = trigger.reason == MOESCOPE_TRIGGER_EXCEPTION ||
                     trigger.reason == MOESCOPE_TRIGGER_COLLECTIVE_TIMEOUT ||
                     trigger.reason == MOESCOPE_TRIGGER_EXIT;
  if (consequence && m.last_dump_ns && monotonic_ns() - m.last_dump_ns < 30'000'000'000ull) {
    return;
  }
  // A launcher (no rank) in a job of ranks: its own failure is the ranks' story, told by them.
  if (m.rank < 0 && trigger.reason != MOESCOPE_TRIGGER_SIGNAL && !m.run_dir.empty() &&
      run_has_ranked_process(m.run_dir)) {
    return;
  }
  if (trigger.reason != MOESCOPE_TRIGGER_PEER) {
    if (trigger.origin_rank < 0) trigger.origin_rank = m.rank;
    if (!m.run_dir.empty()) {
      uint64_t sequence =
          announce_run_trigger(m.run_dir, trigger.origin_rank, trigger.reason, trigger.code, m.pid);
      m.seen_sequence = std::max(m.seen_sequence, sequence);
    }
  }
  if (!trigger.time_ns) trigger.time_ns = monotonic_ns();
  std::string metadata = dump_metadata(trigger, origin_reason);
  size_t ring_bytes = Recorder::instance().flight_ring().bytes();
  uint64_t began = monotonic_ns();
  std::string path = Recorder::instance().dump(trigger, metadata);
  double took_ms = (monotonic_ns() - began) * 1e-6;
  m.hang_fired_at = last_progress_ns();  // this stall is reported now
  if (path.empty()) return;
  m.last_dump_ns = monotonic_ns();
  m.dumps.push_back(path);
  std::fprintf(stderr,
               "moescope: flight recorder (%s%s%s): wrote %s (%.1f MB of ring in %.0f ms)\n",
               trace::trigger_reason_name(trigger.reason), origin_reason ? " after " : "",
               origin_reason ? trace::trigger_reason_name(origin_reason) : "", path.c_str(),
               ring_bytes / 1e6, took_ms);
  write_process_entry_now(false);
}

// moescope_trigger() under the flight recorder (recorder.h's TriggerHandler).
void handle_trigger(const moescope_trigger_info* trigger) {
  if (trigger) dump_for(*trigger);
}

moescope_trigger_info make_trigger(uint32_t reason, int32_t origin_rank, int32_t code) {
  moescope_trigger_info trigger{};
  trigger.reason = reason;
  trigger.origin_rank = origin_rank;
  trigger.code = code;
  return trigger;
}

// A newer job-wide trigger in the run folder (from another process): dump as "peer".
void serve_run_trigger() {
  Monitor& m = monitor();
  if (m.run_dir.empty()) return;
  RunTrigger seen;
  if (!read_run_trigger(m.run_dir, seen)) return;
  {
    std::lock_guard<std::mutex> lock(m.trigger_mutex);
    if (seen.sequence <= m.seen_sequence) return;
    m.seen_sequence = seen.sequence;
  }
  if (seen.origin_pid == m.pid) return;
  // A process without a rank (the launcher) does not dump where ranks do.
  if (m.rank < 0 && (seen.origin_rank >= 0 || run_has_ranked_process(m.run_dir))) return;
  if (seen.origin_rank < 0 && seen.reason == MOESCOPE_TRIGGER_SIGNAL) {
    // `moescope dump`: asked of every process alike, not a peer's trigger.
    moescope_trigger_info asked = make_trigger(MOESCOPE_TRIGGER_SIGNAL, -1, seen.code);
    std::lock_guard<std::mutex> lock(m.trigger_mutex);
    asked.time_ns = monotonic_ns();
    std::string metadata = dump_metadata(asked, 0);
    size_t ring_bytes = Recorder::instance().flight_ring().bytes();
    uint64_t began = monotonic_ns();
    std::string path = Recorder::instance().dump(asked, metadata);
    if (!path.empty()) {
      m.last_dump_ns = monotonic_ns();
      m.dumps.push_back(path);
      std::fprintf(stderr,
                   "moescope: flight recorder (moescope dump): wrote %s (%.1f MB of ring in %.0f "
                   "ms)\n",
                   path.c_str(), ring_bytes / 1e6, (m.last_dump_ns - began) * 1e-6);
      write_process_entry_now(false);
    }
    return;
  }
  dump_for(make_trigger(MOESCOPE_TRIGGER_PEER, seen.origin_rank, 0), seen.reason);
}

void check_watchdogs() {
  Monitor& m = monitor();
  uint64_t now = monotonic_ns();
  if (m.hang_timeout_ns) {
    uint64_t progress = last_progress_ns();
    // Armed by the first step or collective (a program's start-up is not a hang), and only while
    // a step or a collective is in progress (the end of training, a final save, Python's
    // finalization are not either).
    Recorder& recorder = Recorder::instance();
    bool busy = recorder.flight_ring().in_step() || recorder.collective_progress().any_open();
    if (busy && progress && progress != m.hang_fired_at && now > progress + m.hang_timeout_ns) {
      m.hang_fired_at = progress;
      dump_for(make_trigger(MOESCOPE_TRIGGER_HANG, -1, 0));
    }
  }
  if (m.slow_step_factor > 0) {
    uint64_t step_start = 0, median = 0;
    Recorder::instance().flight_ring().step_timing(step_start, median);
    // The monitor sees steps as the flush thread drains them (every 100 ms): a step that began
    // since is not known yet, hence the slack.
    constexpr double kDrainSlackNs = 250e6;
    if (median && step_start != m.slow_fired_step && Recorder::instance().flight_ring().in_step() &&
        static_cast<double>(now - step_start) >
            m.slow_step_factor * static_cast<double>(median) + kDrainSlackNs) {
      m.slow_fired_step = step_start;
      dump_for(make_trigger(MOESCOPE_TRIGGER_SLOW_STEP, -1, 0));
    }
  }
}

void at_exit_with_status(int status, void*) {
  flight_monitor_at_exit(status);
}

// The non-zero exit trigger needs the status, which only on_exit() handlers see. Exit handlers
// run in reverse order of registration, and the shim's own (a DSO's atexit, run by ld.so's
// _dl_fini) stops the recording: this one must be registered after __libc_start_main registered
// _dl_fini, i.e. once main runs. Hence from here, on the monitor's first tick.
void register_exit_trigger_once() {
  static std::atomic<bool> registered{false};
  if (!registered.exchange(true)) on_exit(&at_exit_with_status, nullptr);
}

void* monitor_main(void*) {
  Monitor& m = monitor();
  m.running = true;
  bool first_tick = true;
  while (!m.stop_requested.load()) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += kTickMs * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    sem_clockwait(&m.wake, CLOCK_MONOTONIC, &deadline);
    if (m.stop_requested.load()) break;
    if (m.dump_requests.exchange(0) > 0)
      dump_for(make_trigger(MOESCOPE_TRIGGER_SIGNAL, -1, SIGUSR1));
    if (first_tick) {
      first_tick = false;
      register_exit_trigger_once();
    }
    try {
      m.python_stacks.note_handler();
      serve_run_trigger();
      check_watchdogs();
    } catch (...) {
    }
  }
  m.running = false;
  return nullptr;
}

void on_sigusr1(int) {
  int saved_errno = errno;
  Monitor& m = monitor();
  if (m.wake_ready.load()) {
    m.dump_requests.fetch_add(1);
    sem_post(&m.wake);
  }
  errno = saved_errno;
}

// A fatal signal: what the ring holds goes to the dump file, the job is told, then the signal's
// default action happens. Only async-signal-safe calls.
void on_fatal_signal(int signal_number, siginfo_t*, void*) {
  Monitor& m = monitor();
  if (!m.crashing.exchange(true)) {
    static const char kMessage[] = "moescope: flight recorder: fatal signal, writing the ring\n";
    ssize_t ignored = ::write(2, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
    if (!m.run_dir.empty()) {
      announce_run_trigger_from_signal_handler(m.trigger_path.c_str(), m.scratch_path.c_str(),
                                               m.rank, MOESCOPE_TRIGGER_CRASH, signal_number,
                                               m.pid);
    }
    Recorder::instance().dump_from_signal_handler(signal_number, m.rank);
  }
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  ::sigaction(signal_number, &default_action, nullptr);
  ::raise(signal_number);  // blocked until the handler returns; a fault re-faults anyway
}

// Installs `handler` for `signal_number` only where the program left the default.
void install_if_default(int signal_number, void (*handler)(int, siginfo_t*, void*),
                        void (*simple)(int)) {
  struct sigaction current;
  if (::sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ours;
  std::memset(&ours, 0, sizeof(ours));
  sigemptyset(&ours.sa_mask);
  if (handler) {
    ours.sa_sigaction = handler;
    ours.sa_flags = SA_SIGINFO;
  } else {
    ours.sa_handler = simple;
    ours.sa_flags = SA_RESTART;
  }
  ::sigaction(signal_number, &ours, nullptr);
}

}  // namespace

void start_flight_monitor() {
  Recorder& recorder = Recorder::instance();
  Monitor& m = monitor();
  if (!recorder.flight_mode() || m.running.load()) return;
  const ShimOptions& options = shim_options();
  recorder::ProcessIdentity identity = recorder::current_process_identity();
  m.rank = identity.rank;
  m.pid = identity.pid;
  m.hang_timeout_ns = static_cast<uint64_t>(options.hang_timeout_s * 1e9);
  m.slow_step_factor = options.slow_step_factor;
  m.run_dir = options.run_dir;
  m.dumps.clear();
  m.stop_requested = false;
  m.hang_fired_at = m.slow_fired_step = 0;
  m.python_stacks.handler = nullptr;
  if (!m.run_dir.empty()) {
    m.trigger_path = m.run_dir + "/trigger";
    m.scratch_path = m.trigger_path + "." + std::to_string(m.pid);
    m.python_stacks.path = m.run_dir + "/stack." + std::to_string(m.pid) + ".txt";
    RunTrigger latest;  // triggers from before this process started are not its business
    m.seen_sequence = read_run_trigger(m.run_dir, latest) ? latest.sequence : 0;
    write_process_entry_now(false);
  }
  recorder.set_trigger_handler(&handle_trigger);
  if (!m.wake_ready.load()) {
    if (sem_init(&m.wake, 0, 0) != 0) {
      std::fprintf(stderr, "moescope: flight recorder without its monitor (%s)\n",
                   std::strerror(errno));
      return;
    }
    m.wake_ready = true;
  }
  if (!m.handlers_installed) {
    m.handlers_installed = true;
    install_if_default(SIGUSR1, nullptr, &on_sigusr1);
    for (int signal_number : kFatalSignals)
      install_if_default(signal_number, &on_fatal_signal, nullptr);
  }
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);  // signals go to the program's threads
  int rc = pthread_create(&m.thread, nullptr, &monitor_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (rc != 0) {
    std::fprintf(stderr, "moescope: flight recorder without its monitor thread\n");
    return;
  }
  pthread_setname_np(m.thread, "moescope-flight");
  struct timespec pause = {0, 50000};
  for (int waited = 0; !m.running.load() && waited < 20000; ++waited) nanosleep(&pause, nullptr);
}

void stop_flight_monitor() {
  Monitor& m = monitor();
  if (!Recorder::instance().flight_mode()) return;
  // A peer's trigger this process has not served yet (the launcher may be stopping this rank
  // because another one failed). SIGINT/SIGTERM alone do not dump: pools and launchers end
  // healthy workers that way.
  try {
    serve_run_trigger();
  } catch (...) {
  }
  if (m.running.load() && !pthread_equal(m.thread, pthread_self())) {
    m.stop_requested = true;
    sem_post(&m.wake);
    pthread_join(m.thread, nullptr);
  }
  write_process_entry_now(true);
  Recorder::instance().set_trigger_handler(nullptr);
}

void forget_flight_monitor_after_fork() {
  Monitor& m = monitor();
  new (&m.trigger_mutex) std::mutex;
  if (m.wake_ready.load()) sem_init(&m.wake, 0, 0);  // the parent's count is not the child's
  m.dump_requests = 0;
  m.running = false;
  m.stop_requested = false;
  m.dumps.clear();
}

void flight_monitor_at_exit(int status) {
  if (status == 0 || !Recorder::instance().flight_mode()) return;
  if (Recorder::instance().dumps_written() != 0) return;  // the exception already dumped
  try {
    dump_for(make_trigger(MOESCOPE_TRIGGER_EXIT, -1, status));
  } catch (...) {
  }
}

}  // namespace moescope::inject

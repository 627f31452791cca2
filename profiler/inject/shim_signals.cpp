#include "shim_signals.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "moescope/trace/private_descriptor.h"
#include "moescope/trace/recording_environment.h"
#include "shim_session.h"

namespace moescope::inject {
namespace {

using SigactionFunction = int (*)(int, const struct sigaction*, struct sigaction*);

constexpr int kWatchedSignals[] = {SIGINT, SIGTERM};
constexpr long kFinalFlushWaitMs = 5000;

enum FlushState : int { kIdle = 0, kRequested = 1, kDone = 2 };

SigactionFunction g_real_sigaction = nullptr;
std::atomic<bool> g_trampolines_installed{false};
// What the program believes is installed, per watched signal (index in kWatchedSignals).
struct sigaction g_program_action[2];
// The process the table above belongs to. A vfork child shares the parent's memory until it
// execs, and Python's subprocess resets every handled signal to SIG_DFL there: written into
// the table, that would leave the parent's own handler (torchrun's SIGTERM cleanup) replaced
// by SIG_DFL. Calls from any other process go straight to the kernel.
std::atomic<pid_t> g_table_pid{0};
// Whether the trampoline is installed in the kernel for that signal (false while SIG_IGN).
std::atomic<bool> g_trampoline_active[2];

std::atomic<int> g_wake_fd{-1};  // write end of the watcher's pipe; -1 without a watcher
int g_watch_fd = -1;             // its read end
// The pipe's inode: a program that closes descriptors it did not open may reuse the numbers,
// and a byte must never go into one of its files.
trace::DescriptorIdentity g_pipe;
std::atomic<int> g_flush_state{kIdle};
std::atomic<bool> g_watcher_running{false};

// `moescope record` forwards a SIGINT/SIGTERM sent to it by a process (kill, timeout, a
// scheduler) to the command it runs. When the sender signalled the whole process group, the
// command gets the signal twice: directly and forwarded. Python launchers (torchrun) take a
// second SIGTERM during their shutdown as a new exception and exit without stopping their
// workers, so the command of `record` is handed each such signal once: a forwarded delivery and
// a direct one of the same signal within kPairWindowNs are one delivery. Only in the process
// `record` started itself (its parent is $MOESCOPE_RECORD_PID); nowhere else.
constexpr int64_t kPairWindowNs = 2000000000;
pid_t g_record_pid = 0;
struct UnmatchedDeliveries {
  std::atomic<int> direct{0}, forwarded{0};
  std::atomic<int64_t> last_ns{0};
};
UnmatchedDeliveries g_unmatched[2];

int64_t monotonic_now_ns() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// Async-signal-safe. True when this delivery is the twin of one the program already got.
bool is_second_of_a_pair(int index, const siginfo_t* info) {
  if (g_record_pid <= 0 || getppid() != g_record_pid || !info) return false;
  const bool forwarded = info->si_code == SI_USER && info->si_pid == g_record_pid;
  UnmatchedDeliveries& seen = g_unmatched[index];
  const int64_t now = monotonic_now_ns();
  if (now - seen.last_ns.load() > kPairWindowNs) seen.direct = seen.forwarded = 0;
  std::atomic<int>& twins = forwarded ? seen.direct : seen.forwarded;
  for (int count = twins.load(); count > 0;) {
    if (twins.compare_exchange_weak(count, count - 1)) return true;
  }
  (forwarded ? seen.forwarded : seen.direct).fetch_add(1);
  seen.last_ns = now;
  return false;
}

int watched_index(int signal_number) {
  for (int i = 0; i < 2; ++i) {
    if (kWatchedSignals[i] == signal_number) return i;
  }
  return -1;
}

SigactionFunction real_sigaction() {
  if (!g_real_sigaction) {
    g_real_sigaction = reinterpret_cast<SigactionFunction>(dlsym(RTLD_NEXT, "sigaction"));
  }
  return g_real_sigaction;
}

bool is_function(const struct sigaction& action) {
  return action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN;
}

// Async-signal-safe: asks the watcher thread for the final flush and waits a bounded time.
void complete_trace_from_signal_handler() {
  int fd = g_wake_fd.load();
  if (fd < 0 || !g_watcher_running.load() || !trace::is_still(fd, g_pipe)) return;
  int expected = kIdle;
  if (g_flush_state.compare_exchange_strong(expected, kRequested)) {
    char byte = 1;
    ssize_t ignored = ::write(fd, &byte, 1);
    (void)ignored;
  }
  struct timespec pause = {0, 1000000};
  for (long waited_ms = 0; g_flush_state.load() != kDone && waited_ms < kFinalFlushWaitMs;
       ++waited_ms) {
    nanosleep(&pause, nullptr);
  }
}

void trampoline(int signal_number, siginfo_t* info, void* context) {
  int saved_errno = errno;
  int index = watched_index(signal_number);
  if (index < 0) return;
  if (is_second_of_a_pair(index, info)) {
    errno = saved_errno;
    return;
  }
  struct sigaction program = g_program_action[index];
  if (program.sa_flags & SA_RESETHAND) {
    g_program_action[index].sa_handler = SIG_DFL;
    g_program_action[index].sa_flags &= ~(SA_RESETHAND | SA_SIGINFO);
  }
  if (is_function(program)) {
    if (program.sa_flags & SA_SIGINFO) {
      program.sa_sigaction(signal_number, info, context);
    } else {
      program.sa_handler(signal_number);
    }
    errno = saved_errno;
    return;
  }
  if (program.sa_handler == SIG_IGN) return;
  // SIG_DFL: complete the trace, then let the default action (termination) happen.
  complete_trace_from_signal_handler();
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  real_sigaction()(signal_number, &default_action, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  raise(signal_number);
  errno = saved_errno;
}

// Installs in the kernel what realises the program's `wanted` disposition for a watched signal.
int install_for(int index, const struct sigaction& wanted) {
  int signal_number = kWatchedSignals[index];
  if (wanted.sa_handler == SIG_IGN) {
    g_trampoline_active[index] = false;
    return real_sigaction()(signal_number, &wanted, nullptr);
  }
  struct sigaction ours = wanted;
  ours.sa_sigaction = &trampoline;
  ours.sa_flags = (wanted.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
  g_trampoline_active[index] = true;
  return real_sigaction()(signal_number, &ours, nullptr);
}

void* watcher_main(void* read_fd_pointer) {
  int read_fd = static_cast<int>(reinterpret_cast<intptr_t>(read_fd_pointer));
  g_watcher_running = true;
  for (;;) {
    char byte;
    ssize_t got = ::read(read_fd, &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {  // the program closed our pipe: signals now end without a final flush
      g_watcher_running = false;
      return nullptr;
    }
    try {
      stop_capture_session();
    } catch (...) {
    }
    g_flush_state = kDone;
  }
}

}  // namespace

void install_signal_trampolines() {
  if (g_trampolines_installed.exchange(true) || !real_sigaction()) return;
  g_table_pid = ::getpid();
  if (const char* record_pid = std::getenv(trace::environment::kRecordPid)) {
    g_record_pid = static_cast<pid_t>(std::atol(record_pid));
  }
  for (int i = 0; i < 2; ++i) {
    struct sigaction current;
    if (real_sigaction()(kWatchedSignals[i], nullptr, &current) != 0) continue;
    g_program_action[i] = current;
    if (current.sa_handler == SIG_IGN) continue;  // e.g. under nohup: stays ignored
    install_for(i, current);
  }
}

void start_signal_watcher() {
  if (g_wake_fd.load() >= 0) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "moescope: no signal watcher (%s); SIGINT/SIGTERM may cut the trace\n",
                 std::strerror(errno));
    return;
  }
  fds[0] = trace::move_to_high_descriptor(fds[0]);
  fds[1] = trace::move_to_high_descriptor(fds[1]);
  trace::identity_of(fds[0], &g_pipe);
  g_flush_state = kIdle;
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);  // the watcher inherits: it never runs handlers
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  int rc = pthread_create(&thread, &attributes, &watcher_main,
                          reinterpret_cast<void*>(static_cast<intptr_t>(fds[0])));
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (rc != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    std::fprintf(stderr, "moescope: no signal watcher thread; SIGINT/SIGTERM may cut the trace\n");
    return;
  }
  pthread_setname_np(thread, "moescope-signal");
  g_watch_fd = fds[0];
  g_wake_fd = fds[1];
  // A starting thread allocates (the sanitizers' thread setup): wait until it runs, so a fork
  // right after the shim started cannot copy an allocator lock it holds. Bounded: 1 s at most.
  struct timespec pause = {0, 50000};
  for (int waited = 0; !g_watcher_running.load() && waited < 20000; ++waited) {
    nanosleep(&pause, nullptr);
  }
}

void forget_signal_watcher_after_fork() {
  g_table_pid = ::getpid();  // a fork child owns its copy of the table
  int fd = g_wake_fd.exchange(-1);
  if (trace::is_still(fd, g_pipe)) ::close(fd);
  if (trace::is_still(g_watch_fd, g_pipe)) ::close(g_watch_fd);
  g_watch_fd = -1;
  g_flush_state = kIdle;
  g_watcher_running = false;
}

}  // namespace moescope::inject

// ---- interposed libc functions -----------------------------------------------------------------

extern "C" {

__attribute__((visibility("default"))) int sigaction(int signal_number,
                                                     const struct sigaction* action,
                                                     struct sigaction* old_action) {
  using namespace moescope::inject;
  SigactionFunction real = real_sigaction();
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int index = watched_index(signal_number);
  if (index < 0 || !g_trampolines_installed.load() || ::getpid() != g_table_pid.load()) {
    return real(signal_number, action, old_action);
  }
  struct sigaction previous = g_program_action[index];
  if (action) {
    int rc = install_for(index, *action);
    if (rc != 0) return rc;
    g_program_action[index] = *action;
  }
  if (old_action) *old_action = previous;
  return 0;
}

__attribute__((visibility("default"))) sighandler_t signal(int signal_number,
                                                           sighandler_t handler) {
  using namespace moescope::inject;
  if (watched_index(signal_number) < 0 || !g_trampolines_installed.load()) {
    using SignalFunction = sighandler_t (*)(int, sighandler_t);
    static auto real_signal = reinterpret_cast<SignalFunction>(dlsym(RTLD_NEXT, "signal"));
    if (!real_signal) return SIG_ERR;
    return real_signal(signal_number, handler);
  }
  struct sigaction action, previous;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;  // glibc's signal() has BSD semantics
  sigemptyset(&action.sa_mask);
  if (sigaction(signal_number, &action, &previous) != 0) return SIG_ERR;
  return previous.sa_handler;
}

}  // extern "C"

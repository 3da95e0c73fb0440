#pragma once
// Stops a server on SIGINT or SIGTERM. The signals are blocked in every thread (block_signals()
// before any thread starts: all others inherit the mask, and this one is created after it) and
// taken by sigwait in this class's thread, so the stop runs in an ordinary thread rather than
// in a signal handler, where most of a server's stop path is not safe to call.
#include <pthread.h>

#include <csignal>
#include <functional>
#include <thread>

namespace orchard::app {

class SignalStopper {
 public:
  explicit SignalStopper(std::function<void()> stop)
      : thread_([stop = std::move(stop)] {
          int signal = 0;
          sigwait(&signals(), &signal);
          stop();
        }) {}
  ~SignalStopper() {
    // Wakes the thread when the server stopped on its own.
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  // In the calling thread and every thread it starts afterwards.
  static void block_signals() { pthread_sigmask(SIG_BLOCK, &signals(), nullptr); }

 private:
  static const sigset_t& signals() {
    static const sigset_t set = [] {
      sigset_t s;
      sigemptyset(&s);
      sigaddset(&s, SIGINT);
      sigaddset(&s, SIGTERM);
      return s;
    }();
    return set;
  }

  std::thread thread_;
};

}  // namespace orchard::app

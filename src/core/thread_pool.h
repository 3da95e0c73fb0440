#pragma once
// A fixed pool of worker threads for data-parallel loops on the compute path. Workers spin
// briefly before sleeping, so the many short parallel loops of a decode step don't pay a
// futex wake-up each. No allocation per call.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orchard::core {

class ThreadPool {
 public:
  // Task body: (task index in [0, n_tasks), thread index in [0, size())).
  using TaskFn = void (*)(void* context, int64_t task, int thread);

  // n_threads counts the calling thread: 1 means no worker threads. 0 means all cores.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(context, task, thread) for every task in [0, n_tasks), tasks taken dynamically,
  // the caller working too. Returns when all are done; rethrows the first exception thrown by
  // any task.
  void run(int64_t n_tasks, TaskFn fn, void* context);

  // Convenience for lambdas; the lambda is called as f(task, thread).
  template <typename F>
  void parallel_for(int64_t n_tasks, F&& f) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
      for (int64_t t = 0; t < n_tasks; ++t) f(t, 0);
      return;
    }
    run(
        n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  void worker_loop(int thread);
  void work_on_current_job(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job; generation_ changes once per run() call.
  TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> active_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace orchard::core

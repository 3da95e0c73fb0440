#pragma once
// A fixed pool of worker threads for data-parallel loops on the compute path. Workers spin
// briefly before sleeping, so the many short parallel loops of a decode step don't pay a
// futex wake-up each. No allocation per call.
#include <algorithm>
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
  // Range body: units [begin, end) on thread `thread`.
  using RangeFn = void (*)(void* context, int64_t begin, int64_t end, int thread);

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

  // Runs fn over [0, n_units), `grain` units per call. Each thread owns a contiguous share of
  // the units and works through it front to back, so a loop over a weight matrix reads memory
  // in one ascending stream per thread; a thread that runs out takes grains from the back of
  // the others' shares. That balances to one grain without interleaving the threads' reads,
  // which a shared task counter does (and which costs the hardware prefetcher its streams).
  void run_shares(int64_t n_units, int64_t grain, RangeFn fn, void* context);

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

  // Convenience for lambdas; the lambda is called as f(begin, end, thread).
  template <typename F>
  void parallel_shares(int64_t n_units, int64_t grain, F&& f) {
    if (n_units <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    if (n_threads_ == 1 || n_units <= grain) {
      for (int64_t begin = 0; begin < n_units; begin += grain) f(begin, std::min(n_units, begin + grain), 0);
      return;
    }
    run_shares(
        n_units, grain,
        [](void* ctx, int64_t begin, int64_t end, int thread) { (*static_cast<F*>(ctx))(begin, end, thread); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

 private:
  // A thread's share of a run_shares job, in grains: the owner advances `front`, others
  // lower `back`; both in one word so taking a grain is one compare-and-swap.
  struct alignas(64) Share {
    std::atomic<uint64_t> bounds{0};  // front << 32 | back
  };

  // Joins the job of `generation` unless the caller has closed it; false: leave it alone.
  bool join(uint64_t generation);
  void worker_loop(int thread);
  void start_and_join();
  void work_on_current_job(int thread);
  void work_on_shares(int thread);
  bool take_front(Share& share, int64_t& grain);
  bool take_back(Share& share, int64_t& grain);
  void run_grain(int64_t grain, int thread);
  void record_error();

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job; generation_ changes once per run() or run_shares() call. A task job has
  // fn_ set, a share job range_fn_.
  TaskFn fn_ = nullptr;
  RangeFn range_fn_ = nullptr;
  void* context_ = nullptr;
  int64_t n_tasks_ = 0;
  int64_t n_units_ = 0;
  int64_t grain_ = 0;
  std::vector<Share> shares_;
  std::atomic<int64_t> next_task_{0};
  // The current job's ticket: its generation's low 32 bits << 32 | kClosed once the caller has
  // taken every task | the number of workers that joined it. A worker works on a job only after
  // joining it, so the caller waits for exactly those.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> finished_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace orchard::core

#include "core/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace orchard::core {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Tens of microseconds of spinning: longer than the gap between the parallel loops of one
// decode step, far shorter than the gap between requests. Past it, waiters yield or sleep, so
// an oversubscribed machine (other processes, several ranks per core) doesn't lose whole time
// slices to a spinning thread while the one it waits for is descheduled.
constexpr int kSpinIterations = 4000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::work_on_current_job(int thread) {
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    try {
      fn_(context_, task, thread);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      next_task_.store(n_tasks_, std::memory_order_relaxed);  // skip what is left
    }
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int spin = 0; current == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      current = generation_.load(std::memory_order_acquire);
    }
    seen = current;
    if (stopping_.load()) return;
    work_on_current_job(thread);
    active_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* context) {
  if (n_tasks <= 0) return;
  fn_ = fn;
  context_ = context;
  n_tasks_ = n_tasks;
  error_ = nullptr;
  next_task_.store(0, std::memory_order_relaxed);
  active_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the mutex pairs with the sleeping workers' predicate check.
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  work_on_current_job(0);
  for (int spin = 0; active_workers_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace orchard::core

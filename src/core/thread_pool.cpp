#include "core/thread_pool.h"

#include <algorithm>
#include <stdexcept>

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
  shares_ = std::vector<Share>(static_cast<size_t>(n_threads_));
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

void ThreadPool::record_error() {
  std::lock_guard lock(error_mutex_);
  if (!error_) error_ = std::current_exception();
}

void ThreadPool::work_on_current_job(int thread) {
  if (range_fn_) {
    work_on_shares(thread);
    return;
  }
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    try {
      fn_(context_, task, thread);
    } catch (...) {
      record_error();
      next_task_.store(n_tasks_, std::memory_order_relaxed);  // skip what is left
    }
  }
}

bool ThreadPool::take_front(Share& share, int64_t& grain) {
  uint64_t bounds = share.bounds.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = bounds >> 32, back = bounds & 0xffffffffu;
    if (front >= back) return false;
    if (share.bounds.compare_exchange_weak(bounds, (front + 1) << 32 | back, std::memory_order_relaxed)) {
      grain = static_cast<int64_t>(front);
      return true;
    }
  }
}

bool ThreadPool::take_back(Share& share, int64_t& grain) {
  uint64_t bounds = share.bounds.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t front = bounds >> 32, back = bounds & 0xffffffffu;
    if (front >= back) return false;
    if (share.bounds.compare_exchange_weak(bounds, front << 32 | (back - 1), std::memory_order_relaxed)) {
      grain = static_cast<int64_t>(back - 1);
      return true;
    }
  }
}

void ThreadPool::run_grain(int64_t grain, int thread) {
  const int64_t begin = grain * grain_;
  try {
    range_fn_(context_, begin, std::min(n_units_, begin + grain_), thread);
  } catch (...) {
    record_error();
    for (Share& share : shares_) share.bounds.store(0, std::memory_order_relaxed);  // skip what is left
  }
}

void ThreadPool::work_on_shares(int thread) {
  int64_t grain = 0;
  while (take_front(shares_[static_cast<size_t>(thread)], grain)) run_grain(grain, thread);
  for (int k = 1; k < n_threads_; ++k) {
    Share& other = shares_[static_cast<size_t>((thread + k) % n_threads_)];
    while (take_back(other, grain)) run_grain(grain, thread);
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
    if (!join(current)) continue;  // the caller finished that job without this thread
    work_on_current_job(thread);
    finished_workers_.fetch_add(1, std::memory_order_acq_rel);
  }
}

bool ThreadPool::join(uint64_t generation) {
  uint64_t ticket = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if ((ticket >> 32) != (generation & 0xffffffffu) || (ticket & kClosed) != 0) return false;
    if (ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel)) return true;
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* context) {
  if (n_tasks <= 0) return;
  fn_ = fn;
  range_fn_ = nullptr;
  context_ = context;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  start_and_join();
}

void ThreadPool::run_shares(int64_t n_units, int64_t grain, RangeFn fn, void* context) {
  if (n_units <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n_grains = (n_units + grain - 1) / grain;
  if (n_grains > int64_t{0xffffffff}) throw std::length_error("ThreadPool::run_shares: more than 2^32 grains");
  fn_ = nullptr;
  range_fn_ = fn;
  context_ = context;
  n_units_ = n_units;
  grain_ = grain;
  for (int t = 0; t < n_threads_; ++t) {
    const auto front = static_cast<uint64_t>(n_grains * t / n_threads_);
    const auto back = static_cast<uint64_t>(n_grains * (t + 1) / n_threads_);
    shares_[static_cast<size_t>(t)].bounds.store(front << 32 | back, std::memory_order_relaxed);
  }
  start_and_join();
}

void ThreadPool::start_and_join() {
  error_ = nullptr;
  finished_workers_.store(0, std::memory_order_relaxed);
  {
    // Publishing under the mutex pairs with the sleeping workers' predicate check; the release
    // makes the job's fields visible to the workers that see the new generation.
    std::lock_guard lock(mutex_);
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    ticket_.store((generation & 0xffffffffu) << 32, std::memory_order_relaxed);
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current_job(0);
  // Every task is taken. Workers that have not joined yet (still waking up, or descheduled on
  // a busy machine) are shut out rather than waited for: a decode step runs about a hundred
  // jobs, and on a loaded host each one waited for the slowest thread to be scheduled even when
  // the caller had done the whole job itself. Those that joined may still be running tasks.
  const auto joined = static_cast<int>(ticket_.fetch_or(kClosed, std::memory_order_acq_rel) & (kClosed - 1));
  for (int spin = 0; finished_workers_.load(std::memory_order_acquire) != joined; ++spin) {
    if (spin < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace orchard::core

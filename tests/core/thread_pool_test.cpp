#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace orchard::core {
namespace {

class PoolSizes : public ::testing::TestWithParam<int> {};

TEST_P(PoolSizes, EveryTaskRunsExactlyOnce) {
  ThreadPool pool(GetParam());
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> bad_thread{0};
    pool.parallel_for(n, [&](int64_t task, int thread) {
      hits[static_cast<size_t>(task)].fetch_add(1);
      if (thread < 0 || thread >= pool.size()) bad_thread.fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n=" << n;
    EXPECT_EQ(bad_thread.load(), 0);
  }
}

TEST_P(PoolSizes, ExceptionsReachTheCaller) {
  ThreadPool pool(GetParam());
  EXPECT_THROW(pool.parallel_for(100, [](int64_t task, int) {
    if (task == 37) throw std::runtime_error("task 37");
  }),
               std::runtime_error);
  // The pool stays usable after a failed job.
  std::atomic<int> count{0};
  pool.parallel_for(50, [&](int64_t, int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 50);
}

TEST_P(PoolSizes, ManyShortJobsInARow) {
  ThreadPool pool(GetParam());
  int64_t total = 0;
  std::vector<int64_t> partial(static_cast<size_t>(pool.size()));
  for (int job = 0; job < 300; ++job) {
    std::fill(partial.begin(), partial.end(), 0);
    pool.parallel_for(5, [&](int64_t task, int thread) { partial[static_cast<size_t>(thread)] += task; });
    for (int64_t p : partial) total += p;
  }
  EXPECT_EQ(total, 300 * 10);
}

INSTANTIATE_TEST_SUITE_P(Threads, PoolSizes, ::testing::Values(1, 2, 3, 8));

TEST(ThreadPool, ZeroMeansAllCores) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
}

}  // namespace
}  // namespace orchard::core

#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
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

TEST_P(PoolSizes, SharesCoverEveryUnitOnceInGrains) {
  ThreadPool pool(GetParam());
  for (int64_t grain : {1, 3, 16}) {
    for (int64_t n : {0, 1, 2, 5, 17, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_range{0};
      pool.parallel_shares(n, grain, [&](int64_t begin, int64_t end, int thread) {
        // A call covers one grain: it starts on a grain boundary and stops at the next one or at n.
        if (begin % grain != 0 || end != std::min(n, begin + grain) || thread < 0 || thread >= pool.size())
          bad_range.fetch_add(1);
        for (int64_t u = begin; u < end; ++u) hits[static_cast<size_t>(u)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n=" << n << " grain=" << grain;
      EXPECT_EQ(bad_range.load(), 0) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST_P(PoolSizes, AThreadWorksThroughItsShareInOrder) {
  // Each thread's own grains come front to back, so its reads of a matrix form one ascending
  // stream; grains it took from other shares come after all of its own.
  ThreadPool pool(GetParam());
  const int64_t n = 400;
  std::vector<std::vector<int64_t>> seen(static_cast<size_t>(pool.size()));
  pool.parallel_shares(n, 1, [&](int64_t begin, int64_t, int thread) { seen[static_cast<size_t>(thread)].push_back(begin); });
  for (int t = 0; t < pool.size(); ++t) {
    const int64_t own_begin = n * t / pool.size(), own_end = n * (t + 1) / pool.size();
    const auto& order = seen[static_cast<size_t>(t)];
    size_t i = 0;
    for (int64_t expected = own_begin; i < order.size() && order[i] >= own_begin && order[i] < own_end; ++i, ++expected)
      ASSERT_EQ(order[i], expected) << "thread " << t;
    for (; i < order.size(); ++i) EXPECT_TRUE(order[i] < own_begin || order[i] >= own_end) << "thread " << t;
  }
}

TEST_P(PoolSizes, AStalledThreadsShareIsTakenByTheOthers) {
  // Thread 0 (the caller) blocks on its first grain until every other unit is done, which only
  // happens if the workers take the rest of its share from the back.
  ThreadPool pool(GetParam());
  if (pool.size() == 1) GTEST_SKIP() << "one thread has no one to take its share";
  const int64_t n = 64;
  std::atomic<int64_t> done{0};
  pool.parallel_shares(n, 1, [&](int64_t begin, int64_t end, int thread) {
    if (thread == 0 && begin == 0)
      while (done.load() < n - 1) std::this_thread::yield();
    done.fetch_add(end - begin);
  });
  EXPECT_EQ(done.load(), n);
}

TEST_P(PoolSizes, ExceptionsInSharesReachTheCaller) {
  ThreadPool pool(GetParam());
  EXPECT_THROW(pool.parallel_shares(100, 2, [](int64_t begin, int64_t, int) {
    if (begin == 36) throw std::runtime_error("grain 18");
  }),
               std::runtime_error);
  std::atomic<int64_t> count{0};
  pool.parallel_shares(50, 4, [&](int64_t begin, int64_t end, int) { count.fetch_add(end - begin); });
  EXPECT_EQ(count.load(), 50);
}

TEST_P(PoolSizes, ShortJobsInARowEachRunOnceWhoeverJoins) {
  // The caller closes a job once every task is taken, and a worker that wakes up later leaves it
  // alone; with more threads than cores that happens often. Each job's units are still covered
  // once, by the caller alone or with whichever workers joined in time, and no worker carries a
  // job's function into the next one.
  ThreadPool pool(GetParam());
  std::vector<std::atomic<int>> hits(7);
  for (int job = 0; job < 3000; ++job) {
    for (auto& h : hits) h.store(0);
    const int64_t n = 1 + job % 7;
    if (job % 2)
      pool.parallel_for(n, [&](int64_t task, int) { hits[static_cast<size_t>(task)].fetch_add(1 + job % 3); });
    else
      pool.parallel_shares(n, 1, [&](int64_t begin, int64_t, int) { hits[static_cast<size_t>(begin)].fetch_add(1 + job % 3); });
    for (int64_t i = 0; i < 7; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), i < n ? 1 + job % 3 : 0) << "job " << job << " unit " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, PoolSizes, ::testing::Values(1, 2, 3, 8));

TEST(ThreadPool, ZeroMeansAllCores) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
}

}  // namespace
}  // namespace orchard::core

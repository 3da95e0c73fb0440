// LineAlignedVector: every allocation, small (from the heap's bins) or large (malloc's own
// mappings, which start 16 bytes into a page), starts on a cache line, and stays so as the
// vector grows or is copied.
#include <gtest/gtest.h>

#include <cstdint>

#include "core/line_aligned.h"

namespace orchard::core {
namespace {

bool on_a_line(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kCacheLineBytes == 0; }

TEST(LineAligned, EverySizeStartsOnALine) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}, size_t{1} << 15, size_t{1} << 20, size_t{3} << 20}) {
    LineAlignedVector<float> v(n, 1.0f);
    EXPECT_TRUE(on_a_line(v.data())) << n << " floats at " << v.data();
    LineAlignedVector<int32_t> w(n);
    EXPECT_TRUE(on_a_line(w.data())) << n << " int32s at " << w.data();
  }
}

TEST(LineAligned, GrowingAndCopyingKeepTheLineAndTheValues) {
  LineAlignedVector<float> v;
  for (int i = 0; i < 100000; ++i) {
    v.push_back(static_cast<float>(i));
    if ((i & (i + 1)) == 0) ASSERT_TRUE(on_a_line(v.data())) << "after " << i + 1 << " elements";
  }
  v.resize(size_t{1} << 21);
  EXPECT_TRUE(on_a_line(v.data()));
  const LineAlignedVector<float> copy = v;
  EXPECT_TRUE(on_a_line(copy.data()));
  for (int i = 0; i < 100000; i += 997) EXPECT_EQ(copy[static_cast<size_t>(i)], static_cast<float>(i));
}

}  // namespace
}  // namespace orchard::core

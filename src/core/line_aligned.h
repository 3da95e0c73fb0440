#pragma once
// Vectors whose elements start on a cache line. Threads that write neighbouring parts of one
// buffer at once (a decode step's KV heads' attention outputs, 2 KiB apart in one row) then
// never write the same line: a large std::vector starts 16 bytes into malloc's mapping, and the
// line at each such boundary moved between the cores on every 64-key chunk of a decode step's
// attention (8% of its time at depth 16384 on two threads).
#include <cstddef>
#include <new>
#include <vector>

namespace orchard::core {

inline constexpr std::size_t kCacheLineBytes = 64;

template <class T>
struct LineAlignedAllocator {
  using value_type = T;
  LineAlignedAllocator() = default;
  template <class U>
  constexpr LineAlignedAllocator(const LineAlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t n) noexcept { ::operator delete(p, n * sizeof(T), std::align_val_t{kCacheLineBytes}); }
  template <class U>
  bool operator==(const LineAlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using LineAlignedVector = std::vector<T, LineAlignedAllocator<T>>;

}  // namespace orchard::core

// The ports tests give the servers and ranks they start: free, and out of the ephemeral range.
#include "free_ports.h"

#include <gtest/gtest.h>

namespace orchard::testing {
namespace {

// A socket listening on `port` on every address, closed at the end of the scope.
struct Listener {
  explicit Listener(int port) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    listening = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0;
  }
  ~Listener() { ::close(fd); }
  int fd;
  bool listening = false;
};

TEST(FreePorts, LieBelowTheEphemeralRangeAndOrchardsDefaultsAndCanBeBound) {
  const int first = free_ports(3);
  ASSERT_GE(first, 20000);
  EXPECT_LE(first + 3, ephemeral_port_floor());  // the last one, first + 2, below the floor
  EXPECT_LE(first + 3, 32300) << "orchard's ranks listen from 32323 by default";
  for (int p = first; p < first + 3; ++p) {
    const Listener l(p);
    EXPECT_TRUE(l.listening) << p;
  }
}

TEST(FreePorts, SkipAPortInUse) {
  const int taken = free_ports();
  const Listener l(taken);
  ASSERT_TRUE(l.listening);
  EXPECT_FALSE(port_is_free(taken));
  // Calls start at different places; none may hand out the taken port.
  for (int call = 0; call < 64; ++call) {
    const int first = free_ports(2);
    EXPECT_TRUE(first > taken || first + 1 < taken) << first << " covers " << taken;
  }
}

}  // namespace
}  // namespace orchard::testing

#include "serve/stop_matcher.h"

#include <gtest/gtest.h>

namespace orchard::serve {
namespace {

TEST(StopMatcher, WithoutStopsPassesTextThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello"), "hello");
  EXPECT_EQ(m.push(" world"), " world");
  EXPECT_EQ(m.finish(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, HoldsBackAPossibleStartAndReleasesItWhenItIsNot) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, StopsAcrossPiecesAndDropsTheRest) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("one E"), "one ");
  EXPECT_EQ(m.push("NDtwo"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, FinishReturnsTheHeldBackText) {
  StopMatcher m({"\n\n", ""});
  EXPECT_EQ(m.push("line\n"), "line");
  EXPECT_EQ(m.finish(), "\n");
}

TEST(StopMatcher, KeepsTheLongestPossibleStart) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("xaa"), "x");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": only the last "aa" can still start "aab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultiByteCharactersStayWhole) {
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(m.push("!"), "\xC3\xA9!");
}

}  // namespace
}  // namespace orchard::serve

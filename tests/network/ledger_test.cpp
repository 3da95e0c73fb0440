#include <gtest/gtest.h>

#include "core/error.h"
#include "network/ledger.h"

namespace orchard::network::ledger {
namespace {

TEST(Ledger, UltraDedicatedEarnsTheMost) {
  double top = seat_multiplier(Seat::Dedicated, Tier::Ultra);
  for (Seat s : {Seat::Shared, Seat::Dedicated})
    for (Tier t : {Tier::Base, Tier::Pro, Tier::Max, Tier::Ultra}) {
      if (!(s == Seat::Dedicated && t == Tier::Ultra)) {
        EXPECT_GT(top, seat_multiplier(s, t));
      }
    }
  EXPECT_EQ(seat_multiplier(Seat::Shared, Tier::Ultra), 1.0);
}

TEST(Ledger, CreditsScaleWithTokensModelAndSeat) {
  // 1000 tokens of a 1 GB model on a shared seat: one credit.
  EXPECT_EQ(job_credits(1000, 1'000'000'000, Seat::Shared, Tier::Base), 1'000'000);
  EXPECT_EQ(job_credits(2000, 4'000'000'000, Seat::Shared, Tier::Base), 8'000'000);
  EXPECT_EQ(job_credits(1000, 1'000'000'000, Seat::Dedicated, Tier::Ultra), 2'000'000);
  EXPECT_GT(job_credits(10, 1000, Seat::Shared, Tier::Base), 0);  // tiny models still earn
}

TEST(Ledger, BookPostsEachTxnOnceAndBalances) {
  Book book;
  EXPECT_TRUE(book.post(settle_job("j1", "k", "n", 500, true)));
  EXPECT_FALSE(book.post(settle_job("j1", "k", "n", 500, true)));
  EXPECT_EQ(book.balance(kEscrow), 500);
  EXPECT_TRUE(book.post(release_escrow("j1", "n", 500)));
  EXPECT_EQ(book.balance(node_account("n")), 500);
  EXPECT_EQ(book.balance(key_account("k")), -500);
  EXPECT_EQ(book.sum(), 0);
  Txn bad = settle_job("j2", "k", "n", 5, false);
  bad.entries[1].amount = 6;
  EXPECT_THROW(book.post(bad), InvariantError);
}

}  // namespace
}  // namespace orchard::network::ledger

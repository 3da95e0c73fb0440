// `orchard network` as a user runs it: a second coordinator on one SQLite database is refused
// with a message that says what to use instead, and the first keeps running.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <string>
#include <thread>

#include "cli_process.h"

namespace orchard {
namespace {

using namespace std::chrono_literals;

TEST(NetworkCli, ASecondCoordinatorOnOneSqliteDatabaseIsRefused) {
  const std::string dir = ::testing::TempDir() + "/network-cli-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string db = "sqlite://" + dir + "/network.db", err = dir + "/first.err", out = dir + "/first.out";
  const pid_t first = testing::start({ORCHARD_BINARY, "network", "--db", db, "--host", "127.0.0.1", "--port", "0"}, err, out);
  for (int i = 0; i < 500 && testing::read_text(err).find("listening") == std::string::npos; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_NE(testing::read_text(err).find("listening"), std::string::npos) << testing::read_text(err);

  testing::Ran second = testing::run_to_end({ORCHARD_BINARY, "network", "--db", db, "--host", "127.0.0.1", "--port", "0"});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("another coordinator already runs on this SQLite database"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("PostgreSQL"), std::string::npos) << second.err;
  // Keys and audits are no coordinator: they still open the database.
  testing::Ran key = testing::run_to_end({ORCHARD_BINARY, "network", "add-key", "--db", db, "--name", "alice"});
  EXPECT_EQ(key.exit_code, 0) << key.err;
  EXPECT_TRUE(key.out.starts_with("ok-")) << key.out;

  kill(first, SIGTERM);
  EXPECT_EQ(testing::wait_for(first, err, 30s).exit_code, 0) << testing::read_text(err);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace orchard

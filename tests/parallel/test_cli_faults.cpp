// The CLI as a user runs it: `orchard run --world N` ends with an error naming a rank that
// died, within the comm timeout, leaving no process behind; `orchard launch` starts ranks
// through an ssh stand-in and gives the same tokens as one process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_process.h"
#include "free_ports.h"
#include "model/model_files.h"

namespace orchard {
namespace {

using namespace std::chrono_literals;

// Children of `parent`, read from /proc (Linux only: the test skips elsewhere).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent && state != 'Z') out.push_back(std::stoi(name));
  }
  return out;
}

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

using testing::Finished;
using testing::start;
using testing::wait_for;

// Runs argv to the end and parses what it printed as JSON (a discarded value when it isn't).
nlohmann::json run_json(const std::vector<std::string>& argv) {
  testing::Ran r = testing::run_to_end(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

class RankKilled : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(RankKilled, CallerNamesTheRankAndNothingIsLeft) {
  if (!std::filesystem::exists("/proc/self/stat")) GTEST_SKIP() << "needs /proc to find the ranks";
  const auto& [strategy, backend] = GetParam();
  // Expert parallelism needs experts: the rank is killed during the exchanges of its MoE layers.
  const std::string model = strategy == "expert" ? testing::synthetic_model("qwen3moe", "tiny", "q8_0")
                                                 : testing::synthetic_model("llama", "small", "q8_0");
  const std::string dir = ::testing::TempDir();
  // Per process: ctest runs the strategies' instances at the same time.
  const std::string tag = strategy + "-" + std::to_string(getpid());
  const std::string err = dir + "/fault-err-" + tag + ".txt", out = dir + "/fault-out-" + tag + ".txt";
  pid_t launcher = start({ORCHARD_BINARY, "run", "-m", model, "-p", "Once upon a time", "-n", "100000", "--ctx",
                          "2048", "--world", "2", "--strategy", strategy, "--backend", backend, "--threads", "1",
                          "--comm-timeout", "2"},
                         err, out);
  // Wait until both ranks run and have generated something.
  std::vector<pid_t> ranks;
  for (int i = 0; i < 500 && ranks.size() < 2; ++i) {
    std::this_thread::sleep_for(20ms);
    ranks = children_of(launcher);
  }
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start";
  for (int i = 0; i < 500 && std::filesystem::file_size(out) == 0; ++i) std::this_thread::sleep_for(20ms);
  std::sort(ranks.begin(), ranks.end());  // forked in rank order
  kill(ranks[1], SIGKILL);

  Finished f = wait_for(launcher, err, 30s);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.stderr_text.find("rank 1"), std::string::npos) << f.stderr_text;
  EXPECT_LT(f.seconds, 2 + 5 + 3) << "timeout 2 s, launcher grace 5 s, slack";
  for (pid_t r : ranks) EXPECT_FALSE(alive(r)) << "rank process " << r << " left behind";
}

INSTANTIATE_TEST_SUITE_P(Strategies, RankKilled,
                         ::testing::Values(std::make_pair("pipeline", "shm"), std::make_pair("tensor", "ring"),
                                           std::make_pair("expert", "ring")),
                         [](const auto& info) { return info.param.first + "_" + info.param.second; });

// `orchard launch --hostfile` over an ssh stand-in that runs the remote command here.
TEST(Launch, HostfileRanksMatchOneProcess) {
  const std::string model = testing::synthetic_model("qwen2", "tiny", "q4_0");
  const std::string dir = ::testing::TempDir();
  const std::string fake_ssh = dir + "/fake-ssh.sh", hostfile = dir + "/hosts.json";
  {
    std::ofstream s(fake_ssh);
    // ssh -o BatchMode=yes HOST COMMAND: run COMMAND in a local shell.
    s << "#!/bin/sh\nshift 3\nexec sh -c \"$1\"\n";
  }
  std::filesystem::permissions(fake_ssh, std::filesystem::perms::owner_all);
  {
    std::ofstream h(hostfile);
    h << R"([{"ssh": "mac-1", "ips": ["127.0.0.1"]}, {"ssh": "mac-2", "ips": ["127.0.0.1"]}])";
  }
  const std::vector<std::string> run = {ORCHARD_BINARY, "run", "-m", model, "-p", "Hello", "-n", "24", "--json"};
  auto single = run_json(run);
  std::vector<std::string> launched = {ORCHARD_BINARY, "launch", "--hostfile", hostfile, "--ssh", fake_ssh,
                                       "--port", std::to_string(testing::free_ports(2)), "--"};
  launched.insert(launched.end(), run.begin(), run.end());
  launched.insert(launched.end(), {"--strategy", "pipeline"});
  auto split = run_json(launched);
  ASSERT_TRUE(single.contains("tokens") && split.contains("tokens"));
  EXPECT_EQ(split["tokens"], single["tokens"]);
}

TEST(Launch, LocalRanksMatchOneProcess) {
  const std::string model = testing::synthetic_model("qwen3", "tiny", "q8_0");
  const std::vector<std::string> run = {ORCHARD_BINARY, "run", "-m", model, "-p", "Hello", "-n", "24", "--json"};
  auto single = run_json(run);
  std::vector<std::string> launched = {ORCHARD_BINARY, "launch", "-n", "2", "--"};
  launched.insert(launched.end(), run.begin(), run.end());
  launched.insert(launched.end(), {"--strategy", "pipeline"});
  auto split = run_json(launched);
  ASSERT_TRUE(single.contains("tokens") && split.contains("tokens"));
  EXPECT_EQ(split["tokens"], single["tokens"]);
}

// --expert-stats: a run adds its routing counts to the file (a second run doubles them), and
// an expert split placed by those counts still gives one process's tokens.
TEST(ExpertStats, RunRecordsAndAnExpertSplitPlacesByThem) {
  const std::string model = testing::synthetic_model("qwen3moe", "tiny", "f32");
  const std::string stats = ::testing::TempDir() + "/expert-stats-cli-" + std::to_string(getpid()) + ".json";
  std::filesystem::remove(stats);
  const std::vector<std::string> run = {ORCHARD_BINARY, "run", "-m", model, "-p", "Hello there", "-n", "16", "--json",
                                        "--threads", "1", "--expert-stats", stats};
  auto single = run_json(run);
  ASSERT_TRUE(single.contains("tokens"));
  auto read = [&] {
    std::ifstream in(stats);
    return nlohmann::json::parse(in, nullptr, false);
  };
  const auto first = read();
  ASSERT_TRUE(first.contains("counts")) << "no statistics written";
  // Every position of the prompt and of the generation routes once per layer, 2 choices each;
  // the last generated token is not run through the model.
  const double positions = single["prompt_tokens"].get<double>() + single["gen_tokens"].get<double>() - 1;
  EXPECT_EQ(first["tokens"].get<double>(), positions);
  ASSERT_EQ(first["counts"].size(), 4u);
  for (const auto& layer : first["counts"]) {
    double sum = 0;
    for (const auto& c : layer) sum += c.get<double>();
    EXPECT_EQ(sum, 2 * positions);
  }
  std::vector<std::string> split = run;
  split.insert(split.end(), {"--world", "2", "--strategy", "expert", "--backend", "ring"});
  auto expert = run_json(split);
  EXPECT_EQ(expert["tokens"], single["tokens"]);
  const auto second = read();
  for (size_t l = 0; l < 4; ++l)
    for (size_t e = 0; e < 8; ++e) EXPECT_EQ(second["counts"][l][e], 2 * first["counts"][l][e].get<double>());
  std::filesystem::remove(stats);
}

}  // namespace
}  // namespace orchard

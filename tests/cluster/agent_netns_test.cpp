// A cluster without ssh: three network namespaces on one bridge (a switch), each machine with
// an `orchard agent` and no ssh server anywhere (an `ssh` that only notes it was called comes
// first on PATH). The model is on A only: B and C mount an empty folder over its directory, as
// a Mac without the file would be. `run --discover` asks the agents to start the ranks; ranks
// without the file receive their shards and keep them in their agent's cache. `chat --discover`
// keeps rank 0 in the terminal's process on A and asks the agents for the rest. Needs root.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cluster/netns_harness.h"

namespace orchard::cluster {
namespace {

class NetnsAgents : public Namespaces {
 protected:
  void SetUp() override {
    Namespaces::SetUp();
    if (IsSkipped()) return;
    for (const char* n : {"a", "b", "c", "sw"}) make_namespace(n);
    ASSERT_EQ(sh("ip -n " + ns("sw") + " link add " + tag_ + "br type bridge"), 0);
    ASSERT_EQ(sh("ip -n " + ns("sw") + " link set " + tag_ + "br up"), 0);
    plug("a", 1);
    plug("b", 2);
    plug("c", 3);
    dir_ = std::filesystem::temp_directory_path() / ("orchard-agents-" + tag_);
    std::filesystem::create_directories(dir_ / "models");
    std::filesystem::create_directories(dir_ / "bin");
    model_ = (dir_ / "models" / "tiny.gguf").string();
    ASSERT_EQ(sh(orchard_binary() + " make-model --arch llama --shape tiny --type q8_0 -o " + model_), 0);
    std::ofstream(dir_ / "bin" / "ssh") << "#!/bin/sh\necho \"$*\" >> " << (dir_ / "ssh.log").string() << "\nexit 255\n";
    std::filesystem::permissions(dir_ / "bin" / "ssh", std::filesystem::perms::owner_all);
  }

  void TearDown() override {
    Namespaces::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Machine x on the switch at 10.77.9.i.
  void plug(const std::string& x, int i) {
    const std::string vx = tag_ + x + "9", vs = tag_ + x + "s";
    ASSERT_EQ(sh("ip link add " + vx + " netns " + ns(x) + " type veth peer name " + vs + " netns " + ns("sw")), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " addr add 10.77.9." + std::to_string(i) + "/24 brd + dev " + vx), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " link set " + vx + " up"), 0);
    ASSERT_EQ(sh("ip -n " + ns("sw") + " link set " + vs + " master " + tag_ + "br"), 0);
    ASSERT_EQ(sh("ip -n " + ns("sw") + " link set " + vs + " up"), 0);
  }

  // The agent of machine x; B and C do not see the model's folder (an empty tmpfs over it, in
  // the mount namespace `ip netns exec` gives them). Returns its index in agents_.
  size_t start_machine(const std::string& x) {
    const std::string hide = x == "a" ? "" : "mount -t tmpfs tmpfs " + (dir_ / "models").string() + " && ";
    const std::string command = hide + "exec " + orchard_binary() + " agent --cluster gamma --secret s3 --no-measure " +
                                "--probe-every 3600 --probe-mb 8 --cache-dir " + (dir_ / ("cache-" + x)).string() +
                                " 2>>" + (dir_ / ("agent-" + x + ".log")).string();
    std::vector<std::string> args = {"ip", "netns", "exec", ns(x), "sh", "-c", command};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ), 0);
    agents_.push_back(pid);
    return agents_.size() - 1;
  }

  // Until A's agent knows `count` machines.
  void wait_for_machines(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * testing::timeout_factor());
    for (;;) {
      const nlohmann::json t = cluster_json("a", "gamma", "s3", 1);
      if (t.is_object() && t["machines"].size() == count) return;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "A's agent does not list " << count << " machines: " << t.dump(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  }

  // `orchard ARGS` typed on A, with the ssh that fails first on PATH; stderr into `log`.
  std::string on_a(const std::string& args, const std::string& log) const {
    return "ip netns exec " + ns("a") + " env PATH=" + (dir_ / "bin").string() + ":$PATH ORCHARD_CACHE_DIR=" +
           (dir_ / "cache-a").string() + " " + orchard_binary() + " " + args + " 2>" + (dir_ / log).string();
  }

  std::string text_of(const std::string& name) const {
    std::ifstream in(dir_ / name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  nlohmann::json run_on_a(const std::string& placement, const std::string& log) const {
    return nlohmann::json::parse(capture(on_a("run -m " + model_ + " -p '" + kPrompt + "' -n 16 --temp 0 --json --strategy pipeline " +
                                              placement, log)),
                                 nullptr, false);
  }

  nlohmann::json alone() const {
    return nlohmann::json::parse(capture(orchard_binary() + " run -m " + model_ + " -p '" + kPrompt + "' -n 16 --temp 0 --json 2>/dev/null"),
                                 nullptr, false);
  }

  // `orchard chat ARGS` on A as testing::start runs it: the shell and `ip netns exec` exec, so the
  // process it starts is the chat (a SIGINT sent to it is a Ctrl-C in its terminal).
  std::vector<std::string> chat_on_a(const std::string& args) const {
    return {"/bin/sh", "-c", "exec ip netns exec " + ns("a") + " env PATH=" + (dir_ / "bin").string() + ":$PATH ORCHARD_CACHE_DIR=" +
                                 (dir_ / "cache-a").string() + " " + orchard_binary() + " chat -m " + model_ + " " + kChat + " " + args};
  }

  // No rank of the model's runs is left, on any machine (one process table for all).
  std::string ranks_left() const { return capture("pgrep -af '[-]m " + model_ + "'"); }

  static constexpr const char* kPrompt = "the orchard on the hill";
  // Greedy, with a template whose rendering the cli tests write out by hand.
  static constexpr const char* kChat = "--temp 0 -t 1 --verbose --chat-template chatml";
  std::filesystem::path dir_;
  std::string model_;
};

TEST_F(NetnsAgents, DiscoveredRunsStartThroughAgentsAndReuseCachedShards) {
  const nlohmann::json reference = alone();
  ASSERT_TRUE(reference.is_object());
  start_machine("a");
  start_machine("b");
  wait_for_machines(2);
  const std::string discover = "--discover --cluster gamma --secret s3";

  const nlohmann::json first = run_on_a(discover, "first.err");
  const std::string first_err = text_of("first.err");
  ASSERT_TRUE(first.is_object()) << first_err;
  EXPECT_EQ(first["tokens"], reference["tokens"]) << first_err;
  EXPECT_NE(first_err.find("starting 2 rank(s), pipeline: 10.77.9.1, 10.77.9.2"), std::string::npos) << first_err;
  EXPECT_NE(first_err.find("[weights] rank 1: received "), std::string::npos) << first_err;

  // C's agent joins: the next run uses it.
  start_machine("c");
  wait_for_machines(3);
  // The cluster at a glance, from any machine's agent port.
  const nlohmann::json status = nlohmann::json::parse(
      capture("ip netns exec " + ns("b") + " curl -s -m 10 'http://10.77.9.1:52417/cluster?model=tinyllama-1.1b:q4_0'"), nullptr,
      false);
  ASSERT_TRUE(status.is_object()) << "no JSON from /cluster";
  EXPECT_EQ(status["machines"].size(), 3u) << status.dump(1);
  // These agents skipped measuring themselves (--no-measure) and their CPU is no catalog chip:
  // the plan says so instead of guessing (cluster_status_test plans over measured machines).
  EXPECT_NE(status["plan"].value("error", "").find("measured no bandwidth"), std::string::npos) << status.dump(1);
  const nlohmann::json second = run_on_a(discover, "second.err");
  const std::string second_err = text_of("second.err");
  ASSERT_TRUE(second.is_object()) << second_err;
  EXPECT_EQ(second["tokens"], reference["tokens"]) << second_err;
  EXPECT_NE(second_err.find("starting 3 rank(s), pipeline: 10.77.9.1, "), std::string::npos) << second_err;
  EXPECT_NE(second_err.find("10.77.9.3"), std::string::npos) << second_err;

  // The same split again: both ranks find their shards in their machines' caches.
  const nlohmann::json third = run_on_a(discover, "third.err");
  const std::string third_err = text_of("third.err");
  ASSERT_TRUE(third.is_object()) << third_err;
  EXPECT_EQ(third["tokens"], reference["tokens"]) << third_err;
  for (const char* rank : {"rank 1", "rank 2"})
    EXPECT_NE(third_err.find(std::string("[weights] ") + rank + ": its shard of tiny.gguf"), std::string::npos) << third_err;
  EXPECT_EQ(third_err.find("received "), std::string::npos) << third_err;
  EXPECT_EQ(std::filesystem::exists(dir_ / "ssh.log"), false) << "ssh was called: " << text_of("ssh.log");
  EXPECT_EQ(ranks_left(), "");
}

TEST_F(NetnsAgents, HostfileEntriesSayWhichMachinesTheirAgentsStart) {
  const nlohmann::json reference = alone();
  start_machine("a");
  start_machine("b");
  wait_for_machines(2);
  const std::string hostfile = (dir_ / "hosts.json").string();
  std::ofstream(hostfile) << R"([{"ssh": "10.77.9.1", "ips": ["10.77.9.1"], "agent": true},
                                 {"ssh": "10.77.9.2", "ips": ["10.77.9.2"], "agent": true}])";
  const nlohmann::json run = run_on_a("--hostfile " + hostfile + " --cluster gamma --secret s3", "hostfile.err");
  ASSERT_TRUE(run.is_object()) << text_of("hostfile.err");
  EXPECT_EQ(run["tokens"], reference["tokens"]) << text_of("hostfile.err");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ssh.log")) << text_of("ssh.log");

  // `orchard launch` (as a network pod's agent runs it) asks the same agents, ssh nowhere.
  const nlohmann::json launched = nlohmann::json::parse(
      capture(on_a("launch --hostfile " + hostfile + " --cluster gamma --secret s3 -- orchard run -m " + model_ + " -p '" +
                       kPrompt + "' -n 16 --temp 0 --json --strategy pipeline",
                   "launch.err")),
      nullptr, false);
  ASSERT_TRUE(launched.is_object()) << text_of("launch.err");
  EXPECT_EQ(launched["tokens"], reference["tokens"]) << text_of("launch.err");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ssh.log")) << text_of("ssh.log");

  // Without the cluster's secret the agents start nothing, and the job says why.
  const std::string out = capture(on_a("run -m " + model_ + " -p hi -n 4 --strategy pipeline --hostfile " + hostfile +
                                       " --cluster gamma --secret wrong", "refused.err") + "; echo \"exit $?\"");
  const std::string err = text_of("refused.err");
  EXPECT_NE(out.find("exit 1"), std::string::npos) << out << err;
  EXPECT_NE(err.find("10.77.9.1:52417 refused the request: it belongs to another cluster or has another secret"), std::string::npos)
      << err;
  EXPECT_EQ(ranks_left(), "");
}

TEST_F(NetnsAgents, AnAgentKilledMidRunEndsTheJobNamingItsMachine) {
  start_machine("a");
  const size_t b = start_machine("b");
  wait_for_machines(2);
  const std::string out = (dir_ / "serve.out").string();
  const std::string command = "exec " + on_a("serve -m " + model_ + " --port 0 --parallel 1 --strategy pipeline --discover "
                                             "--cluster gamma --secret s3", "serve.err") + " >" + out;
  std::vector<std::string> args = {"sh", "-c", command};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t server = 0;
  ASSERT_EQ(posix_spawnp(&server, "sh", nullptr, nullptr, argv.data(), environ), 0);
  bool listening = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60 * testing::timeout_factor());
  while (!listening && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(out);
    std::string line;
    listening = std::getline(in, line) && line.rfind("listening on ", 0) == 0;
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!listening) kill(server, SIGTERM);
  ASSERT_TRUE(listening) << text_of("serve.err");
  EXPECT_NE(ranks_left(), "");
  kill(agents_[b], SIGKILL);  // B's agent dies without a word: its rank must not outlive it
  int status = 0;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * testing::timeout_factor());
  pid_t done = 0;
  while ((done = waitpid(server, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (done == 0) {
    kill(server, SIGKILL);
    waitpid(server, &status, 0);
  }
  const std::string err = text_of("serve.err");
  ASSERT_NE(done, 0) << "the job went on without B:\n" << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << err;
  EXPECT_NE(err.find("rank 1 (10.77.9.2, by its agent) lost: the agent on 10.77.9.2 went away"), std::string::npos) << err;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10 * testing::timeout_factor());
  while (ranks_left() != "" && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ranks_left(), "");
}

// `chat --discover`: rank 0 in this terminal's process on A, rank 1 started by B's agent (no
// ssh anywhere). Two turns through a pipe give one process's replies and prompt sizes; Ctrl-C
// stops a reply, not the chat; end of input ends every rank.
TEST_F(NetnsAgents, DiscoveredChatTalksAsOneProcessAndCtrlCStopsAReply) {
  const std::string turns = "hi\nhow so?\n/exit\n";
  const testing::Ran alone = testing::run_to_end(
      {orchard_binary(), "chat", "-m", model_, "-n", "6", "--temp", "0", "-t", "1", "--verbose", "--chat-template", "chatml"},
      std::chrono::seconds(60), turns);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_NE(alone.out.find_first_not_of('\n'), std::string::npos) << "replies with no text compare nothing";
  ASSERT_GT(testing::prompt_tokens_of_turn(alone.err, 2), testing::prompt_tokens_of_turn(alone.err, 1)) << alone.err;
  start_machine("a");
  start_machine("b");
  wait_for_machines(2);
  const std::string discover = "--discover --cluster gamma --secret s3 --strategy pipeline";

  const testing::Ran split = testing::run_to_end(chat_on_a("-n 6 " + discover), std::chrono::seconds(60), turns);
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.err.find("starting 2 rank(s), pipeline: 10.77.9.1, 10.77.9.2"), std::string::npos) << split.err;
  EXPECT_NE(split.err.find("[weights] rank 1: received "), std::string::npos) << "B has no file: " << split.err;
  EXPECT_EQ(split.out, alone.out);
  for (int turn : {1, 2})
    EXPECT_EQ(testing::prompt_tokens_of_turn(split.err, turn), testing::prompt_tokens_of_turn(alone.err, turn)) << split.err;

  // No reply limit: a reply runs to the end of the context, far longer than the test waits.
  const testing::Finished stopped = testing::interrupt_a_reply(chat_on_a(discover), "netns-chat-interrupt-" + tag_, 6000);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.stderr_text;
  EXPECT_NE(stopped.stderr_text.find("(cancelled)"), std::string::npos) << stopped.stderr_text;
  EXPECT_GT(testing::prompt_tokens_of_turn(stopped.stderr_text, 2), testing::prompt_tokens_of_turn(stopped.stderr_text, 1))
      << "the second turn holds the stopped reply: " << stopped.stderr_text;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ssh.log")) << "ssh was called: " << text_of("ssh.log");
  EXPECT_EQ(ranks_left(), "");
}

// B's agent killed while the chat waits for its next line: the chat ends at once with an error
// naming B (not after a comm timeout), and no rank is left on either machine.
TEST_F(NetnsAgents, AnAgentKilledMidChatEndsTheChatNamingItsMachine) {
  start_machine("a");
  const size_t b = start_machine("b");
  wait_for_machines(2);
  const std::string dir = (dir_ / "lost").string();
  std::filesystem::create_directories(dir);
  const testing::ChatAfterHi chat =
      testing::start_chat_saying_hi(chat_on_a("-n 4 --discover --cluster gamma --secret s3 --strategy pipeline"), dir);
  ASSERT_TRUE(chat.replied) << "no first reply: " << testing::read_text(chat.err);
  kill(agents_[b], SIGKILL);  // B's agent dies without a word, its rank with it
  const testing::Finished f = testing::wait_for(chat.pid, chat.err, std::chrono::seconds(30));
  std::fclose(chat.input);
  EXPECT_NE(f.exit_code, 0) << f.stderr_text;
  EXPECT_NE(f.stderr_text.find("rank 1 (10.77.9.2, by its agent) lost: the agent on 10.77.9.2 went away"), std::string::npos)
      << f.stderr_text;
  EXPECT_NE(f.stderr_text.find("the chat ends"), std::string::npos) << f.stderr_text;
  EXPECT_LT(f.seconds, 10) << "found by the launcher, not a comm timeout";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10 * testing::timeout_factor());
  while (ranks_left() != "" && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(ranks_left(), "");
}

}  // namespace
}  // namespace orchard::cluster

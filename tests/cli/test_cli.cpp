// The CLI as a new user meets it: edge values of flags give results or errors that name the
// flag, never a crash; commands say what they did and what to do next.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "free_ports.h"
#include "model/gguf/reader.h"
#include "model/model_files.h"

namespace orchard {
namespace {

using testing::interrupt_a_reply;
using testing::prompt_tokens_of_turn;
using testing::Ran;
using testing::run_to_end;

std::vector<std::string> orchard(std::vector<std::string> args) {
  args.insert(args.begin(), ORCHARD_BINARY);
  return args;
}

// --- bench: -p 0 measures generation alone, -n 0 the prompt alone, on one rank and split.

class BenchOneTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BenchOneTest, ZeroPromptOrZeroGenerationMeasuresTheOther) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::string world = GetParam();
  for (const auto& [p, n] : {std::pair{"0", "16"}, std::pair{"16", "0"}}) {
    std::vector<std::string> args = {"bench", "-m", model, "-p", p, "-n", n, "-r", "1", "-t", "1"};
    // Every rank skips the warm-up alike (a rank that warmed up alone would wait for the others).
    if (world != "1") args.insert(args.end(), {"--world", world, "--strategy", "pipeline", "--no-warmup"});
    args.push_back("--json");
    Ran r = run_to_end(orchard(args));
    ASSERT_EQ(r.exit_code, 0) << "-p " << p << " -n " << n << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ranks"], std::stoi(world));
    const bool prompt = std::string(p) != "0";
    // The test that did not run has no rate; the one that ran has a positive one.
    EXPECT_EQ(j["prompt_tok_s"].is_null(), !prompt) << r.out;
    EXPECT_EQ(j["gen_tok_s"].is_null(), prompt) << r.out;
    EXPECT_GT(j[prompt ? "prompt_tok_s" : "gen_tok_s"].get<double>(), 0) << r.out;

    // The text line leaves the test that did not run out, rather than print 0.00 tok/s.
    args.pop_back();
    r = run_to_end(orchard(args));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("pp16") != std::string::npos, prompt) << r.out;
    EXPECT_EQ(r.out.find("tg16") != std::string::npos, !prompt) << r.out;
    EXPECT_EQ(r.out.find(" 0.00 tok/s"), std::string::npos) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(World, BenchOneTest, ::testing::Values("1", "2"),
                         [](const auto& info) { return "world" + info.param; });

TEST(Bench, NothingToMeasureIsAnError) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  Ran r = run_to_end(orchard({"bench", "-m", model, "-p", "0", "-n", "0"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("-p 0 and -n 0 leave nothing to measure"), std::string::npos) << r.err;
}

// -d takes a list of depths, each measured after that many tokens in the cache of the type
// --cache-type names; the cache's cost is said at load. A split runs the same (ranks own
// their KV heads).
TEST(Bench, DepthsAndCacheTypes) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  for (const std::string world : {"1", "2"}) {
    for (const std::string type : {"f32", "f16", "q8_0"}) {
      std::vector<std::string> args = {"bench", "-m", model, "-p", "8", "-n", "4", "-d", "0,40", "-r", "1",
                                       "-t", "1", "--cache-type", type, "--json"};
      if (world != "1") args.insert(args.end(), {"--world", world, "--strategy", "tensor"});
      Ran r = run_to_end(orchard(args));
      ASSERT_EQ(r.exit_code, 0) << type << ": " << r.err;
      std::vector<nlohmann::json> lines;
      std::istringstream out(r.out);
      for (std::string line; std::getline(out, line);) lines.push_back(nlohmann::json::parse(line));
      ASSERT_EQ(lines.size(), 2u) << r.out;
      EXPECT_EQ(lines[0]["depth"], 0);
      EXPECT_EQ(lines[1]["depth"], 40);
      for (const auto& j : lines) {
        EXPECT_EQ(j["cache_type"], type);
        EXPECT_GT(j["gen_tok_s"].get<double>(), 0) << r.out;
      }
    }
  }
  Ran text = run_to_end(orchard({"bench", "-m", model, "-p", "8", "-n", "4", "-d", "40", "-r", "1", "-t", "1"}));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("tg4 @ d40"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("f16 cache"), std::string::npos) << text.out;
  // tiny: 4 layers × 2 KV heads × (64 + 64) × 2 bytes
  EXPECT_NE(text.err.find("KV cache: f16, 2.0 KiB per position, 0.1 MiB for 48 positions × 1 slot(s)"), std::string::npos)
      << text.err;
  Ran bad = run_to_end(orchard({"bench", "-m", model, "-n", "4", "--cache-type", "q4_0"}));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_LT(bad.exit_code, 128) << "a crash: " << bad.err;
  EXPECT_NE(bad.err.find("--cache-type"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("q8_0"), std::string::npos) << bad.err;
}

// --- numeric flags out of range are errors that name the flag and its range.

TEST(FlagRanges, OutOfRangeNamesTheFlagAndTheRange) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "-m", model, "-p", "Hi", "--top-k", "-5"}, "--top-k: must be 0 or more, got -5"},
      {{"run", "-m", model, "-p", "Hi", "--top-p", "1.5"}, "--top-p: must be from 0 to 1, got 1.5"},
      {{"run", "-m", model, "-p", "Hi", "--repeat-penalty", "0"}, "--repeat-penalty: must be more than 0, got 0"},
      {{"run", "-m", model, "-p", "Hi", "-n", "0"}, "--max-tokens: must be 1 or more, got 0"},
      {{"run", "-m", model, "-p", "Hi", "--world", "0"}, "--world: must be from 1 to 1024, got 0"},
      {{"run", "-m", model, "-p", "Hi", "--expert-replicas", "-1"}, "--expert-replicas: must be 0 or more, got -1"},
      {{"bench", "-m", model, "-r", "0"}, "--repetitions: must be 1 or more, got 0"},
      {{"bench", "-m", model, "-p", "-1"}, "--prompt-tokens: must be 0 or more, got -1"},
      {{"serve", "-m", model, "--port", "70000"}, "--port: must be from 0 to 65535, got 70000"},
      {{"serve", "-m", model, "--parallel", "0"}, "--parallel: must be from 1 to 1024, got 0"},
      {{"make-model", "-o", "/dev/null", "--threads", "-2"}, "--threads: must be 0 or more, got -2"},
      {{"make-model", "-o", "/dev/null", "--rope-yarn-factor", "0.5"}, "--rope-yarn-factor: must be 1 or more, got 0.5"},
      {{"bench-comm", "--world", "1"}, "--world: must be from 2 to 1024, got 1"},
      {{"bench-comm", "--sockets-per-link", "65"}, "--sockets-per-link: must be from 0 to 64, got 65"},
      {{"bench-comm", "--skew-us", "-1"}, "--skew-us: must be from 0 to 1e+06, got -1"},
      {{"plan", "-m", model, "--solo-memory-bw-gb-s", "0"}, "--solo-memory-bw-gb-s: must be more than 0, got 0"},
  };
  for (const auto& [args, message] : cases) {
    Ran r = run_to_end(orchard(args));
    EXPECT_NE(r.exit_code, 0) << args[0] << " " << message;
    EXPECT_LT(r.exit_code, 128) << "a crash: " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << "want '" << message << "', got: " << r.err;
  }
  // --help says the range next to the flag.
  Ran help = run_to_end(orchard({"run", "--help"}));
  EXPECT_NE(help.out.find("from 0 to 1"), std::string::npos) << help.out;
}

TEST(FlagRanges, TpOrPpOutsideHybridIsAnError) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  Ran r = run_to_end(orchard({"run", "-m", model, "-p", "Hi", "-n", "2", "--world", "2", "--strategy", "tensor", "--tp", "3"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--tp and --pp shape a hybrid or expert split; --strategy tensor does not take them"), std::string::npos) << r.err;
  r = run_to_end(orchard({"bench", "-m", model, "-p", "8", "-n", "2", "--world", "2", "--strategy", "pipeline", "--pp", "2"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--strategy pipeline does not take them"), std::string::npos) << r.err;
  // Replicated experts belong to an expert split, and cannot outnumber the model's experts.
  r = run_to_end(orchard({"run", "-m", model, "-p", "Hi", "-n", "2", "--world", "2", "--strategy", "tensor",
                          "--expert-replicas", "2"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--expert-replicas replicates experts of an expert split; --strategy tensor does not take it"),
            std::string::npos)
      << r.err;
  r = run_to_end(orchard({"run", "-m", testing::synthetic_model("qwen3moe", "tiny", "q8_0"), "-p", "Hi", "-n", "2",
                          "--world", "2", "--strategy", "expert", "--expert-replicas", "9"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("9 replicated experts per layer; the model has 8"), std::string::npos) << r.err;
}

// --- a sampled run without --seed draws one and says it; with it, the run repeats.

// The seed a run printed ("seed N (repeat with --seed N)"), or "" when it printed none.
std::string printed_seed(const std::string& err) {
  const size_t at = err.find("seed ");
  if (at == std::string::npos) return "";
  const std::string seed = err.substr(at + 5, err.find(' ', at + 5) - at - 5);
  EXPECT_NE(err.find("(repeat with --seed " + seed + ")"), std::string::npos) << err;
  return seed;
}

TEST(RunSeed, SampledRunsDrawASeedThatRepeatsThem) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::vector<std::string> sampled = {"run", "-m", model, "-p", "Once upon", "-n", "24", "--temp", "1.5",
                                            "--top-k", "0", "--top-p", "1", "--min-p", "0", "-t", "1", "--json"};
  Ran first = run_to_end(orchard(sampled)), second = run_to_end(orchard(sampled));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const std::string seed = printed_seed(first.err), other = printed_seed(second.err);
  ASSERT_FALSE(seed.empty()) << first.err;
  EXPECT_NE(seed, other) << "two runs drew the same seed";
  EXPECT_EQ(nlohmann::json::parse(first.out)["seed"].get<uint64_t>(), std::stoull(seed));

  // The printed seed repeats the run, here and split over two ranks (which share rank 0's seed).
  std::vector<std::string> again = sampled;
  again.insert(again.end(), {"--seed", seed});
  Ran repeat = run_to_end(orchard(again));
  ASSERT_EQ(repeat.exit_code, 0) << repeat.err;
  EXPECT_EQ(printed_seed(repeat.err), "") << "--seed given: nothing to say";
  EXPECT_EQ(nlohmann::json::parse(repeat.out)["tokens"], nlohmann::json::parse(first.out)["tokens"]);
  std::vector<std::string> split = sampled;
  split.insert(split.end(), {"--world", "2", "--strategy", "pipeline"});
  Ran drawn_split = run_to_end(orchard(split));
  ASSERT_EQ(drawn_split.exit_code, 0) << drawn_split.err;
  std::vector<std::string> single = sampled;
  single.insert(single.end(), {"--seed", printed_seed(drawn_split.err)});
  EXPECT_EQ(nlohmann::json::parse(drawn_split.out)["tokens"], nlohmann::json::parse(run_to_end(orchard(single)).out)["tokens"]);

  // Greedy needs no seed.
  Ran greedy = run_to_end(orchard({"run", "-m", model, "-p", "Once upon", "-n", "4", "-t", "1"}));
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_EQ(printed_seed(greedy.err), "") << greedy.err;
}

// --- ORCHARD_KERNELS: the kernel set a run uses, named in its last line.

TEST(Kernels, TheEnvironmentChoosesASetThisCpuRunsAndNamesTheOthers) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  auto run_with = [&](const std::string& kernels) {
    return run_to_end({"/usr/bin/env", "ORCHARD_KERNELS=" + kernels, ORCHARD_BINARY, "run", "-m", model, "-p", "Hi", "-n",
                       "2", "-t", "1"});
  };
  Ran generic = run_with("generic");
  ASSERT_EQ(generic.exit_code, 0) << generic.err;
  EXPECT_NE(generic.err.find(", generic kernels\n"), std::string::npos) << generic.err;

  // Empty: the best set, the same as without the variable.
  Ran best = run_with("");
  ASSERT_EQ(best.exit_code, 0) << best.err;
  const size_t end = best.err.rfind(" kernels\n"), start = best.err.rfind(", ", end);
  ASSERT_NE(end, std::string::npos) << best.err;
  const std::string best_name = best.err.substr(start + 2, end - start - 2);
  Ran named = run_with(best_name);
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_NE(named.err.find(", " + best_name + " kernels\n"), std::string::npos) << named.err;

  // A set this CPU does not run (or none at all) is refused before any work, naming those it runs.
  const std::string other = best_name.starts_with("neon") ? "avx2" : "neon";
  for (const std::string& wanted : {other, std::string("fastest")}) {
    Ran refused = run_with(wanted);
    EXPECT_EQ(refused.exit_code, 1) << refused.err;
    EXPECT_NE(refused.err.find("[kernels] ORCHARD_KERNELS=" + wanted + ": not a kernel set this CPU runs (it runs " + best_name),
              std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("generic)"), std::string::npos) << refused.err;
  }
}

// --- messages say what is wrong and what to do.

TEST(Messages, SplitFlagsSayWhichFlagToGive) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  // Ranks started by a launcher, with no --strategy: each says which one to pass.
  Ran r = run_to_end(orchard({"launch", "-n", "2", "--", "orchard", "run", "-m", model, "-p", "Hi", "-n", "2"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("this process is one of 2 ranks a launcher started but --strategy is single (one rank): pass "
                       "--strategy pipeline, tensor, expert, hybrid (with --tp or --pp)"),
            std::string::npos)
      << r.err;
  r = run_to_end(orchard({"run", "-m", model, "-p", "Hi", "-n", "2", "--world", "2"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--world 2 but --strategy is single (one rank): pass --strategy pipeline, tensor, expert, hybrid (with "
                       "--tp or --pp) or auto"),
            std::string::npos)
      << r.err;
  r = run_to_end(orchard({"run", "-m", model, "-p", "Hi", "-n", "2", "--world", "2", "--strategy", "hybrid"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--strategy hybrid needs --tp N (ranks per tensor group) or --pp N (pipeline stages), N dividing "
                       "the world of 2 ranks"),
            std::string::npos)
      << r.err;
}

// Ranks run any command, found on PATH as mpirun and mlx.launch find it (not only `orchard`,
// which means this very binary); a command that is not there is named with the reason.
TEST(Launch, LocalRanksRunACommandFoundOnPath) {
  Ran r = run_to_end(orchard({"launch", "-n", "2", "--", "sh", "-c", "echo rank $ORCHARD_RANK of $ORCHARD_WORLD"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 of 2"), std::string::npos) << r.out;
  r = run_to_end(orchard({"launch", "-n", "2", "--", "orchard-no-such-command"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 0: cannot exec orchard-no-such-command: No such file or directory"), std::string::npos)
      << r.err;
}

// Spinning instead of sleeping is asked of the launcher, by flag or by ORCHARD_BUSY_POLL=1 in its
// environment, and every rank gets it (the launcher once passed on a 0 whatever it was given).
TEST(Launch, BusyPollReachesEveryRank) {
  const std::vector<std::string> show = {"--", "sh", "-c", "echo rank $ORCHARD_RANK spins $ORCHARD_BUSY_POLL"};
  auto launch = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"launch", "-n", "2"});
    flags.insert(flags.end(), show.begin(), show.end());
    Ran r = run_to_end(orchard(flags));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  std::string out = launch({});
  EXPECT_NE(out.find("rank 0 spins 0"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 spins 0"), std::string::npos) << out;
  out = launch({"--busy-poll"});
  EXPECT_NE(out.find("rank 0 spins 1"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 spins 1"), std::string::npos) << out;
  ::setenv("ORCHARD_BUSY_POLL", "1", 1);
  out = launch({});
  ::unsetenv("ORCHARD_BUSY_POLL");
  EXPECT_NE(out.find("rank 0 spins 1"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 spins 1"), std::string::npos) << out;
}

TEST(Messages, PlanForMoreMachinesThanItKnowsSaysHowToGiveThem) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  Ran r = run_to_end(orchard({"plan", "-m", model, "--world", "2"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--world 2 asks for 2 machines, but the planner knows only this machine: give it more with "
                       "--hostfile hosts.json, --discover"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("fit"), std::string::npos) << "not a question of fitting: " << r.err;
  // Two ranks of this machine are what --machines 2 plans for.
  r = run_to_end(orchard({"plan", "-m", model, "--world", "2", "--machines", "2", "--threads", "1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(Messages, SshThatCannotReachAHostSaysSo) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::string dir = ::testing::TempDir(), tag = std::to_string(getpid());
  const std::string ssh = dir + "/unreachable-ssh-" + tag + ".sh", hosts = dir + "/unreachable-hosts-" + tag + ".json";
  // What ssh does when no server answers: a message of its own and exit code 255.
  std::ofstream(ssh) << "#!/bin/sh\necho \"ssh: connect to host $3 port 22: Connection refused\" >&2\nexit 255\n";
  std::filesystem::permissions(ssh, std::filesystem::perms::owner_all);
  std::ofstream(hosts) << R"([{"ssh": "mac-1", "ips": ["127.0.0.1"]}, {"ssh": "mac-2", "ips": ["127.0.0.1"]}])";
  Ran r = run_to_end(orchard({"launch", "--hostfile", hosts, "--ssh", ssh, "--port", std::to_string(testing::free_ports(2)),
                              "--", "orchard", "run", "-m", model, "-p", "Hi", "--strategy", "pipeline"}));
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("ssh could not reach mac-"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(try: ssh -o BatchMode=yes mac-"), std::string::npos) << r.err;
}

// The cluster secret from a file (--secret-file: the agent, a network node for its pod's agents,
// and every command that asks agents read it the same way): a file that cannot be read or holds
// nothing is refused naming it, before anything starts; --secret and --secret-file contradict.
TEST(Messages, ASecretFileThatIsMissingOrEmptyIsNamed) {
  const std::string dir = ::testing::TempDir() + "/secret-file-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string missing = dir + "/none", empty = dir + "/empty", line_break = dir + "/line-break", secret = dir + "/secret";
  std::ofstream(empty).flush();
  std::ofstream(line_break) << "\n";
  std::ofstream(secret) << "s3\n";
  const std::vector<std::vector<std::string>> commands = {
      {"agent", "--no-measure", "--probe-every", "3600"}, {"node", "--network", "http://127.0.0.1:9"}, {"cluster", "--wait", "0"}};
  for (const std::vector<std::string>& command : commands) {
    auto with = [&](std::vector<std::string> flags) {
      flags.insert(flags.begin(), command.begin(), command.end());
      return run_to_end(orchard(flags), std::chrono::seconds(20));
    };
    Ran r = with({"--secret-file", missing});
    EXPECT_EQ(r.exit_code, 1) << command[0] << ": " << r.err;
    EXPECT_NE(r.err.find("[cluster] --secret-file " + missing + ": cannot read it (No such file or directory)"), std::string::npos)
        << command[0] << ": " << r.err;
    for (const std::string& file : {empty, line_break}) {
      r = with({"--secret-file", file});
      EXPECT_EQ(r.exit_code, 1) << command[0] << ": " << r.err;
      EXPECT_NE(r.err.find("[cluster] --secret-file " + file + " is empty: it must hold the cluster's secret"), std::string::npos)
          << command[0] << ": " << r.err;
    }
    r = with({"--secret", "s3", "--secret-file", secret});
    EXPECT_NE(r.exit_code, 0) << command[0];
    EXPECT_NE(r.err.find("--secret excludes --secret-file"), std::string::npos) << command[0] << ": " << r.err;
  }
  std::filesystem::remove_all(dir);
}

// --- units in names: bench-comm's bus bandwidth in gigabytes/s, link caps in gigabits/s.

TEST(Units, BusBandwidthInGigabytesUnderALinkCapInGigabits) {
  // 1 Gbit/s is 0.125 GB/s: a 1 MiB all-reduce of two ranks sends 1 MiB per rank through the cap,
  // so its bus bandwidth is at most 0.125 GB/s (it would read 8 times more in gigabits).
  for (const std::string flag : {"--link-gbit-s", "--link-gbps"}) {  // the old name still works
    Ran r = run_to_end(orchard({"bench-comm", "--world", "2", "--sizes", "1M", "--iters", "5", flag, "1", "--json"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto result = nlohmann::json::parse(r.out)["results"][0];
    EXPECT_FALSE(result.contains("busbw_gbps")) << result.dump();
    const double gb_s = result["busbw_gb_s"].get<double>();
    EXPECT_LE(gb_s, 0.125 * 1.02) << flag;
    EXPECT_GE(gb_s, 0.125 / 4) << flag;
  }
  Ran help = run_to_end(orchard({"bench-comm", "--help"}));
  EXPECT_NE(help.out.find("--link-gbit-s"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("gigabits/s"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("busbw_gb_s (bus bandwidth, gigabytes/s)"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("--link-gbps"), std::string::npos) << "the old name is hidden: " << help.out;
}

// --skew-us: ranks take turns arriving late; what is shown is each call's time beyond the skew.
// Over an emulated 1 ms link the late rank's message still takes 1 ms after it arrives, so each
// call costs at least the link's latency beyond the skew: less would be the wait not counted or
// the skew taken off twice. (No upper bound: on a loaded host a rank that slept through the
// skew can wait milliseconds for its core.)
TEST(BenchComm, SkewIsTakenOffTheWaitOnce) {
  Ran r = run_to_end(orchard({"bench-comm", "--world", "2", "--sizes", "4K", "--iters", "20", "--skew-us", "2000",
                              "--link-latency-us", "1000", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double beyond = nlohmann::json::parse(r.out)["results"][0]["p50_us"].get<double>();
  EXPECT_GE(beyond, 900) << r.out;
}

// --solo-memory-bw-gb-s: a pipeline's stages take turns in decode, each streaming alone, so on
// two ranks of one machine its decode is predicted at the solo figure (1.5x the shared one here:
// the same bytes in 2/3 of the time, the hidden state and logits messages besides), a tensor
// split's at the shared one; plan --json reports the figure it used.
TEST(Plan, SoloBandwidthSetsAPipelinesDecode) {
  auto plan = [](std::string strategy, std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan", "-m", "llama-8b:q4_0", "--machines", "2", "--world", "2", "--strategy",
                                     strategy, "--memory-bw-gb-s", "10", "--compute-gflops", "100",
                                     "--link-latency-us", "0", "--link-gbit-s", "0", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    Ran r = run_to_end(orchard(args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const auto shared = plan("pipeline", {}), solo = plan("pipeline", {"--solo-memory-bw-gb-s", "15"});
  EXPECT_EQ(shared["machines"][0]["solo_memory_bw_gb_s"].get<double>(), 10);
  EXPECT_EQ(solo["machines"][0]["solo_memory_bw_gb_s"].get<double>(), 15);
  EXPECT_NEAR(solo["predicted"]["gen_tok_s"].get<double>() / shared["predicted"]["gen_tok_s"].get<double>(), 1.5, 0.01);
  EXPECT_EQ(plan("tensor", {"--solo-memory-bw-gb-s", "15"})["predicted"]["gen_tok_s"].get<double>(),
            plan("tensor", {})["predicted"]["gen_tok_s"].get<double>());
}

// --- make-model says what it wrote.

// A deepseek2 file made and run as a user would: alone and as a 2-way tensor split (float
// weights: the same tokens), and a shape it is not made in named.
TEST(MakeModel, Deepseek2RunsAloneAndSplit) {
  const std::string path = ::testing::TempDir() + "/cli-deepseek2-" + std::to_string(getpid()) + ".gguf";
  Ran made = run_to_end(orchard({"make-model", "--arch", "deepseek2", "--shape", "tiny", "--type", "f32", "--threads", "1", "-o", path}));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto tokens_of = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "-m", path, "-p", "Once upon a time", "-n", "8", "--temp", "0", "--json", "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    Ran r = run_to_end(orchard(args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t at = r.out.find("\"tokens\":");
    return at == std::string::npos ? std::string("(none)") : r.out.substr(at, r.out.find(']', at) - at);
  };
  const std::string alone = tokens_of({});
  EXPECT_NE(alone, "(none)");
  EXPECT_EQ(tokens_of({"--world", "2", "--strategy", "tensor"}), alone);
  std::filesystem::remove(path);
  Ran small = run_to_end(orchard({"make-model", "--arch", "deepseek2", "--shape", "small", "-o", "/dev/null"}));
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("deepseek2 is made in shape tiny or moe-3b, not 'small'"), std::string::npos) << small.err;
}

TEST(MakeModel, SaysWhatItWrote) {
  const std::string path = ::testing::TempDir() + "/cli-made-" + std::to_string(getpid()) + ".gguf";
  Ran r = run_to_end(orchard({"make-model", "--arch", "llama", "--shape", "tiny", "--type", "f32", "--threads", "1", "-o", path}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Parameters by hand from the shape's metadata: embeddings and output head, the final norm,
  // and per layer two norms, Q/K/V/O and the three FFN matrices.
  const auto file = model::gguf::Reader::open(path);
  auto meta = [&](const std::string& key) { return file.get("llama." + key).as_int(key); };
  const int64_t embd = meta("embedding_length"), layers = meta("block_count"), ff = meta("feed_forward_length");
  const int64_t heads = meta("attention.head_count"), kv_heads = meta("attention.head_count_kv");
  const int64_t vocab = static_cast<int64_t>(file.get("tokenizer.ggml.tokens").as_array("tokens").items.size());
  const int64_t kv_dim = embd / heads * kv_heads;
  const int64_t parameters = 2 * vocab * embd + embd + layers * (2 * embd + 2 * embd * embd + 2 * embd * kv_dim + 3 * embd * ff);
  const auto bytes = std::filesystem::file_size(path);
  EXPECT_NE(r.out.find("wrote " + path + ": llama, shape tiny (" + std::to_string(layers) + " layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("type f32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format(" {} parameters", parameters)), std::string::npos) << r.out << "want " << parameters;
  // F32: four bytes a parameter.
  EXPECT_NE(r.out.find(fmt::format("{:.3g} MB of weights", parameters * 4 / 1e6)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format(" {} bytes in all", bytes)), std::string::npos) << r.out;
  std::filesystem::remove(path);
}

// --- chat: turns read from stdin, the history rendered with the chat template each turn.

// The tokens `orchard tokenize` gives for text (the independent count of a rendered prompt).
size_t token_count(const std::string& model, const std::string& text) {
  Ran r = run_to_end(orchard({"tokenize", "-m", model, text}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream ids(r.out);
  size_t n = 0;
  for (std::string id; ids >> id;) ++n;
  return n;
}

TEST(Chat, TheSecondTurnsPromptHoldsTheFirstReplyAndEndOfInputQuits) {
  // ChatML, whose rendering is simple to write out here by hand (the tiny llama's greedy replies
  // are visible text; the tiny qwen2's are newlines).
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::vector<std::string> chat =
      orchard({"chat", "-m", model, "-n", "6", "--temp", "0", "-t", "1", "--verbose", "--chat-template", "chatml"});
  Ran one = run_to_end(chat, std::chrono::seconds(60), "hi\n");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_TRUE(one.out.ends_with("\n")) << one.out;
  const std::string reply = one.out.substr(0, one.out.size() - 1);  // stdin is no terminal: no ">>> " prompts
  const std::string first = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt_tokens_of_turn(one.err, 1), static_cast<int>(token_count(model, first))) << one.err;

  Ran two = run_to_end(chat, std::chrono::seconds(60), "hi\n\n  how so?  \n");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_TRUE(two.out.starts_with(reply + "\n")) << "greedy: the same first reply\n" << two.out;
  const std::string second = first + reply + "<|im_end|>\n<|im_start|>user\nhow so?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt_tokens_of_turn(two.err, 2), static_cast<int>(token_count(model, second))) << two.err;
  EXPECT_EQ(prompt_tokens_of_turn(two.err, 3), -1) << "an empty line is no turn";

  // /clear forgets the conversation; /exit quits before the lines after it.
  Ran cleared = run_to_end(chat, std::chrono::seconds(60), "hi\n/clear\nhi\n/exit\nignored\n");
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  EXPECT_EQ(prompt_tokens_of_turn(cleared.err, 2), prompt_tokens_of_turn(cleared.err, 1)) << cleared.err;
  EXPECT_EQ(prompt_tokens_of_turn(cleared.err, 3), -1) << cleared.err;
  EXPECT_EQ(cleared.out, reply + "\n" + reply + "\n");

  // A conversation longer than the context is refused turn by turn, with what to do, not a crash.
  Ran full = run_to_end(orchard({"chat", "-m", model, "-c", "40", "--temp", "0", "-t", "1", "--chat-template", "chatml"}),
                        std::chrono::seconds(60),
                        std::string(300, 'a') + "\nhi\n");
  EXPECT_EQ(full.exit_code, 0) << full.err;
  EXPECT_NE(full.err.find("maximum context length is 40 tokens"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("/clear starts a new conversation"), std::string::npos) << full.err;
}

// Ctrl-C while a reply is written stops that reply, not the program: the next turn runs with the
// stopped reply in its history.
TEST(Chat, InterruptStopsTheReplyNotTheProgram) {
  // No reply limit: a reply runs to the end of the context. The small shape's 2,048 positions
  // take a second or more; the tiny shape's 512 had come to ~70 ms, which a poll of 10 ms on a
  // busy host could miss whole.
  const std::string model = testing::synthetic_model("llama", "small", "q8_0");
  const testing::Finished f = interrupt_a_reply(
      orchard({"chat", "-m", model, "--temp", "0", "-t", "1", "--verbose", "--chat-template", "chatml"}), "chat-interrupt", 3000);
  EXPECT_EQ(f.exit_code, 0) << f.stderr_text;
  const int first = prompt_tokens_of_turn(f.stderr_text, 1), second = prompt_tokens_of_turn(f.stderr_text, 2);
  EXPECT_NE(f.stderr_text.find("[turn 1: prompt " + std::to_string(first) + " tokens, reply "), std::string::npos);
  EXPECT_NE(f.stderr_text.find("(cancelled)"), std::string::npos) << f.stderr_text;
  EXPECT_GT(second, first) << "the second turn holds the stopped reply: " << f.stderr_text;
}

// Two turns through a pipe, in one process and split by `split_flags`: the same replies, the same
// prompt sizes, the second turn's prompt holding the first. Returns the split chat's command
// without its token limit (a reply then runs to the context's end), for a test of Ctrl-C.
std::vector<std::string> expect_split_chats_as_one_rank(const std::vector<std::string>& split_flags) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const std::vector<std::string> base = {"chat", "-m", model, "-n", "6", "--temp", "0", "-t", "1", "--verbose", "--chat-template", "chatml"};
  std::vector<std::string> split = base;
  split.insert(split.end(), split_flags.begin(), split_flags.end());
  const std::string turns = "hi\nhow so?\n/exit\n";
  Ran one = run_to_end(orchard(base), std::chrono::seconds(60), turns);
  Ran two = run_to_end(orchard(split), std::chrono::seconds(120), turns);
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(two.out, one.out);
  EXPECT_EQ(prompt_tokens_of_turn(two.err, 2), prompt_tokens_of_turn(one.err, 2)) << two.err;
  EXPECT_GT(prompt_tokens_of_turn(two.err, 2), prompt_tokens_of_turn(two.err, 1));
  split.erase(split.begin() + 3, split.begin() + 5);  // "-n", "6"
  EXPECT_EQ(std::count(split.begin(), split.end(), "-n"), 0);
  return split;
}

// `chat` split over two local ranks (a pipeline) gives the replies one rank gives, turn after
// turn through a pipe, and Ctrl-C there still stops a reply (the launcher passes it to rank 0)
// rather than the job.
TEST(Chat, ASplitOverTwoLocalRanksChatsAsOneRank) {
  const std::vector<std::string> endless = expect_split_chats_as_one_rank({"--world", "2", "--strategy", "pipeline"});
  // Ctrl-C goes to the launcher, which passes it on to rank 0 (the other ranks block it).
  const testing::Finished f = interrupt_a_reply(orchard(endless), "chat-split-interrupt", 6000);
  EXPECT_EQ(f.exit_code, 0) << f.stderr_text;
  EXPECT_GT(prompt_tokens_of_turn(f.stderr_text, 2), prompt_tokens_of_turn(f.stderr_text, 1)) << f.stderr_text;
}

// Two "hosts" on this machine for --hostfile, reached through an ssh stand-in that runs the remote
// command here, first writing its pid (the rank's once it has exec'd) to DIR/HOST.pid.
struct LocalHosts {
  std::string dir, ssh, hostfile;
};

LocalHosts local_hosts(const std::string& name, const std::string& first_ip = "127.0.0.1") {
  LocalHosts h;
  h.dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(h.dir);
  std::filesystem::create_directories(h.dir);
  h.ssh = h.dir + "/fake-ssh.sh";
  // ssh -o BatchMode=yes HOST COMMAND
  std::ofstream(h.ssh) << "#!/bin/sh\necho $$ > '" << h.dir << "'/$3.pid\nshift 3\nexec sh -c \"$1\"\n";
  std::filesystem::permissions(h.ssh, std::filesystem::perms::owner_all);
  h.hostfile = h.dir + "/hosts.json";
  const int port = testing::free_ports(2);
  std::ofstream(h.hostfile) << fmt::format(R"([{{"ssh": "mac-1", "ips": ["{}:{}"]}}, {{"ssh": "mac-2", "ips": ["127.0.0.1:{}"]}}])",
                                           first_ip, port, port + 1);
  return h;
}

// `chat --hostfile` runs rank 0 in the terminal's process and the other ranks over ssh: turn after
// turn it gives the replies one process gives, Ctrl-C stops a reply, end of input ends every rank.
TEST(Chat, AHostfileSplitChatsFromThisTerminal) {
  const LocalHosts hosts = local_hosts("chat-hostfile");
  const std::vector<std::string> endless =
      expect_split_chats_as_one_rank({"--hostfile", hosts.hostfile, "--ssh", hosts.ssh, "--strategy", "pipeline"});
  // Only rank 1 went through ssh; rank 0 was this process.
  EXPECT_TRUE(std::filesystem::exists(hosts.dir + "/mac-2.pid"));
  EXPECT_FALSE(std::filesystem::exists(hosts.dir + "/mac-1.pid"));

  const testing::Finished f = interrupt_a_reply(orchard(endless), "chat-hostfile-interrupt", 6000);
  EXPECT_EQ(f.exit_code, 0) << f.stderr_text;
  EXPECT_GT(prompt_tokens_of_turn(f.stderr_text, 2), prompt_tokens_of_turn(f.stderr_text, 1)) << f.stderr_text;
  std::filesystem::remove_all(hosts.dir);
}

// A rank that dies mid-conversation ends the chat (which was waiting for a line) with an error
// naming it, and no process is left behind.
TEST(Chat, ALostRankEndsTheChatNamingIt) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const LocalHosts hosts = local_hosts("chat-lost-rank");
  const testing::ChatAfterHi chat =
      testing::start_chat_saying_hi(orchard({"chat", "-m", model, "-n", "4", "--temp", "0", "-t", "1", "--chat-template", "chatml",
                                             "--hostfile", hosts.hostfile, "--ssh", hosts.ssh, "--strategy", "pipeline"}),
                                    hosts.dir);
  ASSERT_TRUE(chat.replied) << testing::read_text(chat.err);
  const pid_t rank1 = std::stoi(testing::read_text(hosts.dir + "/mac-2.pid"));
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const testing::Finished f = testing::wait_for(chat.pid, chat.err, std::chrono::seconds(30));
  std::fclose(chat.input);
  EXPECT_EQ(f.exit_code, 128 + SIGKILL) << f.stderr_text;
  EXPECT_NE(f.stderr_text.find("rank 1 (mac-2) exited with signal 9"), std::string::npos) << f.stderr_text;
  EXPECT_NE(f.stderr_text.find("the chat ends"), std::string::npos) << f.stderr_text;
  EXPECT_LT(f.seconds, 15) << "found by the launcher, not a comm timeout";
  std::filesystem::remove_all(hosts.dir);
}

// A host ssh cannot reach ends the chat while rank 0 waits for it, with ssh's hint, not after the
// comm layer's connect timeout.
TEST(Chat, AnUnreachableHostEndsTheChatWithSshsHint) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const LocalHosts hosts = local_hosts("chat-unreachable");
  // What ssh does when no server answers: a message of its own and exit code 255.
  std::ofstream(hosts.ssh) << "#!/bin/sh\necho \"ssh: connect to host $3 port 22: Connection refused\" >&2\nexit 255\n";
  Ran r = run_to_end(orchard({"chat", "-m", model, "--hostfile", hosts.hostfile, "--ssh", hosts.ssh, "--strategy", "pipeline"}),
                     std::chrono::seconds(20), "hi\n");
  EXPECT_EQ(r.exit_code, 255) << r.err;
  EXPECT_NE(r.err.find("rank 1 (mac-2) exited with code 255"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ssh could not reach mac-2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "no reply without the split";
  std::filesystem::remove_all(hosts.dir);
}

// Rank 0 is the terminal's: a hostfile whose first host is another machine is refused, saying
// what to change, before any rank starts.
TEST(Chat, AHostfileMustListThisMachineFirst) {
  const std::string model = testing::synthetic_model("llama", "tiny", "q8_0");
  const LocalHosts hosts = local_hosts("chat-far-first", "192.0.2.7");  // TEST-NET-1: no machine's address
  Ran r = run_to_end(orchard({"chat", "-m", model, "--hostfile", hosts.hostfile, "--ssh", hosts.ssh, "--strategy", "pipeline"}),
                     std::chrono::seconds(60), "hi\n");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the first host must be this machine; mac-1 (192.0.2.7:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("put this machine first in the hostfile"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(hosts.dir + "/mac-2.pid")) << "no rank was started";
  std::filesystem::remove_all(hosts.dir);
}

}  // namespace
}  // namespace orchard

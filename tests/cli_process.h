#pragma once
// The orchard binary as a user runs it, for tests: start a command with its stdout and stderr
// going to files, wait for it under a deadline (killed after), read what it printed; a chat's
// turns fed to it, its Ctrl-C, what --verbose said of its prompts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace orchard::testing {

struct Finished {
  int exit_code;  // 128 + signal when a signal ended it (139: SIGSEGV)
  std::string stderr_text;
  double seconds;
};

// Multiplies the waits tests set themselves: scripts/test-arm64-all.sh sets
// ORCHARD_TEST_TIMEOUT_FACTOR for the run under qemu-user, several times slower than a native one
// (an agent's start-up measurement of its machine alone takes about a minute there).
inline int timeout_factor() {
  const char* f = std::getenv("ORCHARD_TEST_TIMEOUT_FACTOR");
  const int factor = f ? std::atoi(f) : 1;
  return factor > 0 ? factor : 1;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Starts argv with stderr and stdout to files (and stdin from one, when given); returns its pid.
inline pid_t start(const std::vector<std::string>& argv, const std::string& stderr_path, const std::string& stdout_path,
                   const std::string& stdin_path = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(stderr_path.c_str(), "w", stderr) || !freopen(stdout_path.c_str(), "w", stdout)) _exit(126);
    if (!stdin_path.empty() && !freopen(stdin_path.c_str(), "r", stdin)) _exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits for pid, killing it (and failing the test) after `limit` (times timeout_factor()).
inline Finished wait_for(pid_t pid, const std::string& stderr_path, std::chrono::seconds limit) {
  using namespace std::chrono_literals;
  limit *= timeout_factor();
  const auto begin = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - begin > limit) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "still running after " << limit.count() << " s";
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_text(stderr_path),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count()};
}

struct Ran {
  int exit_code;
  std::string out, err;
};

// Runs argv to the end (at most `limit`) and returns its exit code and what it printed. With
// `input`, that is its stdin (then end of file); otherwise it inherits the test's.
inline Ran run_to_end(const std::vector<std::string>& argv, std::chrono::seconds limit = std::chrono::seconds(60),
                      const std::optional<std::string>& input = std::nullopt) {
  // Per process and call: ctest runs a file's tests at the same time.
  static int calls = 0;
  const std::string tag = std::to_string(getpid()) + "-" + std::to_string(calls++);
  const std::string err = ::testing::TempDir() + "/cli-err-" + tag + ".txt";
  const std::string out = ::testing::TempDir() + "/cli-out-" + tag + ".txt";
  const std::string in = input ? ::testing::TempDir() + "/cli-in-" + tag + ".txt" : std::string();
  if (input) std::ofstream(in) << *input;
  Finished f = wait_for(start(argv, err, out, in), err, limit);
  Ran r{f.exit_code, read_text(out), f.stderr_text};
  std::remove(err.c_str());
  std::remove(out.c_str());
  if (input) std::remove(in.c_str());
  return r;
}

// --- orchard chat, fed from a test.

// "[turn N: prompt P tokens, ..." of chat --verbose: P, or -1 when the line is missing.
inline int prompt_tokens_of_turn(const std::string& err, int turn) {
  const std::string head = "[turn " + std::to_string(turn) + ": prompt ";
  const size_t at = err.find(head);
  return at == std::string::npos ? -1 : std::stoi(err.substr(at + head.size()));
}

// A chat `argv` started reading a fifo at dir/in (its stdout and stderr at dir/out and dir/err),
// told "hi" and waited on (`polls` of 10 ms) until its first reply's line is out, the fifo left
// open for what the test does next. Without that line (`replied` false) the chat is killed.
struct ChatAfterHi {
  pid_t pid;
  FILE* input;
  std::string err;
  bool replied;
};
inline ChatAfterHi start_chat_saying_hi(const std::vector<std::string>& argv, const std::string& dir, int polls = 6000) {
  const std::string in = dir + "/in", out = dir + "/out", err = dir + "/err";
  EXPECT_EQ(mkfifo(in.c_str(), 0600), 0);
  const pid_t pid = start(argv, err, out, in);
  FILE* input = std::fopen(in.c_str(), "w");  // opens once the child has opened its end
  EXPECT_NE(input, nullptr);
  if (!input) {
    kill(pid, SIGKILL);
    return {pid, nullptr, err, false};
  }
  std::fputs("hi\n", input);
  std::fflush(input);
  auto replied = [&] { return read_text(out).find('\n') != std::string::npos; };
  for (int i = 0; i < polls && !replied(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool ok = replied();
  if (!ok) kill(pid, SIGKILL);
  return {pid, input, err, ok};
}

// Runs the chat `argv` (the process it starts must be the chat's: a shell or `ip netns exec` in
// front of it has to exec it) reading a fifo: says "hi", sends Ctrl-C (SIGINT to that process)
// once the reply has begun, waits for "(stopped)", then says "more" and /exit. Returns how it
// ended; `polls` of 10 ms bound each wait.
inline Finished interrupt_a_reply(const std::vector<std::string>& argv, const std::string& name, int polls) {
  const std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/in", out = dir + "/out", err = dir + "/err";
  EXPECT_EQ(mkfifo(in.c_str(), 0600), 0);
  const pid_t pid = start(argv, err, out, in);
  FILE* input = std::fopen(in.c_str(), "w");  // opens once the child has opened its end
  EXPECT_NE(input, nullptr);
  auto wait_until = [polls](const std::function<bool()>& done) {
    for (int i = 0; i < polls && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  };
  std::fputs("hi\n", input);
  std::fflush(input);
  EXPECT_TRUE(wait_until([&] { return !read_text(out).empty(); })) << read_text(err);
  kill(pid, SIGINT);
  EXPECT_TRUE(wait_until([&] { return read_text(err).find("(stopped)") != std::string::npos; })) << read_text(err);
  std::fputs("more\n/exit\n", input);
  std::fclose(input);
  Finished f = wait_for(pid, err, std::chrono::seconds(60));
  std::filesystem::remove_all(dir);
  return f;
}

}  // namespace orchard::testing

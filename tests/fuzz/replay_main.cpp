// A driver for the fuzz targets in builds without libFuzzer (the ordinary GCC build the suite
// runs): every seed of the target's corpus, then mutations of them (bit flips, byte changes to
// boundary values, insertions, deletions, splices of two seeds) for a bounded time, from a fixed
// random seed so a run repeats exactly. Coverage-guided fuzzing stays in the clang build
// (tests/fuzz/CMakeLists.txt); this keeps every harness and its seeds running in every suite.
//
// Usage: TARGET_replay [--seconds S] [--seed N] CORPUS_DIR...
// A harness failure aborts; the input being run is then written to fuzz-crash-<target>.bin in
// the working directory, to be replayed alone as a seed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, for the abort handler (async-signal-safe: a preallocated buffer).
std::vector<uint8_t> g_current;
char g_crash_path[256];

void write_current_input(int signal_number) {
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    const uint8_t* at = g_current.data();
    size_t left = g_current.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, at, left);
      if (n <= 0) break;
      at += n;
      left -= static_cast<size_t>(n);
    }
    ::close(fd);
  }
  constexpr char kSaid[] = "fuzz replay: the harness failed; the input is in fuzz-crash-*.bin\n";
  [[maybe_unused]] const ssize_t said = ::write(2, kSaid, sizeof kSaid - 1);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

void run(const std::vector<uint8_t>& input) {
  g_current.assign(input.begin(), input.end());
  LLVMFuzzerTestOneInput(g_current.data(), g_current.size());
}

std::vector<uint8_t> mutate(const std::vector<std::vector<uint8_t>>& seeds, std::mt19937_64& rng) {
  constexpr size_t kMaxLength = 4096;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<uint8_t> out = seeds[pick(seeds.size())];
  static constexpr uint8_t kBoundary[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '[', ':', ',', '0', '-'};
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!out.empty()) out[pick(out.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // a boundary byte
        if (!out.empty()) out[pick(out.size())] = kBoundary[pick(std::size(kBoundary))];
        break;
      case 2:  // insert random bytes
        if (out.size() < kMaxLength) {
          const size_t at = pick(out.size() + 1), n = 1 + pick(8);
          for (size_t i = 0; i < n; ++i) out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), static_cast<uint8_t>(rng()));
        }
        break;
      case 3:  // delete a run
        if (!out.empty()) {
          const size_t at = pick(out.size()), n = std::min(out.size() - at, 1 + pick(16));
          out.erase(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + n));
        }
        break;
      case 4: {  // splice: this one's head, another seed's tail
        const std::vector<uint8_t>& other = seeds[pick(seeds.size())];
        const size_t head = pick(out.size() + 1), tail = pick(other.size() + 1);
        out.resize(head);
        out.insert(out.end(), other.begin() + static_cast<std::ptrdiff_t>(tail), other.end());
        break;
      }
      default:  // truncate
        out.resize(pick(out.size() + 1));
        break;
    }
  }
  if (out.size() > kMaxLength) out.resize(kMaxLength);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      dirs.emplace_back(arg);
    }
  }
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  std::snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-%s.bin", name.c_str());
  g_current.reserve(8192);
  for (int s : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(s, write_current_input);

  std::vector<std::filesystem::path> files;
  for (const auto& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) {
      std::fprintf(stderr, "fuzz replay: %s is not a corpus directory\n", dir.c_str());
      return 2;
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    run(seeds.back());
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "fuzz replay: no seeds in the corpus directories given\n");
    return 2;
  }
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t mutations = 0;
  while (std::chrono::steady_clock::now() < end) {
    run(mutate(seeds, rng));
    ++mutations;
  }
  std::printf("%s: %zu seeds and %llu mutations (seed %llu) ran without a failure\n", name.c_str(), seeds.size(),
              static_cast<unsigned long long>(mutations), static_cast<unsigned long long>(seed));
  return 0;
}

#pragma once
// Errors: typed exceptions whose messages start with the subsystem, e.g.
//   "[gguf] tensor 'blk.3.ffn_up.weight' ends at byte 93 MiB past the 88 MiB file".
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace orchard {

// Any failure Orchard reports to a user: bad input, a dead peer, a refused request.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken internal invariant: a bug in Orchard, not in the input.
class InvariantError : public Error {
 public:
  using Error::Error;
};

// Input that does not follow its format (file, frame, JSON, flag).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A deadline passed while waiting on someone else (a peer, a server).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Builds "[subsystem] message" with fmt formatting.
template <typename... Args>
std::string error_message(std::string_view subsystem, fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format("[{}] {}", subsystem, fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void throw_invariant(const char* condition, const char* file, int line, const std::string& message);

}  // namespace orchard

// Always on, in every build type: an invariant that fails names its file and line.
#define ORCHARD_CHECK(cond, ...)                                                                  \
  do {                                                                                            \
    if (!(cond)) [[unlikely]]                                                                     \
      ::orchard::throw_invariant(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__));          \
  } while (0)

#pragma once
// Ranges and units of numeric flags. A value out of range is a parse error that names the flag
// and its range ("--top-k: must be 0 or more, got -5"), before any work starts; --help shows the
// range. Units are in the names: `_gb_s` gigabytes per second, `_gbit_s` gigabits per second.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <limits>
#include <string>

namespace orchard::app {

namespace detail {

inline CLI::Validator range_validator(double lo, double hi, bool lo_open, const std::string& words) {
  return CLI::Validator(
      [lo, hi, lo_open, words](std::string& input) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(input.c_str(), &end);
        if (input.empty() || *end != '\0') return fmt::format("must be a number {}, got '{}'", words, input);
        if (v < lo || (lo_open && v == lo) || v > hi) return fmt::format("must be {}, got {}", words, input);
        return {};
      },
      words);
}

}  // namespace detail

// lo <= value.
inline CLI::Validator at_least(double lo) {
  return detail::range_validator(lo, std::numeric_limits<double>::infinity(), false, fmt::format("{:g} or more", lo));
}

// lo < value.
inline CLI::Validator above(double lo) {
  return detail::range_validator(lo, std::numeric_limits<double>::infinity(), true, fmt::format("more than {:g}", lo));
}

// lo <= value <= hi.
inline CLI::Validator between(double lo, double hi) {
  return detail::range_validator(lo, hi, false, fmt::format("from {:g} to {:g}", lo, hi));
}

// A flag renamed to say its unit: `name` is the one --help shows; `old_name` still sets the same
// value (hidden), so that scripts written for it keep working. Both are checked by `range`.
template <typename T>
CLI::Option* add_renamed_option(CLI::App* cmd, const std::string& name, const std::string& old_name, T& value,
                                const std::string& help, const CLI::Validator& range) {
  cmd->add_option(old_name, value, "Old name of " + name)->check(range)->group("");
  return cmd->add_option(name, value, help)->check(range);
}

}  // namespace orchard::app

#pragma once
// Stop strings over streamed text: text that could still turn out to be the start of a stop
// string is held back, so a client never sees part of a stop string, and the text ends just
// before the first stop string found.
#include <string>
#include <string_view>
#include <vector>

namespace orchard::serve {

class StopMatcher {
 public:
  // Empty strings among `stops` are ignored.
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds generated text; returns the text that is now safe to show (possibly empty). Once a
  // stop string appears, returns the text before it and stopped() turns true; later pushes
  // return "".
  std::string push(std::string_view text);
  // The text still held back (generation ended without completing a stop string).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace orchard::serve

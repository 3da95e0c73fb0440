#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal (logs stay clean).
#include <cstddef>
#include <string>

namespace orchard::app {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  void update(size_t done, size_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

}  // namespace orchard::app

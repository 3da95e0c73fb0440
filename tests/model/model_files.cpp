#include "model/model_files.h"

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <mutex>

namespace orchard::testing {

std::string synthetic_model(const std::string& arch, const std::string& shape, const std::string& type,
                            float rope_linear_factor, bool rope_freq_factors, float rope_yarn_factor) {
  static std::mutex mutex;
  static std::map<std::string, std::string> written;
  // Never destroyed, so the exit handler that removes the folder can still read it.
  static const std::filesystem::path& dir = *[] {
    auto* d = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                        fmt::format("orchard-test-models-{}", getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] { std::filesystem::remove_all(dir); });
    return d;
  }();
  const std::string name =
      fmt::format("{}-{}-{}-{}-{}-{}.gguf", arch, shape, type, rope_linear_factor, rope_freq_factors ? "ff" : "noff",
                  rope_yarn_factor);
  std::lock_guard lock(mutex);
  auto it = written.find(name);
  if (it != written.end()) return it->second;
  model::SyntheticModelSpec spec;
  spec.arch = arch;
  spec.shape = shape;
  spec.type = type;
  spec.seed = 7;
  spec.rope_linear_factor = rope_linear_factor;
  spec.rope_freq_factors = rope_freq_factors;
  spec.rope_yarn_factor = rope_yarn_factor;
  const std::string path = (dir / name).string();
  model::write_synthetic_model(spec, path);
  written[name] = path;
  return path;
}

}  // namespace orchard::testing

#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>

#include "network/store_backends.h"

namespace orchard::network::testing {

std::vector<std::string> store_backends() { return {"sqlite"}; }

std::string fresh_database(const std::string&, std::string*) {
  static int n = 0;
  auto path = std::filesystem::temp_directory_path() / fmt::format("orchard-net-{}-{}.db", ::getpid(), n++);
  for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path.string() + ext);
  return "sqlite://" + path.string();
}

}  // namespace orchard::network::testing

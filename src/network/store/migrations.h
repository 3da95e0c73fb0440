#pragma once
// The schema, as an ordered list of migrations. Written once for both databases: only types and
// statements that SQLite and PostgreSQL read the same way. Never edit a shipped migration;
// append a new one.
#include <string>
#include <vector>

namespace orchard::network {

struct Migration {
  int64_t version;
  std::vector<std::string> statements;
};

const std::vector<Migration>& migrations();

}  // namespace orchard::network

#pragma once
// Which databases a store test binary runs against: chosen at link time (store_backends_*.cpp),
// so one test body covers SQLite and PostgreSQL.
#include <string>
#include <vector>

namespace orchard::network::testing {

std::vector<std::string> store_backends();  // "sqlite" | "postgres"
// A URL of a fresh, empty database of that backend; "" with *skip set when unavailable.
std::string fresh_database(const std::string& backend, std::string* skip);

}  // namespace orchard::network::testing

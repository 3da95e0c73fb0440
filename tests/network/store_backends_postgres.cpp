#include "network/pg_server.h"
#include "network/store_backends.h"

namespace orchard::network::testing {

std::vector<std::string> store_backends() { return {"postgres"}; }

std::string fresh_database(const std::string&, std::string* skip) {
  PgServer* server = PgServer::shared(skip);
  return server ? server->new_database() : "";
}

}  // namespace orchard::network::testing

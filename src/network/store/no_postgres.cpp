// Linked instead of postgres_db.cpp in a build without libpq, so callers need no #ifdef.
#include "core/error.h"
#include "network/store/db.h"

namespace orchard::network {

std::unique_ptr<Db> open_postgres(const std::string& url) {
  throw Error(error_message("network", "this build has no PostgreSQL support (asked for {}); rebuild with libpq", url));
}
bool postgres_available() { return false; }
std::unique_ptr<Listener> open_listener(const std::string& url, const std::string&) {
  open_postgres(url);  // throws
  return nullptr;
}

}  // namespace orchard::network

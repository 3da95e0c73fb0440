#pragma once
// A throwaway PostgreSQL server for tests: initdb into a temporary directory, pg_ctl start on a
// free loopback port, stopped and deleted at exit. As root the server runs as the "postgres"
// user (PostgreSQL refuses to run as root).
#include <string>

namespace orchard::network::testing {

class PgServer {
 public:
  // Returns nullptr and sets why_not when the server binaries are missing or it fails to start.
  static PgServer* shared(std::string* why_not);
  // A fresh, empty database on the server: "postgresql://postgres@127.0.0.1:PORT/NAME".
  std::string new_database();
  ~PgServer();

 private:
  PgServer() = default;
  std::string bin_, dir_, user_;
  int port_ = 0;
  int next_db_ = 0;
};

}  // namespace orchard::network::testing

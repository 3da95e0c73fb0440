#include "network/pg_server.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <memory>

#include "free_ports.h"
#include "network/store/db.h"

namespace orchard::network::testing {
namespace fs = std::filesystem;

namespace {

std::string find_bin() {
  if (const char* env = std::getenv("ORCHARD_PG_BIN")) return env;
  for (int v = 17; v >= 12; --v) {
    std::string d = fmt::format("/usr/lib/postgresql/{}/bin", v);
    if (fs::exists(d + "/initdb")) return d;
  }
  return "";
}

std::unique_ptr<PgServer> g_server;

}  // namespace

PgServer* PgServer::shared(std::string* why_not) {
  static bool tried = false;
  static std::string failure;
  if (tried) {
    *why_not = failure;
    return g_server.get();
  }
  tried = true;
  std::string bin = find_bin();
  if (bin.empty()) {
    *why_not = failure = "PostgreSQL server binaries not found (install postgresql or set ORCHARD_PG_BIN)";
    return nullptr;
  }
  std::unique_ptr<PgServer> s(new PgServer());
  s->bin_ = bin;
  char tmpl[] = "/tmp/orchard-pg-XXXXXX";
  s->dir_ = ::mkdtemp(tmpl);
  std::string runas;
  if (::geteuid() == 0) {
    passwd* pw = ::getpwnam("postgres");
    if (!pw) {
      *why_not = failure = "running as root and there is no 'postgres' user to run the server as";
      return nullptr;
    }
    if (::chown(s->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      *why_not = failure = "cannot chown the PostgreSQL data directory";
      return nullptr;
    }
    runas = "runuser -u postgres -- ";
  }
  s->port_ = orchard::testing::free_ports();
  std::string data = s->dir_ + "/data";
  std::string cmd = fmt::format("{}{}/initdb -D {} -U postgres --auth=trust -E UTF8 >{}/initdb.log 2>&1", runas,
                                bin, data, s->dir_);
  if (std::system(cmd.c_str()) != 0) {
    *why_not = failure = "initdb failed: see " + s->dir_ + "/initdb.log";
    return nullptr;
  }
  // Unix sockets go into the temp dir too, so nothing touches /var/run/postgresql.
  cmd = fmt::format("{}{}/pg_ctl -D {} -l {}/server.log -w -t 60 -o \"-p {} -k {} -c listen_addresses=127.0.0.1 "
                    "-c fsync=off -c max_connections=200\" start >/dev/null 2>&1",
                    runas, bin, data, s->dir_, s->port_, s->dir_);
  if (std::system(cmd.c_str()) != 0) {
    *why_not = failure = "pg_ctl start failed: see " + s->dir_ + "/server.log";
    return nullptr;
  }
  s->user_ = runas;
  g_server = std::move(s);
  return g_server.get();
}

std::string PgServer::new_database() {
  std::string name = fmt::format("t{}_{}", ::getpid(), next_db_++);
  auto admin = open_postgres(fmt::format("postgresql://postgres@127.0.0.1:{}/postgres", port_));
  admin->exec("CREATE DATABASE " + name);
  return fmt::format("postgresql://postgres@127.0.0.1:{}/{}", port_, name);
}

PgServer::~PgServer() {
  std::string cmd = fmt::format("{}{}/pg_ctl -D {}/data -m immediate -w -t 30 stop >/dev/null 2>&1", user_, bin_, dir_);
  if (std::system(cmd.c_str()) == 0) fs::remove_all(dir_);
}

}  // namespace orchard::network::testing

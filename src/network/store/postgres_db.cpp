// PostgreSQL backend over libpq: statements prepared once per SQL text, parameters sent as text
// (the server casts them to the column types), results converted by column type.
#include <libpq-fe.h>
#include <poll.h>

#include <fmt/format.h>

#include <string>
#include <unordered_map>

#include "core/error.h"
#include "network/store/db.h"

namespace orchard::network {
namespace {

// Type OIDs from pg_type.h (stable across PostgreSQL versions).
constexpr Oid kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kFloat4Oid = 700, kFloat8Oid = 701;

std::string redact(const std::string& url) {
  // postgresql://user:password@host/db: never print the password.
  auto at = url.find('@'), colon = url.find(':', url.find("://") + 3);
  if (at == std::string::npos || colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon) + ":***" + url.substr(at);
}

PGconn* connect(const std::string& url) {
  // connect_timeout bounds the wait on the server (seconds), as every network wait must be.
  std::string conninfo = url + (url.find('?') == std::string::npos ? "?" : "&") + "connect_timeout=10";
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(conn);
    PQfinish(conn);
    throw Error(error_message("network", "cannot connect to PostgreSQL at {}: {}", redact(url), msg));
  }
  return conn;
}

// Runs one parameterless statement that must succeed.
void run_plain(PGconn* conn, const std::string& sql) {
  PGresult* res = PQexec(conn, sql.c_str());
  const auto st = PQresultStatus(res);
  std::string msg = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? "" : PQerrorMessage(conn);
  PQclear(res);
  if (!msg.empty()) throw Error(error_message("network", "PostgreSQL: '{}': {}", sql, msg));
}

class PostgresDb final : public Db {
 public:
  explicit PostgresDb(const std::string& url) {
    conn_ = connect(url);
    exec("SET client_min_messages TO WARNING", {});
    // A statement stuck on a lock or a dead server ends after this, never hangs the coordinator.
    exec("SET statement_timeout = 30000", {});
  }
  ~PostgresDb() override { PQfinish(conn_); }

  int64_t exec(std::string_view sql, const std::vector<Value>& params) override {
    PGresult* res = run(sql, params);
    const char* n = PQcmdTuples(res);
    int64_t changed = n && *n ? std::stoll(n) : 0;
    PQclear(res);
    return changed;
  }

  std::vector<Row> query(std::string_view sql, const std::vector<Value>& params) override {
    PGresult* res = run(sql, params);
    std::vector<Row> rows;
    const int nr = PQntuples(res), nc = PQnfields(res);
    rows.reserve(nr);
    for (int r = 0; r < nr; ++r) {
      Row row;
      row.cols.reserve(nc);
      for (int c = 0; c < nc; ++c) {
        if (PQgetisnull(res, r, c)) {
          row.cols.emplace_back(nullptr);
          continue;
        }
        const char* text = PQgetvalue(res, r, c);
        const Oid type = PQftype(res, c);
        if (type == kInt8Oid || type == kInt4Oid || type == kInt2Oid) row.cols.emplace_back(int64_t{std::stoll(text)});
        else if (type == kFloat8Oid || type == kFloat4Oid) row.cols.emplace_back(std::stod(text));
        else row.cols.emplace_back(std::string(text, static_cast<size_t>(PQgetlength(res, r, c))));
      }
      rows.push_back(std::move(row));
    }
    PQclear(res);
    return rows;
  }

  void begin() override { exec("BEGIN", {}); }
  void commit() override { exec("COMMIT", {}); }
  void rollback() noexcept override { PQclear(PQexec(conn_, "ROLLBACK")); }
  std::string_view backend() const override { return "postgres"; }

 private:
  PGresult* run(std::string_view sql, const std::vector<Value>& params) {
    std::string key(sql);
    auto it = prepared_.find(key);
    if (it == prepared_.end()) {
      std::string name = fmt::format("s{}", prepared_.size());
      PGresult* res = PQprepare(conn_, name.c_str(), key.c_str(), 0, nullptr);
      check(res, sql);
      PQclear(res);
      it = prepared_.emplace(key, name).first;
    }
    std::vector<std::string> text(params.size());
    std::vector<const char*> ptrs(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& v = params[i];
      if (auto p = std::get_if<int64_t>(&v)) text[i] = std::to_string(*p);
      else if (auto p = std::get_if<double>(&v)) text[i] = fmt::format("{}", *p);  // shortest exact form
      else if (auto p = std::get_if<std::string>(&v)) text[i] = *p;
      ptrs[i] = std::holds_alternative<std::nullptr_t>(v) ? nullptr : text[i].c_str();
    }
    PGresult* res = PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()), ptrs.data(), nullptr,
                                   nullptr, 0);
    check(res, sql);
    return res;
  }

  void check(PGresult* res, std::string_view sql) {
    auto st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return;
    std::string msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn_);
    PQclear(res);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    throw Error(error_message("network", "PostgreSQL: '{}': {}", sql, msg));
  }

  PGconn* conn_ = nullptr;
  std::unordered_map<std::string, std::string> prepared_;
};

class PostgresListener final : public Listener {
 public:
  PostgresListener(const std::string& url, const std::string& channel) : conn_(connect(url)) {
    try {
      run_plain(conn_, "SET client_min_messages TO WARNING");
      char* quoted = PQescapeIdentifier(conn_, channel.data(), channel.size());
      if (!quoted) throw Error(error_message("network", "PostgreSQL: bad channel name '{}'", channel));
      std::string sql = std::string("LISTEN ") + quoted;
      PQfreemem(quoted);
      run_plain(conn_, sql);
    } catch (...) {
      PQfinish(conn_);
      throw;
    }
  }
  ~PostgresListener() override { PQfinish(conn_); }

  bool try_lock(int64_t key) override {
    std::string sql = fmt::format("SELECT pg_try_advisory_lock({})", key);
    PGresult* res = PQexec(conn_, sql.c_str());
    const bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    const bool got = ok && PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!ok) lost();
    return got;
  }

  std::vector<std::string> wait(std::chrono::milliseconds timeout) override {
    std::vector<std::string> out;
    take(out);
    if (!out.empty()) return out;
    pollfd p{PQsocket(conn_), POLLIN, 0};
    if (p.fd < 0) lost();
    if (::poll(&p, 1, static_cast<int>(timeout.count())) > 0) take(out);
    return out;
  }

 private:
  void take(std::vector<std::string>& out) {
    if (!PQconsumeInput(conn_)) lost();
    while (PGnotify* n = PQnotifies(conn_)) {
      out.emplace_back(n->extra);
      PQfreemem(n);
    }
  }

  [[noreturn]] void lost() {
    throw Error(error_message("network", "PostgreSQL listening session lost: {}", PQerrorMessage(conn_)));
  }

  PGconn* conn_;
};

}  // namespace

std::unique_ptr<Listener> open_listener(const std::string& url, const std::string& channel) {
  return std::make_unique<PostgresListener>(url, channel);
}

std::unique_ptr<Db> open_postgres(const std::string& url) { return std::make_unique<PostgresDb>(url); }
bool postgres_available() { return true; }

}  // namespace orchard::network

// PostgreSQL backend over libpq: statements prepared once per SQL text, parameters sent as text
// (the server casts them to the column types), results converted by column type.
#include <libpq-fe.h>

#include <fmt/format.h>

#include <string>
#include <unordered_map>

#include "core/error.h"
#include "network/store/db.h"

namespace orchard::network {
namespace {

// Type OIDs from pg_type.h (stable across PostgreSQL versions).
constexpr Oid kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23, kFloat4Oid = 700, kFloat8Oid = 701;

class PostgresDb final : public Db {
 public:
  explicit PostgresDb(const std::string& url) {
    // connect_timeout bounds the wait on the server (seconds), as every network wait must be.
    std::string conninfo = url + (url.find('?') == std::string::npos ? "?" : "&") + "connect_timeout=10";
    conn_ = PQconnectdb(conninfo.c_str());
    if (PQstatus(conn_) != CONNECTION_OK) {
      std::string msg = PQerrorMessage(conn_);
      PQfinish(conn_);
      throw Error(error_message("network", "cannot connect to PostgreSQL at {}: {}", redact(url), msg));
    }
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
  static std::string redact(const std::string& url) {
    // postgresql://user:password@host/db: never print the password.
    auto at = url.find('@'), colon = url.find(':', url.find("://") + 3);
    if (at == std::string::npos || colon == std::string::npos || colon > at) return url;
    return url.substr(0, colon) + ":***" + url.substr(at);
  }

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

}  // namespace

std::unique_ptr<Db> open_postgres(const std::string& url) { return std::make_unique<PostgresDb>(url); }
bool postgres_available() { return true; }

}  // namespace orchard::network

// SQLite backend: WAL journal (readers never block the writer), prepared statements cached per
// SQL text, "$N" parameters bound by name so the SQL is the same as PostgreSQL's.
#include <sqlite3.h>

#include <string>
#include <unordered_map>

#include "core/error.h"
#include "network/store/db.h"

namespace orchard::network {
namespace {

// A lock held by another process (the CLI adding a key while the coordinator runs) is waited
// for this long before the statement fails.
constexpr int kBusyTimeoutMs = 5000;

class SqliteDb final : public Db {
 public:
  explicit SqliteDb(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      throw Error(error_message("network", "cannot open SQLite database '{}': {}", path, msg));
    }
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    // NORMAL synchronous under WAL survives a killed process (the case the coordinator must
    // survive); only an OS crash can lose the last commits.
    run_plain("PRAGMA journal_mode=WAL");
    run_plain("PRAGMA synchronous=NORMAL");
  }
  ~SqliteDb() override {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  int64_t exec(std::string_view sql, const std::vector<Value>& params) override {
    sqlite3_stmt* stmt = prepare(sql, params);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    finish(stmt, rc, sql);
    return sqlite3_changes(db_);
  }

  std::vector<Row> query(std::string_view sql, const std::vector<Value>& params) override {
    sqlite3_stmt* stmt = prepare(sql, params);
    std::vector<Row> rows;
    int rc;
    const int n = sqlite3_column_count(stmt);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      Row row;
      row.cols.reserve(n);
      for (int c = 0; c < n; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER: row.cols.emplace_back(static_cast<int64_t>(sqlite3_column_int64(stmt, c))); break;
          case SQLITE_FLOAT: row.cols.emplace_back(sqlite3_column_double(stmt, c)); break;
          case SQLITE_NULL: row.cols.emplace_back(nullptr); break;
          default:
            row.cols.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, c)),
                                              static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
        }
      }
      rows.push_back(std::move(row));
    }
    finish(stmt, rc, sql);
    return rows;
  }

  void begin() override { run_plain("BEGIN IMMEDIATE"); }
  void commit() override { run_plain("COMMIT"); }
  void rollback() noexcept override { sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr); }
  std::string_view backend() const override { return "sqlite"; }

 private:
  void run_plain(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      throw Error(error_message("network", "SQLite: {}: {}", sql, msg));
    }
  }

  sqlite3_stmt* prepare(std::string_view sql, const std::vector<Value>& params) {
    auto it = cache_.find(std::string(sql));
    sqlite3_stmt* stmt;
    if (it != cache_.end()) {
      stmt = it->second;
    } else {
      if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK)
        throw Error(error_message("network", "SQLite cannot prepare '{}': {}", sql, sqlite3_errmsg(db_)));
      cache_.emplace(std::string(sql), stmt);
    }
    const int n = sqlite3_bind_parameter_count(stmt);
    for (int i = 1; i <= n; ++i) {
      // "$3" names params[2]; SQLite numbers parameters by first appearance, not by name.
      const char* name = sqlite3_bind_parameter_name(stmt, i);
      size_t k = name && name[0] == '$' ? std::stoul(name + 1) : static_cast<size_t>(i);
      if (k == 0 || k > params.size())
        throw Error(error_message("network", "SQL '{}' uses parameter {} of {}", sql, k, params.size()));
      const Value& v = params[k - 1];
      if (auto p = std::get_if<int64_t>(&v)) sqlite3_bind_int64(stmt, i, *p);
      else if (auto p = std::get_if<double>(&v)) sqlite3_bind_double(stmt, i, *p);
      else if (auto p = std::get_if<std::string>(&v))
        sqlite3_bind_text(stmt, i, p->data(), static_cast<int>(p->size()), SQLITE_TRANSIENT);
      else sqlite3_bind_null(stmt, i);
    }
    return stmt;
  }

  void finish(sqlite3_stmt* stmt, int rc, std::string_view sql) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (rc != SQLITE_DONE) throw Error(error_message("network", "SQLite: '{}': {}", sql, sqlite3_errmsg(db_)));
  }

  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace

std::unique_ptr<Db> open_sqlite(const std::string& path) { return std::make_unique<SqliteDb>(path); }

}  // namespace orchard::network

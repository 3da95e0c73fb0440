#include "apps/orchard/cluster_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace orchard::app {

std::string read_secret_file(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw Error(error_message("cluster", "--secret-file {}: cannot read it ({})", path, std::strerror(errno)));
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw Error(error_message("cluster", "--secret-file {}: cannot read it ({})", path, std::strerror(error)));
  // `echo secret > file` and editors end the file with a line break, which is no part of it.
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty())
    throw Error(error_message("cluster", "--secret-file {} is empty: it must hold the cluster's secret (what --secret would take)",
                              path));
  return text;
}

void add_cluster_identity_flags(CLI::App* cmd, std::string& cluster, std::string& secret, const std::string& secret_help) {
  if (const char* c = std::getenv("ORCHARD_CLUSTER")) cluster = c;
  if (const char* s = std::getenv("ORCHARD_CLUSTER_SECRET")) secret = s;
  cmd->add_option("--cluster", cluster, "Cluster name (env ORCHARD_CLUSTER)")->capture_default_str();
  CLI::Option* given = cmd->add_option("--secret", secret, secret_help + " (env ORCHARD_CLUSTER_SECRET)");
  cmd->add_option_function<std::string>(
         "--secret-file", [&secret](const std::string& path) { secret = read_secret_file(path); },
         "A file holding the cluster secret, instead of --secret (kept out of the command line)")
      ->excludes(given);
}

}  // namespace orchard::app

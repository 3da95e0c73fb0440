#include "serve/cluster_page_routes.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "cluster/cluster_page.h"
#include "cluster/cluster_status.h"
#include "serve/web_files.h"

namespace orchard::serve {

void mount_cluster_page(httplib::Server& server, std::function<cluster::Topology()> topology) {
  server.Get("/cluster.html", [](const httplib::Request& req, httplib::Response& res) {
    web::send_file(req, res, *web::find_file(cluster::cluster_page_files(), "index.html"));
  });
  server.Get(R"(/(assets/[A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const core::EmbeddedFile* file = web::find_file(cluster::cluster_page_files(), req.matches[1].str());
    if (file == nullptr) {
      res.status = 404;
      return;
    }
    web::send_file(req, res, *file);
  });
  server.Get("/cluster", [topology = std::move(topology)](const httplib::Request& req, httplib::Response& res) {
    const size_t q = req.target.find('?');
    const auto [status, body] = cluster::cluster_status_answer(q == std::string::npos ? "" : req.target.substr(q + 1), topology);
    res.status = status;
    res.set_content(body.dump(), "application/json");
  });
}

bool is_cluster_page_path(std::string_view path) {
  return path == "/cluster.html" || path.starts_with("/assets/");
}

}  // namespace orchard::serve

#pragma once
// The cluster page (web/cluster, cluster/cluster_page.h) on `orchard serve`'s port, beside the chat
// page: GET /cluster.html the page, GET /assets/<file> its scripts and styles (the chat page's are
// under /chat/assets, so the two never collide), GET /cluster[?model=PRESET] the same JSON an
// agent answers (cluster/cluster_status.h). The page's files need no API key, like the chat
// page's; its JSON wants one when the server has keys (it names the machines and their
// addresses, which a server open to the internet should not tell anyone).
#include <functional>
#include <string_view>

#include "cluster/topology.h"

namespace httplib {
class Server;
}

namespace orchard::serve {

// `topology` is asked once per /cluster request, on the request's thread.
void mount_cluster_page(httplib::Server& server, std::function<cluster::Topology()> topology);

// Whether `path` is one of the page's files (not its JSON), which need no API key.
bool is_cluster_page_path(std::string_view path);

}  // namespace orchard::serve

// fusetune_e2e_server: runs the real Server class (service/server) as its own process, so
// end-to-end tests can SIGKILL and restart it. Writes the bound gRPC port to --port-file
// once serving (atomically: written to a temporary file, then renamed). SIGTERM/SIGINT shut
// it down cleanly.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "fusetune/service/server.h"

int main(int argc, char** argv) {
  CLI::App app{"fusetune end-to-end test server (the Server class in a process)"};
  fusetune::ServerOptions o;
  std::string port_file;
  app.add_option("--listen", o.listen_address, "host:port (port 0 = ephemeral)");
  app.add_option("--db", o.db_path, "SQLite database")->required();
  app.add_option("--token", o.token, "shared token")->required();
  app.add_option("--lease-ms", o.lease_ms, "lease length");
  app.add_option("--heartbeat-ms", o.heartbeat_ms, "heartbeat period told to workers");
  app.add_option("--refresh-ms", o.refresh_ms, "lease expiry / snapshot refresh period");
  app.add_option("--port-file", port_file, "where to write the bound port")->required();
  CLI11_PARSE(app, argc, argv);
  o.open_reads = true;
  o.metrics_address = "";

  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto server = fusetune::Server::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  {
    std::ofstream out(port_file + ".tmp");
    out << (*server)->port() << "\n";
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  std::fprintf(stderr, "serving on port %d, db %s\n", (*server)->port(), o.db_path.c_str());
  int sig = 0;
  sigwait(&stop, &sig);
  (*server)->Shutdown();
  return 0;
}

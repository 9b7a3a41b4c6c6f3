// --network allow=DOMAIN,...: the egress proxy started for one sandbox, reachable at 127.0.0.1:3128 inside it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/sandbox.h"
#include "src/netproxy/egress_proxy.h"

namespace nsbox::cli {

struct NetworkAllowSpec {
  std::vector<std::string> domains;
  uint64_t byte_limit = 0;
  bool allow_private_addresses = false;
};

// Starts the proxy inside the child's network namespace before the program runs; reports refusals and traffic.
class EgressProxyHooks : public SandboxHooks {
 public:
  explicit EgressProxyHooks(NetworkAllowSpec spec) : spec_(std::move(spec)) {}
  ~EgressProxyHooks() override;
  Status OnChildCreated(pid_t child) override;
  void OnFinished(Result& result) override;
  // For sessions, whose proxy outlives each exec: what it refused and moved so far, and a result's share of it.
  std::map<std::string, uint64_t> DeniedHosts() const;
  void ReportSince(const std::map<std::string, uint64_t>& denied_before, Result& result) const;
  // For --cases (nsbox run and nsbox batch): the whole run's refusals and traffic as the report's "denied_hosts" and
  // "network", in a result's form. Stops the proxy.
  void AddToReport(nlohmann::json& report);

 private:
  NetworkAllowSpec spec_;
  std::unique_ptr<netproxy::EgressProxy> proxy_;
};

}  // namespace nsbox::cli

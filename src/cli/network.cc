// --network allow=: the egress proxy's life is the sandbox's life; its refusals and byte counts go into the result.
#include "src/cli/network.h"

#include <cstdlib>

#include <fmt/format.h>

#include "nsbox_config.h"
#include "sandbox/result_json.h"
#include "src/netproxy/listen.h"

namespace nsbox::cli {

EgressProxyHooks::~EgressProxyHooks() {
  if (proxy_) proxy_->Stop();
}

Status EgressProxyHooks::OnChildCreated(pid_t child) {
  auto fd = netproxy::ListenInNetns(child, netproxy::kSandboxProxyPort);
  if (!fd.ok()) return fd.status().Wrap("starting the egress proxy inside the sandbox's network namespace");
  netproxy::ProxyConfig config;
  config.allowed_domains = spec_.domains;
  config.byte_limit = spec_.byte_limit;
  config.allow_private_addresses = spec_.allow_private_addresses;
  // Test-only name overrides ("allowed.test=127.0.0.1,..."): they replace DNS, and their answers still pass
  // the address check, so a loopback answer still needs --dangerously-allow-private-addresses. Read by a build-tree
  // binary only (NSBOX_TEST_HOOKS): a packaged nsbox resolves names with DNS whatever its environment says.
  const char* overrides = NSBOX_TEST_HOOKS ? std::getenv("NSBOX_TEST_RESOLVER_OVERRIDE") : nullptr;
  if (overrides && *overrides) {
    std::string spec = overrides;
    size_t start = 0;
    while (start < spec.size()) {
      size_t end = spec.find(',', start);
      if (end == std::string::npos) end = spec.size();
      std::string item = spec.substr(start, end - start);
      auto eq = item.find('=');
      if (eq == std::string::npos)
        return Status::Error(fmt::format("NSBOX_TEST_RESOLVER_OVERRIDE: '{}' is not HOST=IP", item));
      config.resolver_override[item.substr(0, eq)] = item.substr(eq + 1);
      start = end + 1;
    }
  }
  auto proxy = netproxy::EgressProxy::Start(std::move(config), std::move(*fd));
  if (!proxy.ok()) return proxy.status().Wrap("starting the egress proxy");
  proxy_ = std::move(*proxy);
  return OkStatus();
}

std::map<std::string, uint64_t> EgressProxyHooks::DeniedHosts() const {
  return proxy_ ? proxy_->DeniedHosts() : std::map<std::string, uint64_t>{};
}

void EgressProxyHooks::ReportSince(const std::map<std::string, uint64_t>& denied_before, Result& result) const {
  if (!proxy_) return;
  for (const auto& [host, count] : proxy_->DeniedHosts()) {
    auto it = denied_before.find(host);
    uint64_t before = it == denied_before.end() ? 0 : it->second;
    if (count > before) result.denied_hosts[host] = count - before;
  }
  SetExtra(result, "network", {{"mode", "allow"},
                                {"allowed_domains", spec_.domains},
                                {"session_bytes_in", proxy_->BytesIn()},
                                {"session_bytes_out", proxy_->BytesOut()},
                                {"byte_limit", spec_.byte_limit},
                                {"limit_reached", proxy_->LimitReached()}});
}

void EgressProxyHooks::OnFinished(Result& result) {
  if (!proxy_) return;
  proxy_->Stop();
  result.denied_hosts = proxy_->DeniedHosts();
  SetExtra(result, "network", {{"mode", "allow"},
                                {"allowed_domains", spec_.domains},
                                {"bytes_in", proxy_->BytesIn()},
                                {"bytes_out", proxy_->BytesOut()},
                                {"byte_limit", spec_.byte_limit},
                                {"limit_reached", proxy_->LimitReached()}});
}

void EgressProxyHooks::AddToReport(nlohmann::json& report) {
  Result result;
  OnFinished(result);
  nlohmann::json shown = ResultToJson(result);
  report["denied_hosts"] = shown["denied_hosts"];
  if (shown.contains("network")) report["network"] = shown["network"];
}

}  // namespace nsbox::cli

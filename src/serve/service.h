// Service: the API's routes (docs/api.md) over Sandboxes: who the client is (the socket's peer uid, or a bearer token
// on TCP), what it may touch (its own sandboxes only), and the error format.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>

#include "src/serve/api_error.h"
#include "src/serve/http_server.h"
#include "src/serve/sandboxes.h"

namespace nsbox::serve {

struct AccessConfig {
  std::set<uid_t> allowed_uids;                 // on the Unix socket
  std::map<std::string, std::string> tokens;    // token -> client name, on TCP
  std::string openapi_document;                 // served at GET /v1/openapi.json
};

// Reads a token file: "name:token" per line, or a bare token (named "default"); # comments. Errors name the line.
StatusOr<std::map<std::string, std::string>> ReadTokenFile(const std::string& path);

class Service {
 public:
  Service(Sandboxes& sandboxes, AccessConfig access) : sandboxes_(sandboxes), access_(std::move(access)) {}
  HttpResponse Handle(const HttpRequest& request);
  // Before a request's body is read: its refusal when the client may not use this server (no or a wrong token, a
  // uid not allowed), else nullopt.
  std::optional<HttpResponse> Admit(const HttpRequest& head);
  void SetShuttingDown() { shutting_down_ = true; }
  static HttpResponse ErrorResponse(int status, const std::string& code, const std::string& message);
  static HttpResponse ErrorResponse(const ApiError& error);  // with its extra fields and headers

 private:
  std::string Identify(const HttpRequest& request);  // throws 401/403
  HttpResponse Route(const HttpRequest& request, const std::string& owner);
  HttpResponse Exec(const HttpRequest& request, const std::shared_ptr<Sandbox>& sandbox, const ExecSpec& exec,
                    std::function<void()> after = {});

  Sandboxes& sandboxes_;
  AccessConfig access_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace nsbox::serve

// Service: authentication, routing and the error format of the API; the work is Sandboxes'.
#include "src/serve/service.h"

#include <strings.h>

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sandbox/base/bounded_json.h"
#include "sandbox/base/fs.h"
#include "src/serve/api_error.h"

namespace nsbox::serve {
namespace {

using json = nlohmann::json;

HttpResponse Json(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

json ParseBody(const HttpRequest& request) {
  if (request.body.empty()) return json::object();
  try {
    return ParseBoundedJson(request.body);
  } catch (const json::parse_error& e) {
    throw BadRequest(fmt::format("malformed JSON: {}", JsonErrorText(e)));
  } catch (const JsonRefused& e) {
    throw BadRequest(e.what());
  }
}

// Constant time, so that a token is not guessed a byte at a time.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();
  return parts;
}

bool Flag(const HttpRequest& request, const std::string& name) {
  auto it = request.query.find(name);
  return it != request.query.end() && (it->second == "true" || it->second == "1" || it->second.empty());
}

// A query parameter the route does not take, or a flag that is neither true nor false, is a 400: a typo
// (`?strem=true`, `?stream=yes`) would otherwise be served as if it were not there.
void CheckQuery(const HttpRequest& request, std::initializer_list<const char*> params,
                std::initializer_list<const char*> flags) {
  for (const auto& [name, value] : request.query) {
    const bool is_flag = std::find(flags.begin(), flags.end(), name) != flags.end();
    if (!is_flag && std::find(params.begin(), params.end(), name) == params.end()) {
      std::vector<std::string> taken(params.begin(), params.end());
      taken.insert(taken.end(), flags.begin(), flags.end());
      throw BadRequest(fmt::format("unknown query parameter '{}' ({} {} takes {})", name, request.method,
                                   request.path, taken.empty() ? "none" : fmt::format("{}", fmt::join(taken, ", "))));
    }
    if (is_flag && value != "true" && value != "1" && !value.empty() && value != "false" && value != "0")
      throw BadRequest(fmt::format("query parameter '{}' is '{}': give true, 1, false or 0", name, value));
  }
}

// The methods a path takes, by its shape alone: a wrong method on another client's sandbox tells nothing of it. Empty
// for a path that is no route. Every GET route answers HEAD too (libmicrohttpd sends its headers, not its body).
std::vector<std::string> MethodsOf(const std::vector<std::string>& parts) {
  if (parts.size() < 2 || parts[0] != "v1") return {};
  const std::string& resource = parts[1];
  if (parts.size() == 2) {
    if (resource == "healthz" || resource == "readyz" || resource == "openapi.json" || resource == "capacity")
      return {"GET", "HEAD"};
    if (resource == "run") return {"POST"};
    if (resource == "sandboxes") return {"GET", "HEAD", "POST"};
    return {};
  }
  if (resource != "sandboxes") return {};
  if (parts.size() == 3) return {"GET", "HEAD", "DELETE"};
  if (parts.size() == 4 && parts[3] == "exec") return {"POST"};
  if (parts.size() == 4 && parts[3] == "files") return {"GET", "HEAD", "PUT", "DELETE"};
  return {};
}

// A liveness or readiness probe: answered without a token.
bool IsProbe(const HttpRequest& request) {
  return (request.method == "GET" || request.method == "HEAD") &&
         (request.path == "/v1/healthz" || request.path == "/v1/readyz");
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ReadTokenFile(const std::string& path) {
  auto text = ReadFile(path, 1 << 20);
  if (!text.ok()) return text.status().Wrap("--token-file");
  std::map<std::string, std::string> tokens;
  std::map<std::string, size_t> token_lines;
  for (const auto& [line_number, text_line] : MeaningfulLines(*text)) {
    std::string line = text_line;
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    std::string name = "default", token = line;
    if (auto colon = line.find(':'); colon != std::string::npos) {
      name = line.substr(0, colon);
      token = line.substr(colon + 1);
    }
    if (name.empty() || token.size() < 16)
      return Status::Error(fmt::format("--token-file {} line {}: expected NAME:TOKEN or TOKEN, a token of at least 16 "
                                       "characters", path, line_number));
    // Two clients with one token would be one client (the later name silently winning), and a bare token is the
    // client "default": a line naming "default" would share its sandboxes.
    if (tokens.count(token))
      return Status::Error(fmt::format("--token-file {} line {}: this token is on line {} already", path, line_number,
                                       token_lines[token]));
    if (name == "default" && line.find(':') != std::string::npos)
      return Status::Error(
          fmt::format("--token-file {} line {}: the name 'default' is the bare tokens' (give "
                      "another name)",
                      path, line_number));
    tokens[token] = name;
    token_lines[token] = line_number;
  }
  if (tokens.empty()) return Status::Error(fmt::format("--token-file {}: no token in it", path));
  return tokens;
}

HttpResponse Service::ErrorResponse(int status, const std::string& code, const std::string& message) {
  return Json(status, {{"error", {{"code", code}, {"message", message}}}});
}

HttpResponse Service::ErrorResponse(const ApiError& e) {
  HttpResponse r = ErrorResponse(e.status, e.code, e.what());
  if (e.extra.is_object()) {
    json body = json::parse(r.body);
    for (const auto& [k, v] : e.extra.items()) body[k] = v;
    r.body = body.dump();
  }
  // RFC 9110 11.6.1: a 401 names the scheme it takes.
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

std::string Service::Identify(const HttpRequest& request) {
  if (request.over_unix_socket) {
    if (!request.peer_uid) throw ApiError(403, "forbidden", "the client's uid could not be read (SO_PEERCRED)");
    if (!access_.allowed_uids.count(*request.peer_uid))
      throw ApiError(403, "forbidden", fmt::format("uid {} may not use this server", *request.peer_uid));
    return fmt::format("uid:{}", *request.peer_uid);
  }
  std::string auth = request.header("authorization");
  // The scheme's name is case-insensitive (RFC 9110 11.1).
  if (auth.size() < 7 || strncasecmp(auth.c_str(), "Bearer ", 7) != 0)
    throw ApiError(401, "unauthorized", "a bearer token is required (Authorization: Bearer TOKEN)");
  std::string token = auth.substr(7);
  for (const auto& [known, name] : access_.tokens)
    if (SameToken(token, known)) return "token:" + name;
  throw ApiError(401, "unauthorized", "the bearer token is not one of this server's");
}

std::optional<HttpResponse> Service::Admit(const HttpRequest& head) {
  if (IsProbe(head)) {
    // A probe needs no token, so its body would be read for anyone: it takes none, and one is dropped unread.
    const std::string length = head.header("content-length");
    if (!head.header("transfer-encoding").empty() || (!length.empty() && length != "0"))
      return ErrorResponse(400, "bad_request", fmt::format("{} {} takes no body", head.method, head.path));
    return std::nullopt;
  }
  try {
    Identify(head);
    return std::nullopt;
  } catch (const ApiError& e) {
    return ErrorResponse(e);
  }
}

HttpResponse Service::Handle(const HttpRequest& request) {
  try {
    // Liveness and readiness tell nothing about anyone's sandboxes: a load balancer's or kubelet's probe needs no
    // token.
    if (IsProbe(request)) return Route(request, "");
    std::string owner = Identify(request);
    return Route(request, owner);
  } catch (const ApiError& e) {
    return ErrorResponse(e);
  } catch (const json::exception& e) {
    return ErrorResponse(400, "bad_request", fmt::format("bad value: {}", JsonErrorText(e)));
  }
}

HttpResponse Service::Route(const HttpRequest& request, const std::string& owner) {
  const std::vector<std::string> parts = Split(request.path);
  auto no_route = [&] { return NotFound(fmt::format("no route {} {}", request.method, request.path)); };
  const std::vector<std::string> allowed = MethodsOf(parts);
  if (allowed.empty()) throw no_route();
  if (std::find(allowed.begin(), allowed.end(), request.method) == allowed.end()) {
    HttpResponse r = ErrorResponse(405, "method_not_allowed",
                                   fmt::format("{} takes {}, not {}", request.path, fmt::join(allowed, ", "),
                                               request.method.empty() ? "an empty method" : request.method));
    r.headers.emplace_back("Allow", fmt::format("{}", fmt::join(allowed, ", ")));
    return r;
  }
  // HEAD is routed as GET; libmicrohttpd leaves the body out.
  const std::string method = request.method == "HEAD" ? "GET" : request.method;
  const std::string& resource = parts[1];
  if (parts.size() == 2 && resource == "healthz" && method == "GET")
  {
    if (!shutting_down_) return Json(200, {{"status", "ok"}});
    return Json(503, {{"status", "shutting_down"},
                      {"error", {{"code", "unavailable"}, {"message", "the server is shutting down"}}}});
  }
  // Readiness: serving, and able to make sandboxes as far as the pool knows (a node whose engine cannot make one, say
  // without a usable cgroup, must leave a load balancer's rotation). The reason is in the log, not in this answer.
  if (parts.size() == 2 && resource == "readyz" && method == "GET") {
    if (shutting_down_)
      return Json(503, {{"status", "shutting_down"},
                        {"error", {{"code", "unavailable"}, {"message", "the server is shutting down"}}}});
    if (std::string failing = sandboxes_.FailingPoolTemplate(); !failing.empty())
      return Json(
          503,
          {{"status", "unable"},
           {"error",
            {{"code", "setup_failed"},
             {"message", fmt::format("the pool cannot make a '{}' sandbox (the server's log says why)", failing)}}}});
    return Json(200, {{"status", "ready"}});
  }
  if (parts.size() == 2 && resource == "openapi.json" && method == "GET") {
    if (access_.openapi_document.empty()) throw NotFound("the OpenAPI document (docs/openapi.json) is not installed");
    HttpResponse r;
    r.body = access_.openapi_document;
    return r;
  }
  // The probes and the document take any query (a load balancer's cache-buster); every other route only its own.
  const bool exec_route = (parts.size() == 2 && resource == "run") || (parts.size() == 4 && parts[3] == "exec");
  const bool files_route = parts.size() == 4 && parts[3] == "files";
  if (exec_route) CheckQuery(request, {}, {"stream"});
  else if (files_route) CheckQuery(request, {"path"}, {"list"});
  else CheckQuery(request, {}, {});
  if (parts.size() == 2 && resource == "capacity" && method == "GET") return Json(200, sandboxes_.Capacity(owner));
  if (shutting_down_ && method != "GET") throw ApiError(503, "unavailable", "the server is shutting down");

  if (parts.size() == 2 && resource == "run" && method == "POST") {
    json body = ParseBody(request);
    static const std::vector<std::string> kCreateFields = {"template", "network", "limits", "env", "idle_timeout",
                                                           "max_lifetime", "labels"};
    json create = json::object(), exec = json::object();
    if (!body.is_object()) throw BadRequest("the body must be a JSON object");
    for (const auto& [k, v] : body.items()) {
      if (std::find(kCreateFields.begin(), kCreateFields.end(), k) != kCreateFields.end() && k != "env") create[k] = v;
      if (std::find(kExecFields.begin(), kExecFields.end(), k) != kExecFields.end()) exec[k] = v;
      if (std::find(kCreateFields.begin(), kCreateFields.end(), k) == kCreateFields.end() &&
          std::find(kExecFields.begin(), kExecFields.end(), k) == kExecFields.end())
        throw BadRequest(fmt::format("unknown field '{}'", k));
    }
    SandboxSpec spec = ParseSandboxSpec(create, sandboxes_.config());
    ExecSpec exec_spec = ParseExecSpec(exec, sandboxes_.config());
    // An answer too large for the client's share is refused before a sandbox is made for it (PlanExec checks again,
    // with the compile step's output once the language is known).
    sandboxes_.CheckAnswerRoomShare(ExecAnswerRoom(exec_spec, false));
    if (request.body_taken) request.body_taken();
    auto sandbox = sandboxes_.Create(owner, spec);
    try {
      return Exec(request, sandbox, exec_spec, [this, sandbox] { sandboxes_.Remove(sandbox); });
    } catch (...) {
      sandboxes_.Remove(sandbox);
      throw;
    }
  }

  if (resource != "sandboxes") throw no_route();
  if (parts.size() == 2) {
    if (method == "POST") {
      auto sandbox = sandboxes_.Create(owner, ParseSandboxSpec(ParseBody(request), sandboxes_.config()));
      HttpResponse created = Json(201, sandbox->ToJson());
      // A client that gave up on its create never learns the id: the sandbox would hold its share until idle.
      created.undelivered = [this, sandbox] {
        const std::string why = "its creator went away before the answer";
        fmt::print(stderr, "nsbox serve: {} removed: {}\n", sandbox->id, why);
        sandboxes_.Remove(sandbox, why);
      };
      return created;
    }
    if (method == "GET") {
      json list = json::array();
      for (const auto& s : sandboxes_.List(owner)) list.push_back(s->ToJson());
      return Json(200, {{"sandboxes", list}});
    }
    throw no_route();
  }
  auto sandbox = sandboxes_.Find(owner, parts[2]);
  if (parts.size() == 3) {
    if (method == "GET") return Json(200, sandbox->ToJson());
    if (method == "DELETE") {
      sandboxes_.Remove(sandbox);
      HttpResponse r;
      r.status = 204;
      r.content_type.clear();
      return r;
    }
    throw no_route();
  }
  if (parts.size() == 4 && parts[3] == "exec" && method == "POST") {
    ExecSpec exec = ParseExecSpec(ParseBody(request), sandboxes_.config());
    if (request.body_taken) request.body_taken();
    return Exec(request, sandbox, exec);
  }
  if (parts.size() == 4 && parts[3] == "files") {
    auto path_it = request.query.find("path");
    std::string path = path_it == request.query.end() ? "" : path_it->second;
    if (method == "PUT") {
      uint64_t size = sandboxes_.WriteFile(sandbox, path, request.body);
      return Json(200, {{"path", "/workspace/" + WorkspacePath(path)}, {"size", size}});
    }
    if (method == "GET" && Flag(request, "list")) return Json(200, sandboxes_.ListFiles(sandbox, path));
    if (method == "GET") {
      HttpResponse r;
      r.content_type = "application/octet-stream";
      r.body = sandboxes_.ReadFile(sandbox, path, &r.hold);
      return r;
    }
    if (method == "DELETE") {
      sandboxes_.RemoveFile(sandbox, path);
      HttpResponse r;
      r.status = 204;
      r.content_type.clear();
      return r;
    }
  }
  throw no_route();
}

HttpResponse Service::Exec(const HttpRequest& request, const std::shared_ptr<Sandbox>& sandbox, const ExecSpec& exec,
                           std::function<void()> after) {
  // ?stream= says, when given; else an Accept of application/x-ndjson asks for the stream.
  const bool stream = request.query.count("stream")
                          ? Flag(request, "stream")
                          : request.header("accept").find("application/x-ndjson") != std::string::npos;
  cli::Program program = sandboxes_.PlanExec(*sandbox, exec);  // a bad request is a 400, streamed or not
  if (!stream) {
    std::shared_ptr<void> room;
    json result = sandboxes_.Exec(sandbox, exec, program, {}, request.client_gone, &room);
    if (after) after();
    HttpResponse r = Json(200, result);
    r.hold = std::move(room);  // the answer's room is given back once it has been sent
    return r;
  }
  HttpResponse r;
  r.content_type = "application/x-ndjson";
  Sandboxes* sandboxes = &sandboxes_;
  r.stream = [sandboxes, sandbox, exec, program = std::move(program), after](StreamSink& sink) {
    auto line = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; };
    // The answer's room is held until the stream has been sent (or its client is gone): the result line repeats the
    // output, and the queue holds up to 1 MiB of it unread; without the room a client that reads nothing let the
    // server hold any number of such streams.
    std::shared_ptr<void> room;
    try {
      json result = sandboxes->Exec(
          sandbox, exec, program,
          [&](int stream, const std::string& text) {
            return sink.Write(line({{"type", stream == 2 ? "stderr" : "stdout"}, {"data", text}}));
          },
          [&] { return sink.ClientGone(); }, &room);
      sink.KeepUntilSent(room);
      sink.Write(line({{"type", "result"}, {"result", result}}));
    } catch (const ApiError& e) {
      sink.Write(line({{"type", "error"}, {"error", {{"code", e.code}, {"message", e.what()}}}}));
    } catch (const std::exception& e) {
      sink.Write(line({{"type", "error"}, {"error", {{"code", "internal"}, {"message", e.what()}}}}));
    }
    if (after) after();
  };
  return r;
}

}  // namespace nsbox::serve

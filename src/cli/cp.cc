// `nsbox cp`: copies one regular file between the host and a session's /workspace, never following a link.
#include <fmt/format.h>

#include "sandbox/spec/units.h"
#include "src/cli/commands.h"
#include "src/session/state.h"
#include "src/session/workspace_copy.h"

namespace nsbox::cli {
namespace {

struct Endpoint {
  bool in_session = false;
  std::string session, path;
};

// SESSION:PATH when the part before the first ':' could be a session id or name; a host path otherwise (write
// ./a:b for a host file with a colon).
Endpoint ParseEndpoint(const std::string& text) {
  auto colon = text.find(':');
  if (colon != std::string::npos && colon > 0 && session::ValidSessionName(text.substr(0, colon)))
    return {true, text.substr(0, colon), text.substr(colon + 1)};
  return {false, "", text};
}

}  // namespace

void RegisterCp(CLI::App& app, ExitCode& exit_code) {
  auto* cp = app.add_subcommand("cp", "copy a regular file between the host and SESSION:PATH (in /workspace)");
  static std::string source, destination, max_size = "64M";
  cp->add_option("source", source, "host path or SESSION:PATH")->required();
  cp->add_option("destination", destination, "host path or SESSION:PATH")->required();
  cp->add_option("--max-size", max_size, "refuse files larger than this")->capture_default_str();
  cp->callback([&exit_code] {
    auto fail = [&](const Status& status) {
      fmt::print(stderr, "nsbox cp: {}\n", status.message());
      exit_code.value = kExitNsboxFailure;
    };
    auto limit = ParseSize(max_size);
    if (!limit.ok()) return fail(limit.status().Wrap("--max-size"));
    Endpoint from = ParseEndpoint(source), to = ParseEndpoint(destination);
    if (from.in_session == to.in_session)
      return fail(Status::Error("exactly one side must be SESSION:PATH (a path in the session's /workspace)"));
    const Endpoint& inside = from.in_session ? from : to;
    const Endpoint& outside = from.in_session ? to : from;
    if (outside.path.empty()) return fail(Status::Error("the host path is empty"));
    auto rel = session::WorkspaceRelativePath(inside.path);
    if (!rel.ok()) return fail(rel.status());
    auto found = session::FindSession(session::StateRoot(), inside.session);
    if (!found.ok()) return fail(found.status());
    UniqueFd workspace;
    auto answer = session::Request(*found, {{"op", "workspace"}}, {.received_fd = &workspace});
    if (!answer.ok()) return fail(answer.status());
    if (!workspace) return fail(Status::Error("the session sent no workspace descriptor"));
    StatusOr<uint64_t> copied = uint64_t{0};
    if (from.in_session) {
      copied = session::CopyOut(workspace.get(), *rel, outside.path, *limit);
    } else {
      copied = session::CopyIn(outside.path, workspace.get(), *rel, *limit, answer->value("sandbox_host_uid", 65534u),
                               answer->value("sandbox_host_gid", 65534u));
    }
    if (!copied.ok()) return fail(copied.status());
  });
}

}  // namespace nsbox::cli

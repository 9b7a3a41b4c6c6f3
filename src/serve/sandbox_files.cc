// Sandboxes' files: writing, reading, listing and removing files under a sandbox's /workspace for the API, with
// the session's uid and each refusal's HTTP status.
#include "src/serve/sandboxes.h"

#include <fmt/format.h>

#include "src/serve/api_error.h"
#include "src/session/workspace_copy.h"

namespace nsbox::serve {

using json = nlohmann::json;

namespace {
// A refusal of the workspace helpers: a missing file is 404, a link or a bad path 400, a full disk 413.
[[noreturn]] void ThrowFileError(const Status& status) {
  switch (status.kind()) {
    case ErrorKind::kNotFound:
      throw NotFound(status.message());
    case ErrorKind::kTooLarge:
      throw ApiError(413, "payload_too_large", status.message());
    case ErrorKind::kRefused:
      throw BadRequest(status.message());
    case ErrorKind::kConflict:
      throw ApiError(409, "conflict", status.message());
    case ErrorKind::kOther:
      break;
  }
  throw ApiError(500, "setup_failed", status.message());
}
}  // namespace

uint64_t Sandboxes::WriteFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path,
                              const std::string& data) {
  std::string rel = WorkspacePath(path);
  if (data.size() > config_.max_file_bytes)
    throw ApiError(413, "payload_too_large", fmt::format("the file is larger than {} bytes", config_.max_file_bytes));
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  auto written = session::WriteWorkspaceFile(workspace.get(), rel, data, uid, gid);
  if (!written.ok()) ThrowFileError(written.status());
  return *written;
}

std::string Sandboxes::ReadFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path,
                                std::shared_ptr<void>* room) {
  std::string rel = WorkspacePath(path);
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  // Room for the bytes before they are read: 16 clients reading a 64 MiB file each and reading no answer held a GiB.
  auto data = session::ReadWorkspaceFile(workspace.get(), rel, config_.max_file_bytes,
                                         [&](uint64_t size) { *room = ReserveAnswerRoom(size, sandbox->owner, {}); });
  if (!data.ok()) ThrowFileError(data.status());
  return std::move(*data);
}

json Sandboxes::ListFiles(const std::shared_ptr<Sandbox>& sandbox, const std::string& path) {
  std::string rel = path.empty() ? std::string() : WorkspacePath(path);
  while (rel.ends_with("/")) rel.pop_back();
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  auto listing = session::ListWorkspaceDir(workspace.get(), rel);
  if (!listing.ok()) ThrowFileError(listing.status());
  json out = json::array();
  bool truncated = listing->truncated;
  size_t answer_bytes = 0;
  for (const auto& e : listing->entries) {
    json entry = {{"name", e.name}, {"path", e.path}, {"type", e.type}, {"size", e.size}};
    if (!session::AppendListedFile(out, std::move(entry), kMaxListingBytes, &answer_bytes)) {
      truncated = true;
      break;
    }
  }
  json answer = {{"entries", out}};
  if (truncated) answer["truncated"] = true;
  return answer;
}

void Sandboxes::RemoveFile(const std::shared_ptr<Sandbox>& sandbox, const std::string& path) {
  std::string rel = WorkspacePath(path);
  uid_t uid;
  gid_t gid;
  UniqueFd workspace = OpenWorkspace(sandbox, &uid, &gid);
  if (Status s = session::RemoveWorkspacePath(workspace.get(), rel); !s.ok()) ThrowFileError(s);
}

}  // namespace nsbox::serve

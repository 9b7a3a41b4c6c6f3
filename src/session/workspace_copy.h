// Copies between the host and a session's /workspace that never follow a link, never leave the workspace and move
// regular files only.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/base/status.h"

namespace nsbox::session {

// "out.txt", "/workspace/out.txt" → "out.txt"; "" and "/workspace" → "" (the workspace itself). Refuses paths
// outside /workspace and "." or ".." components.
StatusOr<std::string> WorkspaceRelativePath(const std::string& path);

// Writes `data` as a new file in the directory `dir` (O_TMPFILE, named only once whole) and renames it over `name`:
// the old file, a link or a FIFO there is replaced, never followed, and a writer killed midway leaves nothing.
// uid/gid: its owner, or -1 to keep the caller's; `like`, when set, the file it replaces, whose mode (and owner, where
// allowed) it takes. `shown` names the file in errors.
StatusOr<uint64_t> WriteAndRename(int dir, const std::string& name, const std::string& data, uid_t uid, gid_t gid,
                                  const std::string& shown, const struct stat* like = nullptr);

// Copies the regular file `rel` under `workspace_fd` to `host_path` (a directory receives the file's name), written
// beside it and renamed over it with the old file's mode and owner, so that a copy cut short leaves the old file as it
// was (overwritten in place where a new file cannot take its place: other hard links, a directory not writable).
// Returns the bytes copied.
StatusOr<uint64_t> CopyOut(int workspace_fd, const std::string& rel, const std::string& host_path, uint64_t max_bytes);
// Copies the host file `host_path` to `rel` under `workspace_fd` (an existing directory or "" receives the file's
// name), owned by the sandbox user (host ids `uid`, `gid`), replaced atomically. Returns the bytes copied.
StatusOr<uint64_t> CopyIn(const std::string& host_path, int workspace_fd, const std::string& rel, uint64_t max_bytes,
                          uid_t uid, gid_t gid);

// The regular file `rel` under `workspace_fd`, whole, refused when larger than max_bytes.
// `before_read` (may be empty) is told the file's size before its bytes are read (the service makes room for them;
// it may throw); then no more than that is read, and a file that grew meanwhile is a conflict.
StatusOr<std::string> ReadWorkspaceFile(int workspace_fd, const std::string& rel, uint64_t max_bytes,
                                        const std::function<void(uint64_t size)>& before_read = {});
// Writes `data` to the file `rel` (parents made as needed), owned by the sandbox user, replaced atomically.
StatusOr<uint64_t> WriteWorkspaceFile(int workspace_fd, const std::string& rel, const std::string& data, uid_t uid,
                                      gid_t gid);

// How deep a file the service writes, and a directory it removes, may be: each level is a descriptor held open.
inline constexpr size_t kMaxWorkspaceDepth = 256;

// A file name need not be UTF-8, and JSON shows such a name with U+FFFD, which names no file. For a path that is not
// UTF-8: its bytes percent-encoded (RFC 3986: every byte outside A-Z a-z 0-9 - . _ ~ / as %XX), which a client sends
// back as ?path= unchanged, or decodes to the bytes. nullopt for a UTF-8 path.
std::optional<std::string> PercentEncodedIfNotUtf8(std::string_view path);

// Appends a listed file (`entry`, its "path" set) to `list`, with "path_encoded" when the path is not UTF-8. The
// sandbox names its files, and as JSON a name of control bytes is six times its length: `*bytes` counts the list as
// it will be sent, and an entry that would take it past max_bytes is left out (false: the list is cut there).
bool AppendListedFile(nlohmann::json& list, nlohmann::json entry, size_t max_bytes, size_t* bytes);

struct WorkspaceEntry {
  std::string name, path;  // path: /workspace/...
  std::string type;        // file, dir, symlink, other
  uint64_t size = 0;
};
struct WorkspaceListing {
  std::vector<WorkspaceEntry> entries;  // sorted by name
  bool truncated = false;               // the directory holds more than max_entries: these are some of them
};
// The directory `rel` ("" for the workspace); links are listed, never followed. At most max_entries are read: the
// sandbox's code can make millions of empty files, and the caller runs outside its limits.
StatusOr<WorkspaceListing> ListWorkspaceDir(int workspace_fd, const std::string& rel, size_t max_entries = 20000);
// Removes `rel`: a file or link, or a directory with everything in it; never follows a link.
Status RemoveWorkspacePath(int workspace_fd, const std::string& rel);

}  // namespace nsbox::session

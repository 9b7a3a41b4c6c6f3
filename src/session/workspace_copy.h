// Copies between the host and a session's /workspace that never follow a link, never leave the workspace and move
// regular files only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "sandbox/base/status.h"

namespace nsbox::session {

// "out.txt", "/workspace/out.txt" → "out.txt"; "" and "/workspace" → "" (the workspace itself). Refuses paths
// outside /workspace and "." or ".." components.
StatusOr<std::string> WorkspaceRelativePath(const std::string& path);

// Copies the regular file `rel` under `workspace_fd` to `host_path` (a directory receives the file's name). Returns
// the bytes copied.
StatusOr<uint64_t> CopyOut(int workspace_fd, const std::string& rel, const std::string& host_path, uint64_t max_bytes);
// Copies the host file `host_path` to `rel` under `workspace_fd` (an existing directory or "" receives the file's
// name), owned by the sandbox user (host ids `uid`, `gid`), replaced atomically. Returns the bytes copied.
StatusOr<uint64_t> CopyIn(const std::string& host_path, int workspace_fd, const std::string& rel, uint64_t max_bytes,
                          uid_t uid, gid_t gid);

}  // namespace nsbox::session

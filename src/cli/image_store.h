// The image store: named read-only root filesystems in one root-only directory, their templates, name resolution.
//
// Layout of the store (default /var/lib/nsbox/images; $NSBOX_IMAGE_STORE overrides it). The store is
// root-owned, mode 0711: only root can create, remove or list images. It cannot be 0700 because the
// sandbox sets up its mounts as the unprivileged host uid its user namespace maps to (nobody), which must
// be able to reach NAME/rootfs by its path; images themselves are world-readable, like /usr.
//   NAME/rootfs/           the root a sandbox mounts read-only
//   NAME/image.json        name, template, template digest, created, size
//   .build-NAME-XXXXXX/    a build in progress, flock()ed by its builder; swept once no one holds the lock
//   .rm-NAME-XXXXXX/       an image being removed (renamed first, so it vanishes from `ls` at once)
// An image becomes visible only by one rename(2) of a finished, smoke-tested build directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox/base/status.h"

namespace nsbox::cli {

inline constexpr char kDefaultImageStore[] = "/var/lib/nsbox/images";

// $NSBOX_IMAGE_STORE when set (tests), else /var/lib/nsbox/images.
std::string ImageStoreRoot();

// Resolves an image name to its read-only root directory, or an error naming the known images.
StatusOr<std::string> ResolveImage(const std::string& name);
StatusOr<std::string> ResolveImageIn(const std::string& store, const std::string& name);

// Image names are what a path component and a CLI argument can carry safely: [a-z0-9][a-z0-9._-]{0,63}.
Status ValidateImageName(const std::string& name);
// The name a new image gets: --name when given, else the template's. It must be valid, and not "host": `--rootfs host`
// always means the host view, so an image of that name could never be used.
StatusOr<std::string> NewImageName(const std::optional<std::string>& requested, const std::string& template_name);

struct ImageInfo {
  std::string name;
  std::string template_name;
  std::string template_digest;
  std::string description;
  std::string created;      // RFC 3339, UTC
  uint64_t size_bytes = 0;  // disk usage of the root, measured when it was built
  double build_seconds = 0;
  std::string rootfs_dir;
};

// The published images, sorted by name. A store that does not exist yet holds no images.
StatusOr<std::vector<ImageInfo>> ListImages(const std::string& store);
// Makes the image vanish (one rename), then deletes its files. Refused while the image is in use: a process holds it
// (UseImage) or a sandbox has it mounted.
Status RemoveImage(const std::string& store, const std::string& name);
// As ResolveImage, for a sandbox about to be set up on the image: it also takes a shared lock on the image, held until
// this process exits, so that `nsbox image rm` refuses it before its mounts exist rather than empty them under the
// program.
StatusOr<std::string> UseImage(const std::string& name);
// An error when `store` is not nsbox's: its mode is not kImageStoreMode and it holds something other than images and
// leftovers (a mistyped NSBOX_IMAGE_STORE).
Status RefuseForeignStore(const std::string& store);

inline constexpr unsigned kImageStoreMode = 0711;

// Creates the store (mode kImageStoreMode, root-owned) when missing and sets that mode when it differs, unless the
// directory holds something that is not nsbox's (then it is refused, not changed).
Status EnsureStore(const std::string& store);
// The first entry of `store` that is neither an image (a directory with rootfs/) nor a leftover (.build-*, .rm-*);
// empty when there is none.
StatusOr<std::string> ForeignEntry(const std::string& store);
// Deletes what interrupted builds and removals left behind: .build-* and .rm-* entries whose lock no one holds, in a
// store that is nsbox's (mode kImageStoreMode, or nothing foreign in it). Returns the number of entries removed.
StatusOr<int> SweepStaleEntries(const std::string& store);

// "57.1M" style sizes for `nsbox image ls`.
std::string HumanSize(uint64_t bytes);

}  // namespace nsbox::cli

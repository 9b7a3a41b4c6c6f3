// DataDir: the environment override first, then the install location, then the source tree of an uninstalled build.
#include "nsbox_config.h"
#include "sandbox/base/data_dir.h"

#include <cstdlib>

#include "sandbox/base/fs.h"

namespace nsbox {

std::string DataDir() {
  if (const char* env = std::getenv("NSBOX_DATADIR"); env && *env) return env;
  if (PathExists(std::string(NSBOX_DATADIR) + "/rootfs/host.json")) return NSBOX_DATADIR;
  return NSBOX_SOURCE_DIR;
}

}  // namespace nsbox

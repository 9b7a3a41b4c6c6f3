// DataDir: where nsbox finds its data files (profiles, host view, languages): env, install location, or source tree.
#pragma once

#include <string>

namespace nsbox {

// $NSBOX_DATADIR, else the installed datadir when it exists, else the source tree this binary was built from.
std::string DataDir();

}  // namespace nsbox

// RecordSkip: the one way a test says it did not run, and why (printed, and listed in $NSBOX_SKIP_FILE for
// tools/test's summary). Header-only, so that every suite uses it, those that do not link tests/support too.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace nsbox::testing {

// Only where the kernel or the privileges truly lack what a test needs (PREAMBLE): a skip is not a pass.
inline void RecordSkip(const std::string& suite, const std::string& test, const std::string& reason) {
  std::fprintf(stderr, "SKIP %s::%s: %s\n", suite.c_str(), test.c_str(), reason.c_str());
  if (const char* file = std::getenv("NSBOX_SKIP_FILE"); file && *file) {
    std::ofstream out(file, std::ios::app);
    out << suite << "::" << test << ": " << reason << "\n";
  }
}

}  // namespace nsbox::testing

// libFuzzer harness for the seccomp profile loader: parse, and compile what parses, checking the loader's promises.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sandbox/seccomp.h"
#include "sandbox/spec/seccomp_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto profile = nsbox::ParseSeccompProfile(text);
  if (!profile.ok()) {
    // An error is one line of text a terminal can show safely: `nsbox profile check` prints it as is.
    const nsbox::Status status = profile.status();  // status() returns a copy: keep it alive
    const std::string& message = status.message();
    if (message.empty()) __builtin_trap();
    for (char c : message) {
      if (static_cast<unsigned char>(c) < 0x20) __builtin_trap();
    }
    return 0;
  }
  static const nsbox::SeccompHost host = nsbox::NativeSeccompHost();
  nsbox::SeccompSummary summary;
  auto program = nsbox::CompileSeccompProfile(*profile, "fuzz", host, &summary);
  if (program.ok()) {
    const auto& filter = (*program)->filter;
    // A program the kernel could refuse for its size must have been refused here.
    if (filter.empty() || filter.size() > 4096 || filter.size() != summary.bpf_instructions) __builtin_trap();
  } else if (program.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}

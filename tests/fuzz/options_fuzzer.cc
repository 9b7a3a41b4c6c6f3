// libFuzzer harness for the option parser: value parsers on raw bytes, then whole `run` command lines through CLI11,
// BuildPolicy and BuildExecutor (nothing is run). Every rejection must be one printable line.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sandbox/spec/units.h"
#include "src/cli/sandbox_options.h"
#include "src/netproxy/allow_list.h"

namespace {

void CheckOneLine(const nsbox::Status& status) {
  if (status.ok()) return;
  const std::string message = status.message();
  if (message.empty()) __builtin_trap();
  for (char c : message)
    if (c == '\n') __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckOneLine(nsbox::ParseSize(text).status());
  CheckOneLine(nsbox::ParseDuration(text).status());
  CheckOneLine(nsbox::netproxy::ParseAllowList(text).status());

  // NUL-separated words become a `run` command line.
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    if (c == '\0') {
      words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  words.push_back(word);
  if (words.size() > 64) return 0;
  // Reading nsbox's own standard input would block the fuzzer; a file path is fine.
  for (size_t i = 0; i + 1 < words.size(); ++i)
    if ((words[i] == "--file" || words[i] == "--stdin") && words[i + 1] == "-") return 0;

  CLI::App app{"fuzz"};
  nsbox::cli::SandboxOptions sandbox_options;
  nsbox::cli::ProgramOptions program_options;
  AddSandboxOptions(&app, sandbox_options);
  AddProgramOptions(&app, program_options);
  std::vector<const char*> argv = {"run"};
  for (const auto& w : words) argv.push_back(w.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return 0;  // CLI11's own one-line errors
  }
  auto policy = nsbox::cli::BuildPolicy(sandbox_options);
  CheckOneLine(policy.status());
  CheckOneLine(nsbox::cli::BuildNetworkSpec(sandbox_options).status());
  if (!policy.ok()) return 0;
  auto executor = nsbox::cli::BuildExecutor(program_options, policy->rootfs_dir(),
                                            nsbox::cli::ProgramMemory(*policy));
  CheckOneLine(executor.status());
  if (executor.ok() && executor->stdin_fd > 0) ::close(executor->stdin_fd);
  return 0;
}

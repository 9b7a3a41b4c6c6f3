// CLI11's parse errors, and a check of whole numbers, in nsbox's words, for every program that parses a command line
// with CLI11 (nsbox's verbs, the options mcp and agent hand to session create, nsbox serve).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace nsbox::cli {

// One line for CLI11's message `what` about `command`: an option given twice ("At Most 1 required but received 2"), a
// value left out ("1 required UINT missing"), a number it cannot read ("Could not convert: --pid = abc"), words it
// does not take ("The following argument was not expected"), a required positional; other messages as they are.
// `verb` goes in front ("run: ", or ""); `help` names the command whose --help to see ("nsbox run").
std::string ExplainParseError(const CLI::App& command, const std::string& verb, const std::string& help,
                              const std::string& what);

// A whole number from `low` to `high` in decimal digits, refused as "'abc' is not WHAT from LOW to HIGH (decimal
// digits)". CLI11's own checks read "0x10" as 16 and "010" as 8, and refuse "abc" as "not in range 0.000000 to"
// a number of 300 digits.
CLI::Validator DecimalIn(const std::string& what, uint64_t low, uint64_t high);

// The first word of `args` before "--" that looks like an option (not "-5") and names none of `command`'s, without
// its "=value"; empty when there is none. An option's value (the next word, unless given as --name=value) is skipped.
std::string FirstUnknownOption(const CLI::App& command, const std::vector<std::string>& args);

}  // namespace nsbox::cli

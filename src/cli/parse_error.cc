// CLI11's parse errors in nsbox's words (ExplainParseError), the first unknown option of a command line, DecimalIn.
#include "src/cli/parse_error.h"

#include <charconv>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nsbox::cli {

std::string ExplainParseError(const CLI::App& command, const std::string& verb, const std::string& help,
                              const std::string& what) {
  constexpr std::string_view kTwice = ": At Most 1 required but received ";
  if (size_t at = what.find(kTwice); at != std::string::npos && what.starts_with("-"))
    return fmt::format("{}{} given {} times (give it once)", verb, what.substr(0, at), what.substr(at + kTwice.size()));
  constexpr std::string_view kConvert = "Could not convert: ";
  if (size_t eq = what.find(" = "); what.starts_with(kConvert) && eq != std::string::npos) {
    const std::string name = what.substr(kConvert.size(), eq - kConvert.size());
    const CLI::Option* option = command.get_option_no_throw(name);
    const std::string type = option ? option->get_type_name() : "";
    // CLI11 says the same of a number too large for the option's type.
    const char* wanted = type == "INT" || type == "UINT" ? "a whole number it takes (decimal digits, in its range)"
                         : type == "FLOAT"               ? "a number it takes (in its range)"
                                                         : "a value it takes";
    return fmt::format("{}{}: '{}' is not {}", verb, name, what.substr(eq + 3), wanted);
  }
  if (what.starts_with("The following argument")) {
    // CLI11 lists them last first, with the "--" that ended the options: in the command line's order, without it.
    const size_t colon = what.find(": ");
    std::vector<std::string> words;
    for (size_t start = colon == std::string::npos ? what.size() : colon + 2; start < what.size();) {
      size_t space = what.find(' ', start);
      if (space == std::string::npos) space = what.size();
      if (std::string word = what.substr(start, space - start); word != "--") words.insert(words.begin(), word);
      start = space + 1;
    }
    return fmt::format("{}unexpected argument{} '{}' (see {} --help)", verb, words.size() == 1 ? "" : "s",
                       fmt::join(words, " "), help);
  }
  if (what.ends_with(" is required")) return fmt::format("{}{} (see {} --help)", verb, what, help);
  // "--memory: 1 required TEXT missing": the option is last, without its value.
  if (size_t colon = what.find(": 1 required ");
      colon != std::string::npos && what.ends_with(" missing") && what.starts_with("-"))
    return fmt::format("{}{}: its value is missing", verb, what.substr(0, colon));
  return what;
}

CLI::Validator DecimalIn(const std::string& what, uint64_t low, uint64_t high) {
  return CLI::Validator(
      [=](const std::string& value) {
        uint64_t number = 0;
        const bool digits = !value.empty() && value.size() <= 19 &&
                            value.find_first_not_of("0123456789") == std::string::npos &&
                            (value.size() == 1 || value[0] != '0');
        if (digits) std::from_chars(value.data(), value.data() + value.size(), number);
        return digits && number >= low && number <= high
                   ? std::string()
                   : fmt::format("'{}' is not {} from {} to {} (decimal digits)", value, what, low, high);
      },
      fmt::format("{}..{}", low, high));
}

std::string FirstUnknownOption(const CLI::App& command, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    if (word.size() < 2 || word[0] != '-' || (word[1] >= '0' && word[1] <= '9')) continue;  // "-5": a value
    const std::string name = word.substr(0, word.find('='));
    const CLI::Option* option = command.get_option_no_throw(name);
    if (option == nullptr && name.size() == 2) option = command.get_option_no_throw(name.substr(1));
    if (option == nullptr) return name;
    if (option->get_expected_min() > 0 && word.find('=') == std::string::npos) ++i;  // its value
  }
  return "";
}

}  // namespace nsbox::cli

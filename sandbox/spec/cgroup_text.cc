// Parsing the text of cgroup and proc files, without streams.
#include "sandbox/spec/cgroup_text.h"

#include <algorithm>
#include <cstdlib>

namespace nsbox::cgroup_internal {
namespace {

// The pieces of text between delimiters, as std::getline reads them (no empty piece after a final delimiter). Here
// and in Words, no stream: a run's start-up would set up std::locale for it (about 0.2 ms of page faults on a PVM
// guest), and nothing else on that path needs one.
std::vector<std::string_view> SplitOn(std::string_view text, char delimiter) {
  std::vector<std::string_view> pieces;
  while (!text.empty()) {
    size_t end = text.find(delimiter);
    pieces.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return pieces;
}

// Whitespace-separated words, as `stream >> word` reads them.
std::vector<std::string_view> Words(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  std::vector<std::string_view> words;
  for (size_t start = text.find_first_not_of(kSpace); start != std::string_view::npos;
       start = text.find_first_not_of(kSpace, start)) {
    size_t end = text.find_first_of(kSpace, start);
    words.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end;
  }
  return words;
}

// Calls f(key, value) for each "key value" pair of a keyed file whose value is a whole decimal number, in order.
template <typename F>
void ForEachKeyedNumber(std::string_view content, F&& f) {
  std::vector<std::string_view> words = Words(content);
  for (size_t i = 0; i + 1 < words.size(); i += 2) {
    std::string value(words[i + 1]);
    char* end = nullptr;
    unsigned long long number = std::strtoull(value.c_str(), &end, 10);
    if (end && *end == '\0') f(words[i], static_cast<uint64_t>(number));
  }
}

}  // namespace

SelfCgroup ParseSelfCgroup(std::string_view content) {
  SelfCgroup self;
  for (std::string_view line : SplitOn(content, '\n')) {
    // "hierarchy-id:controller-list:path"; the path may itself contain ':'.
    size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view id = line.substr(0, first);
    std::string controllers(line.substr(first + 1, second - first - 1));
    std::string path(line.substr(second + 1));
    if (id == "0" && controllers.empty()) {
      self.unified_path = path;
      continue;
    }
    for (std::string_view controller : SplitOn(controllers, ',')) {
      if (controller.empty() || controller.starts_with("name=")) continue;
      self.v1_paths[std::string(controller)] = path;
      self.v1_mount_dir[std::string(controller)] = controllers;
    }
  }
  return self;
}

uint64_t KeyedValue(std::string_view content, std::string_view key) {
  uint64_t found = 0;
  ForEachKeyedNumber(content, [&](std::string_view k, uint64_t v) {
    if (k == key) found = v;
  });
  return found;
}

std::map<std::string, uint64_t> ParseKeyedFile(std::string_view content) {
  std::map<std::string, uint64_t> values;
  ForEachKeyedNumber(content, [&](std::string_view k, uint64_t v) { values[std::string(k)] = v; });
  return values;
}

std::vector<pid_t> ParsePids(std::string_view content) {
  std::vector<pid_t> pids;
  for (std::string_view word : Words(content)) {
    std::string text(word);
    char* end = nullptr;
    long pid = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str()) break;  // where `stream >> pid` would stop
    pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

namespace {

// Fields 3 (state) on of a /proc/<pid>/stat text: what follows the command name, which may hold spaces and
// parentheses. Field N is at index N - 3.
std::vector<std::string_view> FieldsAfterCommand(std::string_view stat) {
  size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos) return {};
  return Words(stat.substr(std::min(paren + 2, stat.size())));
}

}  // namespace

char ParseProcessState(std::string_view stat) {
  std::vector<std::string_view> fields = FieldsAfterCommand(stat);
  return fields.empty() || fields[0].size() != 1 ? 0 : fields[0][0];
}

uint64_t ParseStartTime(std::string_view stat) {
  std::vector<std::string_view> fields = FieldsAfterCommand(stat);
  if (fields.size() < 22 - 2) return 0;  // fields 3 to 22
  return std::strtoull(std::string(fields[22 - 3]).c_str(), nullptr, 10);
}

std::optional<uint64_t> ParseCpuTicks(std::string_view stat) {
  std::vector<std::string_view> fields = FieldsAfterCommand(stat);
  if (fields.size() < 17 - 2) return std::nullopt;  // fields 3 to 17: utime, stime, cutime, cstime
  uint64_t ticks = 0;
  for (int field = 14; field <= 17; ++field)
    ticks += std::strtoull(std::string(fields[field - 3]).c_str(), nullptr, 10);
  return ticks;
}

std::optional<std::pair<uintptr_t, uintptr_t>> ParseArgumentRange(std::string_view stat) {
  std::vector<std::string_view> fields = FieldsAfterCommand(stat);
  if (fields.size() < 49 - 2) return std::nullopt;  // fields 3 to 49
  const uintptr_t start = std::strtoull(std::string(fields[48 - 3]).c_str(), nullptr, 10);
  const uintptr_t end = std::strtoull(std::string(fields[49 - 3]).c_str(), nullptr, 10);
  if (start == 0 || end <= start) return std::nullopt;
  return std::make_pair(start, end);
}

bool IsEndedProcess(std::string_view stat) {
  std::vector<std::string_view> fields = FieldsAfterCommand(stat);
  if (fields.size() < 20 - 2) return false;  // fields 3 (state) to 20 (num_threads)
  if (fields[0] != "Z" && fields[0] != "X") return false;
  return std::strtoull(std::string(fields[20 - 3]).c_str(), nullptr, 10) <= 1;
}

}  // namespace nsbox::cgroup_internal

// Seccomp profile parsing: the Docker/OCI JSON format into SeccompProfile, every fault named by its JSON path.
#include "sandbox/spec/seccomp_profile.h"

#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <initializer_list>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sandbox/base/bounded_json.h"

namespace nsbox {
namespace {

using Json = nlohmann::json;

// The largest errno the kernel lets a filter return (MAX_ERRNO).
constexpr uint64_t kMaxErrno = 4095;

constexpr std::array<std::pair<std::string_view, SeccompAction>, 9> kActions = {{
    {"SCMP_ACT_ALLOW", SeccompAction::kAllow},
    {"SCMP_ACT_ERRNO", SeccompAction::kErrno},
    {"SCMP_ACT_KILL", SeccompAction::kKill},
    {"SCMP_ACT_KILL_THREAD", SeccompAction::kKillThread},
    {"SCMP_ACT_KILL_PROCESS", SeccompAction::kKillProcess},
    {"SCMP_ACT_TRAP", SeccompAction::kTrap},
    {"SCMP_ACT_TRACE", SeccompAction::kTrace},
    {"SCMP_ACT_LOG", SeccompAction::kLog},
    {"SCMP_ACT_NOTIFY", SeccompAction::kNotify},
}};

constexpr std::array<std::pair<std::string_view, SeccompCompare>, 7> kOperators = {{
    {"SCMP_CMP_NE", SeccompCompare::kNe},
    {"SCMP_CMP_LT", SeccompCompare::kLt},
    {"SCMP_CMP_LE", SeccompCompare::kLe},
    {"SCMP_CMP_EQ", SeccompCompare::kEq},
    {"SCMP_CMP_GE", SeccompCompare::kGe},
    {"SCMP_CMP_GT", SeccompCompare::kGt},
    {"SCMP_CMP_MASKED_EQ", SeccompCompare::kMaskedEq},
}};

// Architectures as the top level names them (libseccomp's SCMP_ARCH_*).
constexpr std::array<std::string_view, 23> kScmpArches = {
    "SCMP_ARCH_X86",       "SCMP_ARCH_X86_64",    "SCMP_ARCH_X32",       "SCMP_ARCH_ARM",
    "SCMP_ARCH_AARCH64",   "SCMP_ARCH_MIPS",      "SCMP_ARCH_MIPS64",    "SCMP_ARCH_MIPS64N32",
    "SCMP_ARCH_MIPSEL",    "SCMP_ARCH_MIPSEL64",  "SCMP_ARCH_MIPSEL64N32", "SCMP_ARCH_PPC",
    "SCMP_ARCH_PPC64",     "SCMP_ARCH_PPC64LE",   "SCMP_ARCH_S390",      "SCMP_ARCH_S390X",
    "SCMP_ARCH_PARISC",    "SCMP_ARCH_PARISC64",  "SCMP_ARCH_RISCV64",   "SCMP_ARCH_LOONGARCH64",
    "SCMP_ARCH_M68K",      "SCMP_ARCH_SH",        "SCMP_ARCH_SHEB",
};

// Architectures as rule gates name them: Docker uses Go's GOARCH spelling plus libseccomp's sub-arch names.
constexpr std::array<std::string_view, 24> kGateArches = {
    "386",     "x86",      "x86_64",    "amd64",       "x32",      "arm",     "arm64",  "aarch64",
    "mips",    "mips64",   "mips64n32", "mipsel",      "mipsle",   "mipsel64", "mips64le", "mipsel64n32",
    "ppc",     "ppc64",    "ppc64le",   "s390",        "s390x",    "riscv64", "loong64", "loongarch64",
};

constexpr std::array<std::string_view, 6> kFilterFlags = {
    "SECCOMP_FILTER_FLAG_TSYNC",     "SECCOMP_FILTER_FLAG_LOG",          "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_NEW_LISTENER", "SECCOMP_FILTER_FLAG_TSYNC_ESRCH", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
};

template <typename Table>
bool InTable(const Table& table, std::string_view name) {
  return std::find(table.begin(), table.end(), name) != table.end();
}

std::string_view TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    default: return "value";
  }
}

// Echoes text from the profile as a JSON string: quoted, escaped, one line, no control characters
// (a message may reach a terminal), invalid UTF-8 replaced.
std::string Quote(std::string_view text) {
  return Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status At(std::string_view path, std::string_view message) {
  return Status::Error(fmt::format("{}: {}", path.empty() ? "(top level)" : path, message));
}

std::string JsonPathJoin(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : fmt::format("{}.{}", parent, key);
}

std::string Index(std::string_view parent, size_t i) { return fmt::format("{}[{}]", parent, i); }

// Rejects keys the format does not have: a misspelt "errnoret" would otherwise silently change a rule.
Status CheckKeys(const Json& object, std::string_view path, std::initializer_list<std::string_view> known) {
  for (const auto& item : object.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      std::string list;
      for (std::string_view k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      return At(path, fmt::format("unknown key {} (known: {})", Quote(item.key()), list));
    }
  }
  return OkStatus();
}

// Go's decoder treats null like an absent field; so does this loader.
const Json* Field(const Json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::string> GetString(const Json& value, const std::string& path) {
  if (!value.is_string()) return At(path, fmt::format("expected a string, got {}", TypeName(value)));
  return value.get<std::string>();
}

StatusOr<uint64_t> GetUnsigned(const Json& value, const std::string& path) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer())
    return At(path, fmt::format("expected a non-negative integer, got {}", value.get<int64_t>()));
  if (value.is_number_float()) return At(path, "expected an integer below 2^64, got a fractional or too large number");
  return At(path, fmt::format("expected a non-negative integer, got {}", TypeName(value)));
}

StatusOr<std::vector<std::string>> GetStringArray(const Json& value, const std::string& path) {
  if (!value.is_array()) return At(path, fmt::format("expected an array of strings, got {}", TypeName(value)));
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    auto s = GetString(value[i], Index(path, i));
    if (!s.ok()) return s.status();
    out.push_back(std::move(*s));
  }
  return out;
}

StatusOr<SeccompAction> ParseAction(const Json& value, const std::string& path) {
  auto name = GetString(value, path);
  if (!name.ok()) return name.status();
  for (const auto& [text, action] : kActions) {
    if (text == *name) return action;
  }
  return At(path, fmt::format("unknown action {}", Quote(*name)));
}

StatusOr<uint32_t> ParseErrno(const Json& value, const std::string& path) {
  auto number = GetUnsigned(value, path);
  if (!number.ok()) return number.status();
  if (*number > kMaxErrno) return At(path, fmt::format("errno {} is out of range (0..{})", *number, kMaxErrno));
  return static_cast<uint32_t>(*number);
}

// errnoRet is the errno of SCMP_ACT_ERRNO, the message of SCMP_ACT_TRACE, and (nsbox) the answer to SCMP_ACT_NOTIFY.
bool TakesErrno(SeccompAction action) {
  return action == SeccompAction::kErrno || action == SeccompAction::kTrace || action == SeccompAction::kNotify;
}

bool ValidSyscallName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool ValidCapName(std::string_view name) {
  if (name.size() <= 4 || name.substr(0, 4) != "CAP_") return false;
  return std::all_of(name.begin() + 4, name.end(),
                     [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; });
}

Status ParseGate(const Json& value, const std::string& path, SeccompGate& gate) {
  if (!value.is_object()) return At(path, fmt::format("expected an object, got {}", TypeName(value)));
  NSBOX_RETURN_IF_ERROR(CheckKeys(value, path, {"caps", "arches", "minKernel"}));
  if (const Json* caps = Field(value, "caps")) {
    auto list = GetStringArray(*caps, JsonPathJoin(path, "caps"));
    if (!list.ok()) return list.status();
    for (size_t i = 0; i < list->size(); ++i) {
      if (!ValidCapName((*list)[i])) {
        return At(Index(JsonPathJoin(path, "caps"), i),
                  fmt::format("{} is not a capability name (CAP_…)", Quote((*list)[i])));
      }
    }
    gate.caps = std::move(*list);
  }
  if (const Json* arches = Field(value, "arches")) {
    auto list = GetStringArray(*arches, JsonPathJoin(path, "arches"));
    if (!list.ok()) return list.status();
    for (size_t i = 0; i < list->size(); ++i) {
      if (!InTable(kGateArches, (*list)[i]) && !InTable(kScmpArches, (*list)[i])) {
        return At(Index(JsonPathJoin(path, "arches"), i), fmt::format("unknown architecture {}", Quote((*list)[i])));
      }
    }
    gate.arches = std::move(*list);
  }
  if (const Json* min_kernel = Field(value, "minKernel")) {
    const std::string field_path = JsonPathJoin(path, "minKernel");
    auto text = GetString(*min_kernel, field_path);
    if (!text.ok()) return text.status();
    if (!ParseKernelVersion(*text)) {
      return At(field_path, fmt::format("{} is not a kernel version (MAJOR.MINOR)", Quote(*text)));
    }
    gate.min_kernel = std::move(*text);
  }
  return OkStatus();
}

Status ParseArg(const Json& value, const std::string& path, SeccompArg& arg) {
  if (!value.is_object()) return At(path, fmt::format("expected an object, got {}", TypeName(value)));
  NSBOX_RETURN_IF_ERROR(CheckKeys(value, path, {"index", "value", "valueTwo", "op"}));
  const Json* index = Field(value, "index");
  if (!index) return At(path, "missing \"index\"");
  auto index_value = GetUnsigned(*index, JsonPathJoin(path, "index"));
  if (!index_value.ok()) return index_value.status();
  // A system call has six argument registers.
  if (*index_value > 5)
    return At(JsonPathJoin(path, "index"), fmt::format("argument index {} is out of range (0..5)", *index_value));
  arg.index = static_cast<unsigned>(*index_value);
  if (const Json* v = Field(value, "value")) {
    auto number = GetUnsigned(*v, JsonPathJoin(path, "value"));
    if (!number.ok()) return number.status();
    arg.value = *number;
  }
  if (const Json* v = Field(value, "valueTwo")) {
    auto number = GetUnsigned(*v, JsonPathJoin(path, "valueTwo"));
    if (!number.ok()) return number.status();
    arg.value_two = *number;
  }
  const Json* op = Field(value, "op");
  if (!op) return At(path, "missing \"op\"");
  auto op_name = GetString(*op, JsonPathJoin(path, "op"));
  if (!op_name.ok()) return op_name.status();
  bool found = false;
  for (const auto& [text, compare] : kOperators) {
    if (text == *op_name) {
      arg.op = compare;
      found = true;
    }
  }
  if (!found) return At(JsonPathJoin(path, "op"), fmt::format("unknown operator {}", Quote(*op_name)));
  return OkStatus();
}

Status ParseRule(const Json& value, const std::string& path, SeccompRule& rule) {
  rule.json_path = path;
  if (!value.is_object()) return At(path, fmt::format("expected an object, got {}", TypeName(value)));
  NSBOX_RETURN_IF_ERROR(
      CheckKeys(value, path, {"names", "name", "action", "errnoRet", "args", "includes", "excludes", "comment"}));
  if (const Json* names = Field(value, "names")) {
    auto list = GetStringArray(*names, JsonPathJoin(path, "names"));
    if (!list.ok()) return list.status();
    rule.names = std::move(*list);
  }
  if (const Json* name = Field(value, "name")) {
    auto single = GetString(*name, JsonPathJoin(path, "name"));
    if (!single.ok()) return single.status();
    rule.names.push_back(std::move(*single));
  }
  if (rule.names.empty()) return At(path, "the rule names no system call (\"names\" is missing or empty)");
  for (size_t i = 0; i < rule.names.size(); ++i) {
    if (!ValidSyscallName(rule.names[i])) {
      return At(Field(value, "names") ? Index(JsonPathJoin(path, "names"), i) : JsonPathJoin(path, "name"),
                fmt::format("{} is not a system call name", Quote(rule.names[i])));
    }
  }
  const Json* action = Field(value, "action");
  if (!action) return At(path, "missing \"action\"");
  auto parsed_action = ParseAction(*action, JsonPathJoin(path, "action"));
  if (!parsed_action.ok()) return parsed_action.status();
  rule.action = *parsed_action;
  if (const Json* errno_ret = Field(value, "errnoRet")) {
    // A rule's notification is answered with the profile's default errno, so errnoRet has no place there.
    if (!TakesErrno(rule.action) || rule.action == SeccompAction::kNotify) {
      return At(
          JsonPathJoin(path, "errnoRet"),
          fmt::format("only meaningful with SCMP_ACT_ERRNO or SCMP_ACT_TRACE, not {}", SeccompActionName(rule.action)));
    }
    auto number = ParseErrno(*errno_ret, JsonPathJoin(path, "errnoRet"));
    if (!number.ok()) return number.status();
    rule.errno_ret = *number;
  }
  if (const Json* args = Field(value, "args")) {
    const std::string args_path = JsonPathJoin(path, "args");
    if (!args->is_array()) return At(args_path, fmt::format("expected an array, got {}", TypeName(*args)));
    for (size_t i = 0; i < args->size(); ++i) {
      SeccompArg arg;
      NSBOX_RETURN_IF_ERROR(ParseArg((*args)[i], Index(args_path, i), arg));
      rule.args.push_back(arg);
    }
    // libseccomp compares at most one condition per argument register in one rule, six in all.
    if (rule.args.size() > 6)
      return At(args_path, fmt::format("{} conditions; at most 6 are possible", rule.args.size()));
  }
  if (const Json* includes = Field(value, "includes")) {
    NSBOX_RETURN_IF_ERROR(ParseGate(*includes, JsonPathJoin(path, "includes"), rule.includes));
  }
  if (const Json* excludes = Field(value, "excludes")) {
    NSBOX_RETURN_IF_ERROR(ParseGate(*excludes, JsonPathJoin(path, "excludes"), rule.excludes));
  }
  if (const Json* comment = Field(value, "comment")) {
    auto text = GetString(*comment, JsonPathJoin(path, "comment"));
    if (!text.ok()) return text.status();
    rule.comment = std::move(*text);
  }
  return OkStatus();
}

// nlohmann reports a byte offset; a person wants a line and a column.
std::string LineColumn(std::string_view text, size_t byte) {
  byte = std::min(byte, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

}  // namespace

std::string_view SeccompActionName(SeccompAction action) {
  for (const auto& [text, value] : kActions) {
    if (value == action) return text;
  }
  return "SCMP_ACT_?";
}

StatusOr<SeccompProfile> ParseSeccompProfile(std::string_view json_text) {
  Json document;
  try {
    // Bounded: a key twice (two "defaultAction"s: a reviewer reading the first would see another policy than the one
    // nsbox applies), a NUL byte, or nesting too deep for any profile is refused.
    document = ParseBoundedJson(json_text);
  } catch (const JsonRefused& e) {
    return Status::Error(fmt::format("invalid JSON: {}", e.what()));
  } catch (const Json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error …".
    std::string what = e.what();
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what = what.substr(colon + 2);
    // "last read: '…'" quotes raw input bytes: keep the message to one line of printable ASCII.
    for (char& c : what) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    return Status::Error(fmt::format("{}: invalid JSON: {}", LineColumn(json_text, e.byte), what));
  } catch (const Json::exception& e) {
    // Found by the fuzzer: a number like 1e999999 throws out_of_range (406), which carries no position.
    std::string what = e.what();
    const auto bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    for (char& c : what) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    return Status::Error(fmt::format("invalid JSON: {}", what));
  }
  if (!document.is_object()) return At("", fmt::format("expected a JSON object, got {}", TypeName(document)));
  NSBOX_RETURN_IF_ERROR(CheckKeys(document, "",
                                  {"defaultAction", "defaultErrnoRet", "architectures", "archMap", "syscalls", "flags",
                                   "listenerPath", "listenerMetadata", "comment", "nsboxNotifyDenials"}));
  SeccompProfile profile;
  const Json* default_action = Field(document, "defaultAction");
  if (!default_action) return At("", "missing \"defaultAction\"");
  auto action = ParseAction(*default_action, "defaultAction");
  if (!action.ok()) return action.status();
  profile.default_action = *action;
  if (const Json* errno_ret = Field(document, "defaultErrnoRet")) {
    if (!TakesErrno(profile.default_action)) {
      return At("defaultErrnoRet",
                fmt::format("only meaningful with SCMP_ACT_ERRNO, SCMP_ACT_TRACE or SCMP_ACT_NOTIFY, not {}",
                            SeccompActionName(profile.default_action)));
    }
    auto number = ParseErrno(*errno_ret, "defaultErrnoRet");
    if (!number.ok()) return number.status();
    profile.default_errno_ret = *number;
  }
  if (const Json* arches = Field(document, "architectures")) {
    auto list = GetStringArray(*arches, "architectures");
    if (!list.ok()) return list.status();
    for (size_t i = 0; i < list->size(); ++i) {
      if (!InTable(kScmpArches, (*list)[i])) {
        return At(Index("architectures", i), fmt::format("unknown architecture {}", Quote((*list)[i])));
      }
    }
    profile.architectures = std::move(*list);
  }
  if (const Json* arch_map = Field(document, "archMap")) {
    if (!arch_map->is_array()) return At("archMap", fmt::format("expected an array, got {}", TypeName(*arch_map)));
    for (size_t i = 0; i < arch_map->size(); ++i) {
      const std::string path = Index("archMap", i);
      const Json& entry = (*arch_map)[i];
      if (!entry.is_object()) return At(path, fmt::format("expected an object, got {}", TypeName(entry)));
      NSBOX_RETURN_IF_ERROR(CheckKeys(entry, path, {"architecture", "subArchitectures"}));
      SeccompArchMapEntry parsed;
      const Json* arch = Field(entry, "architecture");
      if (!arch) return At(path, "missing \"architecture\"");
      auto name = GetString(*arch, JsonPathJoin(path, "architecture"));
      if (!name.ok()) return name.status();
      if (!InTable(kScmpArches, *name))
        return At(JsonPathJoin(path, "architecture"), fmt::format("unknown architecture {}", Quote(*name)));
      parsed.architecture = std::move(*name);
      if (const Json* subs = Field(entry, "subArchitectures")) {
        auto list = GetStringArray(*subs, JsonPathJoin(path, "subArchitectures"));
        if (!list.ok()) return list.status();
        for (size_t j = 0; j < list->size(); ++j) {
          if (!InTable(kScmpArches, (*list)[j])) {
            return At(Index(JsonPathJoin(path, "subArchitectures"), j),
                      fmt::format("unknown architecture {}", Quote((*list)[j])));
          }
        }
        parsed.sub_architectures = std::move(*list);
      }
      profile.arch_map.push_back(std::move(parsed));
    }
  }
  if (const Json* flags = Field(document, "flags")) {
    auto list = GetStringArray(*flags, "flags");
    if (!list.ok()) return list.status();
    for (size_t i = 0; i < list->size(); ++i) {
      if (!InTable(kFilterFlags, (*list)[i]))
        return At(Index("flags", i), fmt::format("unknown filter flag {}", Quote((*list)[i])));
    }
    profile.flags = std::move(*list);
  }
  for (const char* key : {"listenerPath", "listenerMetadata", "comment"}) {
    if (const Json* field = Field(document, key)) {
      auto text = GetString(*field, key);
      if (!text.ok()) return text.status();
      std::string& out = key == std::string_view("listenerPath")       ? profile.listener_path
                         : key == std::string_view("listenerMetadata") ? profile.listener_metadata
                                                                       : profile.comment;
      out = std::move(*text);
    }
  }
  if (const Json* notify = Field(document, "nsboxNotifyDenials")) {
    if (!notify->is_boolean())
      return At("nsboxNotifyDenials", fmt::format("expected true or false, got {}", TypeName(*notify)));
    profile.notify_denials = notify->get<bool>();
    if (profile.notify_denials && profile.default_action != SeccompAction::kErrno) {
      return At("nsboxNotifyDenials",
                fmt::format("needs defaultAction SCMP_ACT_ERRNO (the errno is what nsbox answers), not {}",
                            SeccompActionName(profile.default_action)));
    }
  }
  if (const Json* syscalls = Field(document, "syscalls")) {
    if (!syscalls->is_array()) return At("syscalls", fmt::format("expected an array, got {}", TypeName(*syscalls)));
    profile.syscalls.reserve(syscalls->size());
    for (size_t i = 0; i < syscalls->size(); ++i) {
      SeccompRule rule;
      NSBOX_RETURN_IF_ERROR(ParseRule((*syscalls)[i], Index("syscalls", i), rule));
      profile.syscalls.push_back(std::move(rule));
    }
  }
  return profile;
}

std::optional<KernelVersion> ParseKernelVersion(std::string_view text) {
  KernelVersion version;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto major = std::from_chars(begin, end, version.major);
  if (major.ec != std::errc() || major.ptr == end || *major.ptr != '.') return std::nullopt;
  auto minor = std::from_chars(major.ptr + 1, end, version.minor);
  if (minor.ec != std::errc() || minor.ptr == major.ptr + 1) return std::nullopt;
  // Anything after MAJOR.MINOR must be a release suffix: ".3", "-91-generic", "+".
  if (minor.ptr != end && *minor.ptr != '.' && *minor.ptr != '-' && *minor.ptr != '+') return std::nullopt;
  if (version.major < 0 || version.minor < 0) return std::nullopt;
  return version;
}

KernelVersion RunningKernelVersion() {
  struct utsname uts {};
  if (uname(&uts) != 0) return {};
  return ParseKernelVersion(uts.release).value_or(KernelVersion{});
}

SeccompHost NativeSeccompHost() {
  SeccompHost host;
  host.kernel = RunningKernelVersion();
  return host;
}

namespace {

bool ArchMatches(const std::vector<std::string>& arches, const SeccompHost& host) {
  for (const std::string& arch : arches) {
    if (arch == host.go_arch || arch == host.scmp_arch) return true;
    if (host.go_arch == "amd64" && arch == "x86_64") return true;
  }
  return false;
}

}  // namespace

RuleApplicability RuleAppliesTo(const SeccompRule& rule, const SeccompHost& host) {
  // Rules that grant something to holders of a capability: the sandbox holds none.
  if (!rule.includes.caps.empty()) return RuleApplicability::kSkippedForCaps;
  if (!rule.includes.arches.empty() && !ArchMatches(rule.includes.arches, host))
    return RuleApplicability::kSkippedForArch;
  if (!rule.includes.min_kernel.empty() && host.kernel < *ParseKernelVersion(rule.includes.min_kernel)) {
    return RuleApplicability::kSkippedForKernel;
  }
  // excludes.caps would exclude holders of the capability; with none held the rule stays.
  if (!rule.excludes.arches.empty() && ArchMatches(rule.excludes.arches, host))
    return RuleApplicability::kSkippedForArch;
  if (!rule.excludes.min_kernel.empty() && !(host.kernel < *ParseKernelVersion(rule.excludes.min_kernel))) {
    return RuleApplicability::kSkippedForKernel;
  }
  return RuleApplicability::kApplies;
}

}  // namespace nsbox

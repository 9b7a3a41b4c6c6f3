// Result: status names, exit-code mapping and the JSON schema documented in the README.
#include "sandbox/result.h"

#include <cerrno>

#include "sandbox/result_json.h"

namespace nsbox {

const char* RunStatusName(RunStatus status) {
  switch (status) {
    case RunStatus::kOk: return "ok";
    case RunStatus::kExit: return "exit";
    case RunStatus::kSignal: return "signal";
    case RunStatus::kTimeout: return "timeout";
    case RunStatus::kOom: return "oom";
    case RunStatus::kViolation: return "violation";
    case RunStatus::kSetupError: return "setup_error";
    case RunStatus::kSessionLost: return "session_lost";
    case RunStatus::kKilled: return "killed";
    case RunStatus::kCompileError: return "compile_error";
  }
  return "setup_error";
}

static RunStatus RunStatusFromName(const std::string& name) {
  for (RunStatus s : {RunStatus::kOk, RunStatus::kExit, RunStatus::kSignal, RunStatus::kTimeout, RunStatus::kOom,
                      RunStatus::kViolation, RunStatus::kSetupError, RunStatus::kSessionLost, RunStatus::kKilled,
                      RunStatus::kCompileError})
    if (name == RunStatusName(s)) return s;
  return RunStatus::kSetupError;
}

int Result::ShellExitCode() const {
  switch (status) {
    case RunStatus::kOk: return 0;
    case RunStatus::kExit: return exit_code;
    case RunStatus::kTimeout: return 124;
    case RunStatus::kSetupError:
      if (exec_errno == ENOENT || exec_errno == ENOTDIR) return 127;
      return exec_errno != 0 ? 126 : 125;
    case RunStatus::kSessionLost: return 125;
    case RunStatus::kCompileError: return kCompileExitCode;
    case RunStatus::kOom:
      return 137;  // as for an OOM kill, also when a runtime's full heap ended the program
    case RunStatus::kSignal:
    case RunStatus::kViolation:
    case RunStatus::kKilled: return 128 + (signal > 0 ? signal : 9);
  }
  return 125;
}

size_t ValidUtf8Length(std::string_view bytes, size_t at) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  if (at >= n) return 0;
  unsigned char c = s[at];
  if (c < 0x80) return 1;
  size_t len = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  }
  if (len == 0 || at + len > n) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((s[at + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[at + k] & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

std::string SanitizeUtf8(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (size_t len = ValidUtf8Length(bytes, i)) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// An addition's JSON text as a value; text that is not JSON (an embedder's mistake) stays a string.
static nlohmann::json ParseExtra(const std::string& text) {
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? nlohmann::json(SanitizeUtf8(text)) : value;
}

static std::string DumpExtra(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json ResultToJson(const Result& r) {
  nlohmann::json j;
  j["status"] = RunStatusName(r.status);
  j["exit_code"] = r.exit_code;
  j["signal"] = r.signal;
  j["reason"] = SanitizeUtf8(r.reason);
  if (r.exec_errno != 0) j["exec_errno"] = r.exec_errno;
  j["stdout"] = SanitizeUtf8(r.stdout_data);
  j["stderr"] = SanitizeUtf8(r.stderr_data);
  j["stdout_bytes"] = r.stdout_bytes;
  j["stderr_bytes"] = r.stderr_bytes;
  j["stdout_truncated"] = r.stdout_truncated;
  j["stderr_truncated"] = r.stderr_truncated;
  j["wall_ms"] = r.wall_ms;
  j["cpu_ms"] = r.cpu_ms;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  if (r.limits) {
    const LimitsReport& l = *r.limits;
    j["limits"] = {{"backend", l.backend},
                   {"enforced_by", l.enforced_by},
                   {"memory_max_bytes", l.memory_max_bytes},
                   {"pids_max", l.pids_max},
                   {"cpus", l.cpus},
                   {"pids_limit_hit", l.pids_limit_hit},
                   {"cpu_throttled_ms", l.cpu_throttled_ms},
                   {"oom_kills", l.oom_kills}};
  }
  j["denied_syscalls"] = nlohmann::json::array();
  for (const auto& [name, count] : r.denied_syscalls)
    j["denied_syscalls"].push_back({{"name", name}, {"count", count}});
  j["denied_syscalls_capped"] = r.denied_syscalls_capped;
  j["denied_hosts"] = nlohmann::json::array();
  for (const auto& [host, count] : r.denied_hosts) j["denied_hosts"].push_back({{"host", host}, {"count", count}});
  if (!r.measurement_errors.empty()) j["measurement_errors"] = r.measurement_errors;
  for (const auto& [key, text] : r.extra_json) j[key] = ParseExtra(text);
  return j;
}

Result ResultFromJson(const nlohmann::json& j) {
  Result r;
  r.status = RunStatusFromName(j.value("status", "setup_error"));
  r.exit_code = j.value("exit_code", -1);
  r.signal = j.value("signal", 0);
  r.reason = j.value("reason", "");
  r.exec_errno = r.status == RunStatus::kSetupError ? j.value("exec_errno", 0) : 0;
  r.stdout_data = j.value("stdout", "");
  r.stderr_data = j.value("stderr", "");
  r.stdout_bytes = j.value("stdout_bytes", uint64_t{0});
  r.stderr_bytes = j.value("stderr_bytes", uint64_t{0});
  r.stdout_truncated = j.value("stdout_truncated", false);
  r.stderr_truncated = j.value("stderr_truncated", false);
  r.wall_ms = j.value("wall_ms", int64_t{0});
  r.cpu_ms = j.value("cpu_ms", int64_t{0});
  r.peak_memory_bytes = j.value("peak_memory_bytes", uint64_t{0});
  if (j.contains("limits") && j["limits"].is_object()) {
    const auto& l = j["limits"];
    LimitsReport report;
    report.backend = l.value("backend", "");
    if (l.contains("enforced_by")) report.enforced_by = l["enforced_by"].get<std::map<std::string, std::string>>();
    report.memory_max_bytes = l.value("memory_max_bytes", uint64_t{0});
    report.pids_max = l.value("pids_max", uint64_t{0});
    report.cpus = l.value("cpus", 0.0);
    report.pids_limit_hit = l.value("pids_limit_hit", false);
    report.cpu_throttled_ms = l.value("cpu_throttled_ms", uint64_t{0});
    report.oom_kills = l.value("oom_kills", uint64_t{0});
    r.limits = report;
  }
  if (j.contains("denied_syscalls"))
    for (const auto& d : j["denied_syscalls"]) r.denied_syscalls[d.value("name", "")] = d.value("count", uint64_t{0});
  r.denied_syscalls_capped = j.value("denied_syscalls_capped", false);
  if (j.contains("denied_hosts"))
    for (const auto& d : j["denied_hosts"]) r.denied_hosts[d.value("host", "")] = d.value("count", uint64_t{0});
  if (j.contains("measurement_errors") && j["measurement_errors"].is_array())
    for (const auto& e : j["measurement_errors"])
      if (e.is_string()) r.measurement_errors.push_back(e.get<std::string>());
  static const char* const kKnown[] = {"status", "exit_code", "signal", "reason", "stdout", "stderr", "stdout_bytes",
                                       "stderr_bytes", "stdout_truncated", "stderr_truncated", "wall_ms", "cpu_ms",
                                       "peak_memory_bytes", "limits", "denied_syscalls", "denied_syscalls_capped",
                                       "denied_hosts", "measurement_errors"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) r.extra_json[key] = DumpExtra(value);
  }
  return r;
}

void SetExtra(Result& result, const std::string& key, const nlohmann::json& value) {
  result.extra_json[key] = DumpExtra(value);
}

nlohmann::json GetExtra(const Result& result, const std::string& key) {
  auto it = result.extra_json.find(key);
  if (it == result.extra_json.end()) return nullptr;
  return ParseExtra(it->second);
}

}  // namespace nsbox

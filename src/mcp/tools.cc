// The MCP tools: what tools/list says of each (written for a model), and the file tools' programs.
#include "src/mcp/tools.h"

#include <fmt/format.h>

#include "src/agent/tools.h"

namespace nsbox::mcp {
namespace {

using json = nlohmann::json;

std::string Base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// Python literal of a string, via JSON (a JSON string is a valid Python string literal).
std::string PyString(const std::string& s) { return json(s).dump(); }

}  // namespace

Status CheckWorkspacePath(const std::string& path) {
  if (path.empty()) return Status::Error("path must not be empty");
  if (path.size() > 4096) return Status::Error("path is too long");
  if (path.find('\0') != std::string::npos) return Status::Error("path contains a NUL byte");
  if (path[0] == '/' && path != "/workspace" && !path.starts_with("/workspace/"))
    return Status::Error("path must be inside /workspace");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.substr(start, end - start) == "..") return Status::Error("path must not contain '..'");
    start = end + 1;
  }
  return OkStatus();
}

namespace {

// The start of every file tool's script: `p`, the tool's path in /workspace, which must not lead out of it through a
// symlink (the code could look there itself, but a file tool speaks of the workspace only), and kind(p) to say what
// a path that is not what the tool wants is instead. Errors are one line on stderr and exit code 1 (sys.exit).
std::string FileToolScript(const std::string& path, const std::string& body) {
  return fmt::format(
      "import os, stat, sys\n"
      "p = os.path.join('/workspace', {})\n"
      "root, real = os.path.realpath('/workspace'), os.path.realpath(p)\n"
      "if real != root and not real.startswith(root + '/'):\n"
      "    sys.exit(f'{{p}} leads outside /workspace (to {{real}}); file tools do not follow it')\n"
      "def kind(p):\n"
      "    m = os.stat(p).st_mode\n"
      "    kinds = ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISSOCK, 'a socket'),\n"
      "             (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'))\n"
      "    return next((name for test, name in kinds if test(m)), 'a regular file')\n"
      "{}",
      PyString(path), body);
}

// What a code tool's structuredContent holds: nsbox's JSON result (docs/result.md), its stdout and stderr clipped
// exactly as the text content is. Only the keys a client may rely on are listed; others may be there too.
json ResultOutputSchema() {
  json integer = {{"type", "integer"}}, string = {{"type", "string"}}, boolean = {{"type", "boolean"}};
  return {
      {"type", "object"},
      {"properties",
       {{"status",
         {{"type", "string"},
          {"enum",
           {"ok", "exit", "signal", "timeout", "oom", "violation", "setup_error", "session_lost", "killed",
            "compile_error"}}}},
        {"exit_code", integer},
        {"signal", integer},
        {"reason", string},
        {"stdout", string},
        {"stderr", string},
        {"stdout_bytes", integer},
        {"stderr_bytes", integer},
        {"stdout_clipped_bytes", integer},
        {"stderr_clipped_bytes", integer},
        {"wall_ms", integer}}},
      {"required", {"status", "exit_code", "stdout", "stderr"}}};
}

json Annotations(const char* title, bool read_only, bool idempotent, bool open_world) {
  // destructiveHint: true only where a call can overwrite what was there (the sandbox's own files); code can.
  return {{"title", title},
          {"readOnlyHint", read_only},
          {"destructiveHint", !read_only},
          {"idempotentHint", idempotent},
          {"openWorldHint", open_world}};
}

}  // namespace

json ToolList(const ToolListOptions& o) {
  // The code tools are the agent's own (same names, same model-facing descriptions); MCP adds a per-call time
  // limit, the stateful Python tool and the workspace file tools.
  const std::string fresh =
      " Each call is a fresh process: variables and imports do not carry over to the next call (use python_repl for "
      "that); files in /workspace persist between calls of this connection.";
  const std::string timeout_text = fmt::format(
      "Wall-clock limit for this run in seconds (default {:g}); a longer one is cut to {:g}, the operator's cap.",
      o.default_timeout_seconds, o.max_timeout_seconds);
  json tools = json::array();
  for (const auto& spec : agent::CodeTools()) {
    json schema = spec.input_schema;
    schema["properties"]["timeout_seconds"] = {{"type", "number"}, {"description", timeout_text}};
    tools.push_back({{"name", spec.name},
                     {"description", spec.description + fresh},
                     {"inputSchema", schema},
                     {"outputSchema", ResultOutputSchema()},
                     {"annotations", Annotations(spec.name == agent::kExecuteCodeTool ? "Run code" : "Run Python",
                                                 false, false, o.open_world)}});
  }
  tools.push_back(
      {{"name", kPythonReplTool},
       {"description",
        "Run Python in a persistent interpreter that KEEPS STATE between calls: variables, imports, functions and "
        "objects defined in one call are there in the next (like a notebook), until the sandbox ends. The value "
        "of a final expression is shown, as in an interactive interpreter. Use it for step-by-step work on the "
        "same data; execute_code and run_python start a fresh process each call. Files in /workspace persist for "
        "all tools. If the interpreter dies (a crash, a time-out), the next call starts a new one and says that "
        "state was lost."},
       {"inputSchema",
        {{"type", "object"},
         {"properties",
          {{"code", {{"type", "string"}, {"description", "Python statements to run in the persistent interpreter."}}},
           {"timeout_seconds", {{"type", "number"}, {"description", timeout_text}}}}},
         {"required", {"code"}}}},
       {"outputSchema", ResultOutputSchema()},
       {"annotations", Annotations("Python (stateful)", false, false, o.open_world)}});
  auto path_schema = [](const char* description) { return json{{"type", "string"}, {"description", description}}; };
  tools.push_back({{"name", "write_file"},
                   {"description",
                    "Create or overwrite a text file in the sandbox workspace (/workspace), e.g. input "
                    "data or a module that later code imports."},
                   {"inputSchema",
                    {{"type", "object"},
                     {"properties",
                      {{"path", path_schema("Path relative to /workspace.")},
                       {"content", {{"type", "string"}, {"description", "The file's full text."}}}}},
                     {"required", {"path", "content"}}}},
                   {"outputSchema", ResultOutputSchema()},
                   {"annotations", Annotations("Write a workspace file", false, true, false)}});
  tools.push_back(
      {{"name", "read_file"},
       {"description", "Read a text file from the sandbox workspace (/workspace), e.g. output that code wrote."},
       {"inputSchema",
        {{"type", "object"},
         {"properties", {{"path", path_schema("Path relative to /workspace.")}}},
         {"required", {"path"}}}},
       {"outputSchema", ResultOutputSchema()},
       {"annotations", Annotations("Read a workspace file", true, true, false)}});
  tools.push_back(
      {{"name", "list_files"},
       {"description",
        "List the files in the sandbox workspace (/workspace) with their sizes: a line `PATH<tab>SIZE` each; "
        "a path with a character that is not printable, or starting with a double quote, is written as a JSON string."},
       {"inputSchema",
        {{"type", "object"},
         {"properties", {{"path", path_schema("Directory relative to /workspace (default: all of it).")}}}}},
       {"outputSchema", ResultOutputSchema()},
       {"annotations", Annotations("List workspace files", true, true, false)}});
  // What CallTool refuses, the schemas say: no argument but those listed, and a time-out above 0.
  for (json& tool : tools) {
    json& schema = tool["inputSchema"];
    schema["additionalProperties"] = false;
    if (schema["properties"].contains("timeout_seconds"))
      schema["properties"]["timeout_seconds"]["exclusiveMinimum"] = 0;
  }
  return tools;
}

std::string FileToolCode(const std::string& tool, const std::string& path, const std::string& content) {
  if (tool == "write_file") {
    return FileToolScript(path, fmt::format("import base64\n"
                                            "data = base64.b64decode('{}')\n"
                                            "try:\n"
                                            "    os.makedirs(os.path.dirname(p), exist_ok=True)\n"
                                            "    with open(p, 'wb') as f: f.write(data)\n"
                                            "except OSError as e:\n"
                                            "    sys.exit(f'cannot write {{p}}: [Errno {{e.errno}}] {{e.strerror}}')\n"
                                            "print(f'wrote {{len(data)}} bytes to {{p}}')\n",
                                            Base64(content)));
  } else if (tool == "read_file") {
    return FileToolScript(path,
                          "if not os.path.exists(p): sys.exit(f'no such file: {p}')\n"
                          "if not os.path.isfile(p): sys.exit(f'{p} is {kind(p)}, not a regular file')\n"
                          "try:\n"
                          "    with open(p, 'rb') as f: data = f.read()\n"
                          "except OSError as e:\n"
                          "    sys.exit(f'cannot read {p}: [Errno {e.errno}] {e.strerror}')\n"
                          "sys.stdout.write(data.decode('utf-8', 'replace'))\n");
  } else {
    // Symlinks below are listed with their own size (lstat) and not descended into (os.walk's default).
    return FileToolScript(
        path,
        "import json\n"
        "if not os.path.exists(p): sys.exit(f'no such directory: {p}')\n"
        "if not os.path.isdir(p): sys.exit(f'{p} is {kind(p)}, not a directory')\n"
        "for d, dirs, files in os.walk(p):\n"
        "    dirs[:] = sorted(x for x in dirs if not x.startswith('.nsbox'))\n"
        "    # A link to a directory is among dirs; os.walk does not enter it: listed as a file.\n"
        "    links = [x for x in dirs if os.path.islink(os.path.join(d, x))]\n"
        "    dirs[:] = [x for x in dirs if x not in links]\n"
        "    for f in sorted(files + links):\n"
        "        if f.startswith('.nsbox'): continue\n"
        "        q = os.path.join(d, f)\n"
        "        r = os.path.relpath(q, '/workspace')\n"
        "        # A name with a tab, a newline or another character that is not printable (U+2028 ends a\n"
        "        # line too) would forge lines: such names are JSON strings.\n"
        "        if r.startswith('\"') or not r.isprintable(): r = json.dumps(r)\n"
        "        print(f'{r}\\t{os.lstat(q).st_size}')\n");
  }
}

}  // namespace nsbox::mcp

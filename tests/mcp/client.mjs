// MCP suite: drives `nsbox mcp` with the official TypeScript SDK client over stdio and writes JUnit results.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawn, execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const nsbox = process.env.NSBOX_BIN;
const resultsFile = process.argv[2];
const results = [];

// MCP_FILTER=word runs only the tests whose name holds it (for a quick run by hand).
const filter = process.env.MCP_FILTER || "";

async function test(name, fn) {
  if (!name.includes(filter)) return;
  const started = Date.now();
  try {
    await fn();
    results.push({ name, ms: Date.now() - started });
    console.error(`ok   ${name}`);
  } catch (e) {
    results.push({ name, ms: Date.now() - started, failure: String(e && e.stack || e) });
    console.error(`FAIL ${name}\n${e && e.stack || e}`);
  }
}

async function connect(extraArgs = []) {
  const transport = new StdioClientTransport({ command: nsbox, args: ["mcp", ...extraArgs], stderr: "pipe" });
  const client = new Client({ name: "nsbox-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

// Polls `check` (it may be async) every 100 ms until it is true or `ms` have passed; answers its last value. For
// what ends asynchronously (a session, its mounts): waiting for it, not for a fixed time.
async function until(check, ms = 30000) {
  const end = performance.now() + ms;
  for (;;) {
    const value = await check();
    if (value || performance.now() > end) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// The ids of the live sessions, as `nsbox session ls` lists them (looking at a session does not keep it alive).
const sessionIds = () =>
  JSON.parse(execFileSync(nsbox, ["session", "ls", "--json"], { encoding: "utf8" })).map((s) => s.id);

await test("mcp: initialize negotiates the protocol and lists the code tools", async () => {
  const { client } = await connect();
  const version = client.getServerVersion();
  assert.equal(version.name, "nsbox");
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["execute_code", "list_files", "python_repl", "read_file", "run_python", "write_file"]);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object");
    assert.ok(t.description.length > 40, `${t.name} has a description written for a model`);
  }
  await client.close();
});

await test("mcp: run_python returns the real output of a sandboxed run", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "run_python", arguments: { code: "import os\nprint(sum(range(101)), os.getuid())" } });
  assert.equal(r.isError, false);
  assert.match(text(r), /exit_code: 0/);
  assert.match(text(r), /5050 1000/);
  assert.equal(r.structuredContent.status, "ok");
  assert.equal(r.structuredContent.stdout, "5050 1000\n");
  await client.close();
});

await test("mcp: files written by one call are there for the next (one session per connection)", async () => {
  const { client } = await connect();
  let r = await client.callTool({ name: "write_file", arguments: { path: "data/input.txt", content: "3\n4\n5\n" } });
  assert.equal(r.isError, false, text(r));
  r = await client.callTool({
    name: "execute_code",
    arguments: { language: "python", code: "n = [int(x) for x in open('data/input.txt')]\nopen('out.txt','w').write(str(sum(n)))\nprint('done')" },
  });
  assert.equal(r.isError, false, text(r));
  r = await client.callTool({ name: "read_file", arguments: { path: "out.txt" } });
  assert.equal(r.isError, false, text(r));
  assert.equal(text(r).trim(), "12");
  r = await client.callTool({ name: "list_files", arguments: {} });
  assert.match(text(r), /data\/input\.txt\t6/);
  assert.match(text(r), /out\.txt\t2/);
  await client.close();
});

await test("mcp: execute_code compiles C++: a program runs, a compile error is compile_error with diagnostics", async () => {
  const { client } = await connect();
  const { tools } = await client.listTools();
  const execute = tools.find((t) => t.name === "execute_code");
  assert.ok(execute.inputSchema.properties.language.enum.includes("cpp"), "cpp is offered");
  assert.match(execute.description, /compile_error/);
  let r = await client.callTool({
    name: "execute_code",
    arguments: { language: "cpp", code: "#include <iostream>\nint main() { std::cout << 6 * 7 << std::endl; }" },
  });
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.stdout, "42\n");
  r = await client.callTool({ name: "execute_code", arguments: { language: "cpp", code: "int main() { return undeclared; }" } });
  assert.equal(r.isError, true, text(r));
  assert.equal(r.structuredContent.status, "compile_error");
  assert.match(r.structuredContent.stderr, /undeclared/);
  await client.close();
});

await test("mcp: a failing script is reported with isError and its traceback", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "run_python", arguments: { code: "print('before')\n1/0" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /exit_code: 1/);
  assert.match(text(r), /ZeroDivisionError/);
  assert.match(text(r), /before/);
  await client.close();
});

await test("mcp: a long call is ended by notifications/cancelled and the server keeps serving", async () => {
  const { client } = await connect();
  // Whether another call of the session sees the sleep below: polled (bounded) until it is as `wanted`.
  const sleepSeen = async (wanted) => {
    const code = "import os, time\n" +
      "def sleeping():\n" +
      "    for pid in filter(str.isdigit, os.listdir('/proc')):\n" +
      "        try:\n" +
      "            if open('/proc/%s/cmdline' % pid, 'rb').read() == b'sleep\\x00300\\x00': return True\n" +
      "        except OSError: pass\n" +
      "    return False\n" +
      `for _ in range(300):\n    if sleeping() == ${wanted ? "True" : "False"}: break\n    time.sleep(0.1)\n` +
      "print(sleeping())";
    const r = await client.callTool({ name: "run_python", arguments: { code, timeout_seconds: 60 } }, undefined,
      { timeout: 120000 });
    assert.equal(r.isError, false, text(r));
    return r.structuredContent.stdout === "True\n";
  };
  // Cancelled once the program runs (its first output came), not after a fixed delay; its own time-out (300 s) is
  // far beyond the test.
  const controller = new AbortController();
  let running;
  const started = new Promise((resolve) => { running = resolve; });
  const pending = client.callTool(
    { name: "execute_code", arguments: { language: "bash", code: "echo started; sleep 300", timeout_seconds: 300 } },
    undefined,
    { signal: controller.signal, timeout: 600000, onprogress: (p) => p.message.includes("started") && running() },
  );
  const endedFirst = pending.then((r) => { throw new Error(`it ended before it was cancelled: ${text(r)}`); });
  endedFirst.catch(() => {}); // the cancellation below rejects it too: handled there
  try {
    await Promise.race([started, endedFirst]);
    assert.equal(await sleepSeen(true), true, "another call sees the sleep while it runs");
  } finally {
    controller.abort("user cancelled"); // also when a check above failed: the sleep must not outlive the test
  }
  await assert.rejects(pending);
  assert.equal(await sleepSeen(false), false, "the cancelled sleep did not run to its end");
  const r = await client.callTool({ name: "run_python", arguments: { code: "print('still here')" } });
  assert.match(text(r), /still here/);
  await client.close();
});

await test("mcp: a call with a progress token gets its output as notifications/progress while it runs", async () => {
  const { client } = await connect();
  // The code prints 1, then waits for a file that the client writes (a second call) only once it has seen the 1:
  // without progress it runs into its time-out.
  const code = "import os, time\nprint(1, flush=True)\nwhile not os.path.exists('/workspace/go'):\n" +
    "    time.sleep(0.1)\nprint('go')";
  const progress = [];
  let wrote = null;
  const r = await client.callTool({ name: "run_python", arguments: { code, timeout_seconds: 60 } }, undefined, {
    timeout: 120000,
    onprogress: (p) => {
      progress.push(p);
      if (!wrote && p.message.includes("1"))
        wrote = client.callTool({ name: "write_file", arguments: { path: "go", content: "" } });
    },
  });
  await wrote;
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.stdout, "1\ngo\n");
  // The SDK handles a notification a microtask later than the response it arrived with, and drops a progress
  // notification whose request has been answered: the last chunks may be lost on the client's side. What the
  // client got is the output's start, and the "go" above proves that the 1 came while the program ran.
  const seen = progress.map((p) => p.message).join("");
  assert.ok(seen.startsWith("1") && "1\ngo\n".startsWith(seen), `progress: ${JSON.stringify(seen)}`);
  progress.forEach((p, i) => assert.equal(p.progress, i + 1));
  await client.close();
});

await test("mcp: the per-call timeout ends an endless loop as a timeout", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "execute_code", arguments: { language: "python", code: "while True: pass", timeout_seconds: 1 } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.status, "timeout");
  await client.close();
});

await test("mcp: bad tool arguments are tool results with isError and a fix; an unknown tool is a JSON-RPC error", async () => {
  const { client } = await connect();
  const fails = async (name, args, pattern) => {
    const r = await client.callTool({ name, arguments: args });
    assert.equal(r.isError, true, text(r));
    assert.match(text(r), new RegExp(`invalid arguments for ${name}: `));
    assert.match(text(r), pattern);
  };
  await fails("execute_code", { code: "print(1)" }, /'language' must be a string, one of bash, c, cpp, go, java, node, python, rust, sh, typescript/);
  await fails("execute_code", { language: "ruby", code: "puts 1" }, /unknown language.*ruby/);
  await fails("execute_code", { language: 7, code: "print(1)" }, /'language' must be a string/);
  await fails("run_python", {}, /'code' must be a string/);
  await fails("run_python", { code: ["print(1)"] }, /'code' must be a string/);
  await fails("run_python", { code: "print(1)", timeout_seconds: "ten" }, /'timeout_seconds' must be a positive number/);
  // The cap is said as what it does (a larger one is cut to it), not as a bound the model must keep under.
  await fails("run_python", { code: "print(1)", timeout_seconds: -1 }, /one over the cap, \d+, runs for \d+\)/);
  await fails("read_file", { path: "../etc/passwd" }, /\.\./);
  await fails("write_file", { path: "x.txt" }, /'content' must be a string/);
  await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), /unknown tool/);
  const r = await client.callTool({ name: "run_python", arguments: { code: "print('ok')" } });
  assert.match(text(r), /ok/);
  await client.close();
});

await test("mcp: after the session's idle time-out the next call runs in a fresh sandbox and says state was lost", async () => {
  const before = new Set(sessionIds());
  const { client } = await connect(["--idle-timeout", "1s"]);
  let r = await client.callTool({ name: "write_file", arguments: { path: "kept.txt", content: "42" } });
  assert.equal(r.isError, false, text(r));
  const wrote = performance.now();
  // The session ends at its idle time-out: wait for that, and for 1 s from the answer as this client saw it (the
  // server's own idle clock, which says why the session ended, started a little before).
  const ended = await until(() => performance.now() - wrote >= 1000 && sessionIds().every((id) => before.has(id)));
  assert.ok(ended, "the session ended at its idle time-out");
  r = await client.callTool({ name: "run_python", arguments: { code: "import os; print(os.path.exists('kept.txt'))" } });
  assert.equal(r.isError, false, text(r));
  assert.match(text(r), /had ended \(it was idle for .* longer than its idle time-out of 1 s\)/);
  assert.match(text(r), /files, installed packages and Python state from earlier calls are gone/);
  assert.match(text(r), /False/);
  assert.equal(r.structuredContent.status, "ok");
  r = await client.callTool({ name: "run_python", arguments: { code: "print('again')" } });
  assert.doesNotMatch(text(r), /had ended/, "the new session serves the next call without a note");
  assert.match(text(r), /again/);
  await client.close();
});

await test("mcp: the operator's --max-timeout caps a model's timeout_seconds of 1e9", async () => {
  const { client } = await connect(["--max-timeout", "1s"]);
  const { tools } = await client.listTools();
  const timeoutText = tools.find((t) => t.name === "execute_code").inputSchema.properties.timeout_seconds.description;
  assert.match(timeoutText, /a longer one is cut to 1, the operator's cap/);
  const r = await client.callTool({ name: "execute_code", arguments: { language: "bash", code: "sleep 20", timeout_seconds: 1e9 } });
  // Under 1e9 s the sleep would end "ok": the cap ended it, as its reason says.
  assert.equal(r.structuredContent.status, "timeout");
  assert.match(r.structuredContent.reason, /time limit of 1000 ms exceeded/);
  assert.match(text(r), /over the operator's cap; this run was limited to 1 s/);
  await client.close();
});

await test("mcp: --max-timeout caps a compile step too, not only the program's run", async () => {
  // The C++ compile step has 60 s in the language table; this compile evaluates constexpr loops until g++'s
  // operation limit (then fails): seconds on any machine, far over the cap (hello world with <iostream> alone took
  // 200 ms on a quiet machine: too close to it). The comment makes each run's source new.
  const { client } = await connect(["--timeout", "200ms", "--max-timeout", "200ms"]);
  const code = `#include <iostream>\n// ${Date.now()}\nconstexpr long spin() {\n  long s = 0;\n` +
    `  for (long i = 0; i < 20000; ++i)\n    for (long j = 0; j < 20000; ++j) s += i ^ j;\n  return s;\n}\n` +
    `static_assert(spin() != 0, "");\nint main() { std::cout << spin(); }`;
  const r = await client.callTool({ name: "execute_code", arguments: { language: "cpp", code } });
  // The cap, not the language table's 60 s or g++'s own error, ended the compile, as the reason says.
  assert.equal(r.structuredContent.status, "compile_error", text(r));
  assert.match(text(r), /compile step timeout: wall-clock time limit of 200 ms exceeded/);
  await client.close();
});

await test("mcp: --timeout is the default limit and --output-limit the bytes kept; bad caps are refused", async () => {
  const { client } = await connect(["--timeout", "1s", "--output-limit", "1K"]);
  let r = await client.callTool({ name: "execute_code", arguments: { language: "bash", code: "sleep 20" } });
  assert.equal(r.structuredContent.status, "timeout");
  assert.match(r.structuredContent.reason, /time limit of 1000 ms exceeded/);
  // Its own time-out: only the output limit is under test here, not how fast Python starts.
  r = await client.callTool({ name: "run_python", arguments: { code: "print('x' * 100000)", timeout_seconds: 30 } });
  assert.equal(r.structuredContent.stdout_bytes, 100001);
  assert.equal(r.structuredContent.stdout_truncated, true);
  assert.ok(r.structuredContent.stdout.length <= 1100, `kept ${r.structuredContent.stdout.length} bytes`);
  await client.close();
  for (const args of [["--timeout", "20m", "--max-timeout", "1m"], ["--output-limit", "lots"], ["--max-timeout", "soon"]]) {
    let stderr = "";
    const child = spawn(nsbox, ["mcp", ...args], { stdio: ["pipe", "pipe", "pipe"] });
    child.stderr.on("data", (d) => (stderr += d));
    child.stdin.end();
    const code = await new Promise((resolve) => child.on("exit", resolve));
    assert.equal(code, 125, args.join(" "));
    assert.match(stderr, /^nsbox mcp: --(timeout|output-limit|max-timeout)/, stderr);
  }
});

await test("mcp: structuredContent is clipped as the text content is", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "run_python", arguments: { code: "import sys\nprint('y' * 1200000)\nprint('end', file=sys.stderr)" } });
  const s = r.structuredContent;
  assert.equal(s.stdout_bytes, 1200001);
  assert.ok(s.stdout.length < 25000, `structured stdout is ${s.stdout.length} bytes`);
  assert.ok(s.stdout_clipped_bytes > 1000000);
  assert.ok(text(r).includes(s.stdout), "the structured stdout is the text's stdout section");
  assert.equal(s.stderr, "end\n");
  await client.close();
});

await test("mcp: python_repl keeps variables between calls; run_python does not, and the descriptions say so", async () => {
  const { client } = await connect();
  const { tools } = await client.listTools();
  assert.match(tools.find((t) => t.name === "python_repl").description, /KEEPS STATE/);
  assert.match(tools.find((t) => t.name === "run_python").description, /fresh process.*use python_repl/);
  let r = await client.callTool({ name: "python_repl", arguments: { code: "x = 5\nimport math" } });
  assert.equal(r.isError, false, text(r));
  r = await client.callTool({ name: "python_repl", arguments: { code: "print(x)\nmath.factorial(x)" } });
  assert.equal(r.isError, false, text(r));
  assert.match(text(r), /stdout:\n5\n120\n/);
  r = await client.callTool({ name: "python_repl", arguments: { code: "undefined_name" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /NameError/);
  r = await client.callTool({ name: "run_python", arguments: { code: "print(x)" } });
  assert.equal(r.isError, true);
  assert.match(text(r), /NameError/);
  await client.close();
});

await test("mcp: tools carry outputSchema and annotations, and results conform", async () => {
  const { client } = await connect();
  const { tools } = await client.listTools();
  for (const t of tools) {
    assert.equal(t.outputSchema.type, "object", t.name);
    assert.equal(typeof t.annotations.title, "string", t.name);
    assert.equal(typeof t.annotations.readOnlyHint, "boolean", t.name);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.read_file.annotations.readOnlyHint, true);
  assert.equal(byName.list_files.annotations.readOnlyHint, true);
  assert.equal(byName.write_file.annotations.readOnlyHint, false);
  assert.equal(byName.write_file.annotations.idempotentHint, true);
  assert.equal(byName.execute_code.annotations.openWorldHint, false, "no network by default");
  // The SDK checks structuredContent against the outputSchema it listed: a mismatch would throw here.
  for (const [name, args] of [["run_python", { code: "print(1)" }], ["write_file", { path: "a", content: "b" }],
                              ["read_file", { path: "a" }], ["list_files", {}], ["python_repl", { code: "1" }]]) {
    const r = await client.callTool({ name, arguments: args });
    assert.equal(r.isError, false, `${name}: ${text(r)}`);
    for (const key of byName[name].outputSchema.required) assert.ok(key in r.structuredContent, `${name} ${key}`);
  }
  await client.close();
});

await test("mcp: file tools say what a path is instead, stay inside /workspace and fail in one clear line", async () => {
  const { client } = await connect();
  let r = await client.callTool({
    name: "execute_code",
    arguments: { language: "bash", code: "mkfifo pipe && mkdir dir locked && chmod 555 locked && ln -s /etc dl && ln -s /etc/passwd pw && touch \"$(printf 'x\\tforged\\n9')\" && touch \"$(printf 'y\\u2028forged')\" && echo ready" },
  });
  assert.equal(r.isError, false, text(r));
  const fails = async (tool, args, pattern) => {
    const r = await client.callTool({ name: tool, arguments: args });
    assert.equal(r.isError, true, text(r));
    assert.match(text(r), /exit_code: 1/);
    assert.match(text(r), pattern);
    assert.doesNotMatch(text(r), /Traceback/);
  };
  await fails("read_file", { path: "pipe" }, /\/workspace\/pipe is a FIFO, not a regular file/);
  await fails("read_file", { path: "dir" }, /\/workspace\/dir is a directory, not a regular file/);
  await fails("read_file", { path: "pw" }, /\/workspace\/pw leads outside \/workspace/);
  await fails("list_files", { path: "dl" }, /\/workspace\/dl leads outside \/workspace/);
  await fails("list_files", { path: "pipe" }, /is a FIFO, not a directory/);
  await fails("write_file", { path: ".", content: "x" }, /cannot write \/workspace\/\.: \[Errno 21\] Is a directory/);
  await fails("write_file", { path: "locked/x", content: "x" }, /cannot write \/workspace\/locked\/x: \[Errno 13\] Permission denied/);
  await fails("write_file", { path: "dl/x", content: "x" }, /leads outside \/workspace/);
  r = await client.callTool({ name: "write_file", arguments: { path: "/workspacex/a", content: "x" } });
  assert.equal(r.isError, true, text(r));
  assert.equal(text(r), "invalid arguments for write_file: path must be inside /workspace");
  r = await client.callTool({ name: "list_files", arguments: {} });
  assert.equal(r.isError, false, text(r));
  assert.doesNotMatch(text(r), /^dl\//m, "the listing does not descend into a symlink");
  assert.match(text(r), /^dl\t4$/m, "a symlink to a directory is listed, with its own size");
  assert.match(text(r), /^pw\t11$/m, "a symlink is listed with its own size");
  assert.match(text(r), /^"x\\tforged\\n9"\t0$/m, "a name with a tab and a newline is a JSON string");
  assert.doesNotMatch(text(r), /^9\t/m, "and forges no line");
  assert.match(text(r), /^"y\\u2028forged"\t0$/m, "so is one with U+2028, which ends a line too");
  await client.close();
});

// Raw protocol: malformed lines must get spec errors and the server must live on.
await test("mcp: malformed JSON, invalid requests and unknown methods get JSON-RPC errors", async () => {
  const child = spawn(nsbox, ["mcp"], { stdio: ["pipe", "pipe", "pipe"] });
  const lines = [];
  let buffer = "";
  child.stdout.on("data", (d) => {
    buffer += d;
    let i;
    while ((i = buffer.indexOf("\n")) >= 0) {
      lines.push(JSON.parse(buffer.slice(0, i)));
      buffer = buffer.slice(i + 1);
    }
  });
  const send = (s) => child.stdin.write(s + "\n");
  send("{not json");
  send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2024-11-05", capabilities: {}, clientInfo: { name: "raw", version: "0" } } }));
  send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  send(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "no/such/method" }));
  send(JSON.stringify({ id: 3, method: "ping" }));
  send(JSON.stringify({ jsonrpc: "2.0", id: 4, method: "tools/call", params: "nope" }));
  send(JSON.stringify({ jsonrpc: "2.0", id: 5, method: "ping" }));
  send(JSON.stringify({ jsonrpc: "2.0", id: 6, method: "initialize", params: { protocolVersion: "1999-01-01", capabilities: {}, clientInfo: { name: "raw", version: "0" } } }));
  // A key twice: which "name" would run? Neither: a parse error.
  send('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "run_python", "name": "x"}}');
  // Eight answers are due (two parse errors, ids 1 to 6): the input ends once they came (or after 30 s).
  await until(() => lines.length >= 8);
  child.stdin.end();
  const code = await new Promise((r) => child.on("exit", r));
  const byId = (id) => lines.find((l) => l.id === id);
  assert.equal(lines[0].error.code, -32700);
  assert.equal(lines[0].id, null);
  assert.equal(byId(1).result.protocolVersion, "2024-11-05");
  assert.equal(byId(2).error.code, -32601);
  assert.equal(byId(3).error.code, -32600);
  assert.equal(byId(4).error.code, -32602);
  assert.deepEqual(byId(5).result, {});
  assert.equal(byId(6).result.protocolVersion, "2025-11-25");
  const twice = lines.find((l) => l.error && /the key "name" twice/.test(l.error.message));
  assert.ok(twice && twice.error.code === -32700 && twice.id === null, JSON.stringify(lines));
  assert.equal(code, 0);
});

await test("mcp: a killed server leaves no session, process or mount behind", async () => {
  const before = new Set(sessionIds());
  const { client, transport } = await connect();
  const r = await client.callTool({ name: "run_python", arguments: { code: "import os; print(os.getpid())" } });
  assert.match(text(r), /exit_code: 0/);
  const ours = sessionIds().filter((id) => !before.has(id));
  assert.ok(ours.length >= 1, "the connection made a session");
  process.kill(transport.pid, "SIGKILL");
  // The session ends with its server, asynchronously: wait for it (bounded), then for its mounts to go.
  assert.ok(await until(() => !sessionIds().some((id) => ours.includes(id))), "the killed server's session ended");
  const noNsboxMounts = () => !/nsbox/.test(execFileSync("cat", ["/proc/mounts"], { encoding: "utf8" }));
  assert.ok(await until(noNsboxMounts), "no nsbox mounts remain");
});

const xml = [
  `<?xml version="1.0" encoding="UTF-8"?>`,
  `<testsuites><testsuite name="mcp" tests="${results.length}" failures="${results.filter((r) => r.failure).length}">`,
  ...results.map((r) => {
    const name = r.name.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;");
    if (!r.failure) return `<testcase classname="mcp" name="${name}" time="${r.ms / 1000}"/>`;
    const body = r.failure.replace(/]]>/g, "]]]]><![CDATA[>");
    return `<testcase classname="mcp" name="${name}" time="${r.ms / 1000}"><failure><![CDATA[${body}]]></failure></testcase>`;
  }),
  `</testsuite></testsuites>`,
].join("\n");
writeFileSync(resultsFile, xml);
process.exit(0);

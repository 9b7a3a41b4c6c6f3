// MCP suite: drives `nsbox mcp` with the official TypeScript SDK client over stdio and writes JUnit results.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawn, execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const nsbox = process.env.NSBOX_BIN;
const resultsFile = process.argv[2];
const results = [];

async function test(name, fn) {
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

async function connect() {
  const transport = new StdioClientTransport({ command: nsbox, args: ["mcp"], stderr: "pipe" });
  const client = new Client({ name: "nsbox-test", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

await test("mcp: initialize negotiates the protocol and lists the code tools", async () => {
  const { client } = await connect();
  const version = client.getServerVersion();
  assert.equal(version.name, "nsbox");
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["execute_code", "list_files", "read_file", "run_python", "write_file"]);
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
  const controller = new AbortController();
  const started = Date.now();
  const pending = client.callTool(
    { name: "execute_code", arguments: { language: "bash", code: "sleep 60" } },
    undefined,
    { signal: controller.signal, timeout: 120000 },
  );
  setTimeout(() => controller.abort("user cancelled"), 1500);
  await assert.rejects(pending);
  const r = await client.callTool({ name: "run_python", arguments: { code: "print('still here')" } });
  assert.match(text(r), /still here/);
  assert.ok(Date.now() - started < 30000, "the cancelled sleep did not run to its end");
  await client.close();
});

await test("mcp: the per-call timeout ends an endless loop as a timeout", async () => {
  const { client } = await connect();
  const r = await client.callTool({ name: "execute_code", arguments: { language: "python", code: "while True: pass", timeout_seconds: 1 } });
  assert.equal(r.isError, true);
  assert.equal(r.structuredContent.status, "timeout");
  await client.close();
});

await test("mcp: bad tool arguments and unknown tools are JSON-RPC errors, not crashes", async () => {
  const { client } = await connect();
  await assert.rejects(client.callTool({ name: "execute_code", arguments: { code: "print(1)" } }), /language/);
  await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), /unknown tool/);
  await assert.rejects(client.callTool({ name: "read_file", arguments: { path: "../etc/passwd" } }), /\.\./);
  const r = await client.callTool({ name: "run_python", arguments: { code: "print('ok')" } });
  assert.match(text(r), /ok/);
  await client.close();
});

await test("mcp: file tools say what a path is instead, stay inside /workspace and fail in one clear line", async () => {
  const { client } = await connect();
  let r = await client.callTool({
    name: "execute_code",
    arguments: { language: "bash", code: "mkfifo pipe && mkdir dir locked && chmod 555 locked && ln -s /etc dl && ln -s /etc/passwd pw && echo ready" },
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
  r = await client.callTool({ name: "list_files", arguments: {} });
  assert.equal(r.isError, false, text(r));
  assert.doesNotMatch(text(r), /^dl\//m, "the listing does not descend into a symlink");
  assert.match(text(r), /^pw\t11$/m, "a symlink is listed with its own size");
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
  await new Promise((r) => setTimeout(r, 1500));
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
  assert.equal(code, 0);
});

await test("mcp: a killed server leaves no session, process or mount behind", async () => {
  const { client, transport } = await connect();
  const r = await client.callTool({ name: "run_python", arguments: { code: "import os; print(os.getpid())" } });
  assert.match(text(r), /exit_code: 0/);
  const sessionsBefore = JSON.parse(execFileSync(nsbox, ["session", "ls", "--json"], { encoding: "utf8" }));
  assert.ok(sessionsBefore.length >= 1, "the connection made a session");
  process.kill(transport.pid, "SIGKILL");
  const deadline = Date.now() + 10000;
  let sessions = sessionsBefore;
  while (Date.now() < deadline) {
    sessions = JSON.parse(execFileSync(nsbox, ["session", "ls", "--json"], { encoding: "utf8" }));
    if (sessions.length < sessionsBefore.length) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(sessions.length < sessionsBefore.length, "the killed server's session ended");
  const mounts = execFileSync("cat", ["/proc/mounts"], { encoding: "utf8" });
  assert.ok(!/nsbox/.test(mounts), "no nsbox mounts remain");
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

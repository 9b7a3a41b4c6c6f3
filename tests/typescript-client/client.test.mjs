// tests/typescript-client/client.test.mjs: the TypeScript client against a real `nsbox serve` (NSBOX_URL).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import OpenAI from 'openai';
import {
  Sandbox, NotFoundError, ServerGoneError, RefusedError, NsboxError, clip, formatToolOutput, runPythonTool,
  RUN_PYTHON_JSON_SCHEMA, defaultSocket,
} from 'nsbox';
import { runPython } from 'nsbox/ai';
import { startScriptedOpenAI, PRIME_PROGRAM } from './scripted-openai.mjs';

const USAGE = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 } };

const made = [];
async function create(opts) {
  const sbx = await Sandbox.create(opts);
  made.push(sbx);
  return sbx;
}
after(async () => {
  for (const s of made) await s.terminate().catch(() => {});
});

test('the default socket is where nsbox serve puts it: /run for root, XDG_RUNTIME_DIR, else /tmp/nsbox-UID', () => {
  const geteuid = process.geteuid;
  const xdg = process.env.XDG_RUNTIME_DIR;
  try {
    process.geteuid = () => 0;
    assert.equal(defaultSocket(), '/run/nsbox/api.sock');
    process.geteuid = () => 1000;
    process.env.XDG_RUNTIME_DIR = '/run/u';
    assert.equal(defaultSocket(), '/run/u/nsbox/api.sock');
    delete process.env.XDG_RUNTIME_DIR;  // cron, ssh without logind: not root's socket
    assert.equal(defaultSocket(), '/tmp/nsbox-1000/api.sock');
    // A directory another user made there first is refused: its owner could listen for the user's code.
    const dir = '/tmp/nsbox-4242';
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { mode: 0o700 });
    try {
      process.geteuid = () => 4242;
      fs.chownSync(dir, 4243, 4243);
      assert.throws(() => defaultSocket(), (e) => e instanceof NsboxError && /belongs to uid 4243/.test(e.message));
      fs.chownSync(dir, 4242, 4242);
      fs.chmodSync(dir, 0o777);
      assert.throws(() => defaultSocket(), /writable by other users \(mode 0777\)/);
      fs.chmodSync(dir, 0o700);
      assert.equal(defaultSocket(), `${dir}/api.sock`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    process.geteuid = geteuid;
    if (xdg === undefined) delete process.env.XDG_RUNTIME_DIR;
    else process.env.XDG_RUNTIME_DIR = xdg;
  }
});

test('files round trip is binary-safe, lists and removes', async () => {
  const sbx = await create();
  const bytes = Buffer.alloc(256 * 4);
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256;
  const wrote = await sbx.files.write('sub/dir/all-bytes.bin', bytes);
  assert.equal(wrote.size, bytes.length);
  assert.equal(wrote.path, '/workspace/sub/dir/all-bytes.bin');
  assert.deepEqual(await sbx.files.read('/workspace/sub/dir/all-bytes.bin'), bytes);
  await sbx.files.write('text.txt', 'héllo\n');
  assert.equal(await sbx.files.readText('text.txt'), 'héllo\n');
  const r = await sbx.exec('wc -c < sub/dir/all-bytes.bin; cat text.txt');
  assert.equal(r.stdout, `${bytes.length}\nhéllo\n`);
  const names = (await sbx.files.list('sub/dir')).map((e) => `${e.name}:${e.type}:${e.size}`);
  assert.deepEqual(names, [`all-bytes.bin:file:${bytes.length}`]);
  await sbx.files.remove('sub');
  await assert.rejects(sbx.files.read('sub/dir/all-bytes.bin'), NotFoundError);
  await assert.rejects(sbx.files.write('../escape', 'x'), RefusedError);
  // Over 1 MiB a body waits for the server's 100 Continue: a large file arrives whole, and one over the server's
  // --max-body (16M here) is its 413, not the EPIPE of a body written into a closed connection.
  const large = Buffer.alloc(3 << 20, 7);
  assert.equal((await sbx.files.write('large.bin', large)).size, large.length);
  assert.deepEqual(await sbx.files.read('large.bin'), large);
  await assert.rejects(sbx.files.write('huge.bin', Buffer.alloc(17 << 20)),
    (err) => err instanceof RefusedError && err.status === 413);
});

test('a listing cut short by the server says so in its truncated', async () => {
  const sbx = await create({ network: 'none' });
  const r = await sbx.exec('mkdir many && cd many && seq 20005 | xargs touch');
  assert.equal(r.status, 'ok', r.stderr);
  const many = await sbx.files.list('many');
  assert.deepEqual([many.length, many.truncated], [20000, true]);
  const whole = await sbx.files.list('.');
  assert.deepEqual([whole.map((e) => e.name), whole.truncated, Object.keys(whole)], [['many'], false, ['0']]);
});

test('a file name that is not UTF-8 is read, written and removed through its listing entry', async () => {
  const sbx = await create({ network: 'none' });
  const wrote = await sbx.exec(['python3', '-c', 'open(b"/workspace/bad\\xffname & x+y", "wb").write(b"hidden")']);
  assert.equal(wrote.status, 'ok', wrote.stderr);
  const [entry] = (await sbx.files.list('.')).filter((e) => e.name.startsWith('bad'));
  assert.equal(entry.path_encoded, '/workspace/bad%FFname%20%26%20x%2By');
  assert.equal((await sbx.files.read(entry)).toString(), 'hidden');
  assert.equal(await sbx.files.readText(wrote.changedFiles[0]), 'hidden');
  await sbx.files.write(entry, 'rewritten');
  assert.equal((await sbx.exec('cat /workspace/bad*')).stdout, 'rewritten');
  await sbx.files.remove(entry);
  assert.deepEqual(await sbx.files.list('.'), []);
  await assert.rejects(sbx.files.read({ path_encoded: '/workspace/x&list=true' }), TypeError);
});

const shortDefault = process.env.NSBOX_DEFAULT_TIMEOUT_5_URL;
test('an exec without a timeout runs under the client\'s 60 s, not the server\'s own default (5 s)',
  { skip: !shortDefault && 'NSBOX_DEFAULT_TIMEOUT_5_URL names no server (run-suite starts it)' }, async () => {
    const sbx = await create({ url: shortDefault });
    const r = await sbx.exec('sleep 6; echo done'); // 60 s sent, capped at the server's --max-timeout 30
    assert.deepEqual([r.status, r.stdout], ['ok', 'done\n']);
  });

test('exec of a failing program is a result with its exit code, not an error', async () => {
  const sbx = await create();
  const r = await sbx.exec(['sh', '-c', 'echo out; echo err >&2; exit 3']);
  assert.equal(r.status, 'exit');
  assert.equal(r.exitCode, 3);
  assert.equal(r.ok, false);
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.raw.exit_code, 3);
  const code = await sbx.runCode('import sys; print(6 * 7); sys.exit(0)');
  assert.equal(code.status, 'ok');
  assert.equal(code.stdout, '42\n');
});

test('a compiled language\'s compile step has its own time-out and memory limit', async () => {
  const sbx = await create({ limits: { memory: '256M', pids: 64 } });
  const ran = await sbx.runCode('int main(void) { return 4; }',
    { language: 'c', compileTimeout: 30, compileMemory: '128M' });
  assert.deepEqual([ran.status, ran.exitCode, ran.raw.compile.status], ['exit', 4, 'ok']);
  // 8M, well under what cc1plus allocates: at 16M it could thrash on its text pages until its time-out (cgroup v1).
  const oom = await sbx.runCode('#include <iostream>\nint main() { std::cout << 1; }',
    { language: 'cpp', compileMemory: '8M' });
  assert.deepEqual([oom.status, oom.raw.compile.status], ['compile_error', 'oom']);
  await assert.rejects(sbx.runCode('print(1)', { compileMemory: '64M' }), (err) => /compile_memory/.test(err.message));
});

test('a time-out past what a timer holds is capped by the server; a malformed one is its 400', async () => {
  const sbx = await create();
  const r = await sbx.exec('sleep 1; echo done', { timeout: 2147484 });
  assert.equal(r.stdout, 'done\n');
  await assert.rejects(sbx.exec('true', { timeout: 'abc' }), RefusedError);
  await assert.rejects(sbx.exec('true', { timeout: 'abc', onStdout: () => {} }), RefusedError);
});

test('streaming delivers chunks while the program still runs, then the result', async () => {
  const sbx = await create();
  const events = [];
  // The program prints, then waits for a file that only the onStdout callback writes: it can end only if the
  // first chunk reached the client before the program finished (else it runs into its time-out).
  const program = 'import os, time, sys\nprint("first", flush=True)\n' +
    'while not os.path.exists("/workspace/go"):\n    time.sleep(0.05)\nprint("second")\n';
  await sbx.files.write('stream.py', program);
  let wroteGo = null;
  const r = await sbx.exec(['python3', 'stream.py'], {
    timeout: 60,
    onStdout: (chunk) => {
      events.push(['stdout', chunk]);
      if (!wroteGo) wroteGo = sbx.files.write('go', '1');
    },
    onStderr: (chunk) => events.push(['stderr', chunk]),
  });
  events.push(['result']);
  await wroteGo;
  assert.equal(r.status, 'ok', r.reason);
  assert.equal(r.stdout, 'first\nsecond\n');
  assert.equal(events[0][0], 'stdout');
  assert.equal(events.at(-1)[0], 'result');
  assert.equal(events.filter((e) => e[0] === 'stdout').map((e) => e[1]).join(''), 'first\nsecond\n');
});

test('a REPL cell, answered by its result alone, still reaches onStdout and onStderr', async () => {
  const sbx = await create();
  await sbx.runCode('x = 6 * 7', { repl: true });
  const out = [];
  const err = [];
  const r = await sbx.runCode('import sys\nprint(x)\nprint("w", file=sys.stderr)',
    { repl: true, onStdout: (c) => out.push(c), onStderr: (c) => err.push(c) });
  assert.deepEqual([r.stdout, out, err], ['42\n', ['42\n'], ['w\n']]);
});

test('errors are typed and carry the server message', async () => {
  const err = await Sandbox.connect('sb-000000000000000000000000').catch((e) => e);
  assert.ok(err instanceof NotFoundError, String(err));
  assert.equal(err.status, 404);
  assert.equal(err.code, 'not_found');
  assert.ok(err.message.length > 0 && !err.message.includes('\n'));
  const gone = await Sandbox.create({ url: 'unix:///nonexistent/nsbox-test/api.sock' }).catch((e) => e);
  assert.ok(gone instanceof ServerGoneError, String(gone));
  assert.equal(gone.requestSent, false);
  const bad = await Sandbox.create({ limits: { memory: 'lots' } }).catch((e) => e);
  assert.ok(bad instanceof RefusedError, String(bad));
  assert.equal(bad.status, 400);
});

test('terminate leaves nothing: the sandbox is unknown and not listed', async () => {
  const sbx = await Sandbox.create();
  await sbx.exec('sleep 30 >/dev/null 2>&1 & echo started');
  await sbx.terminate();
  assert.ok(!(await Sandbox.list()).some((s) => s.id === sbx.id));
  await assert.rejects(sbx.exec('true'), NotFoundError);
  await assert.rejects(Sandbox.connect(sbx.id), NotFoundError);
  await sbx.terminate(); // a second terminate is not an error
});

test('clip keeps head and tail with a marker, and the tool output is clipped', () => {
  const text = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join('\n');
  const clipped = clip(text, { limit: 500 });
  assert.ok(clipped.length < 600);
  assert.ok(clipped.startsWith('line 0\n'));
  assert.ok(clipped.endsWith('line 1999'));
  assert.match(clipped, /\[\.\.\. \d+ characters of output cut here/);
  const out = formatToolOutput({ status: 'exit', exit_code: 1, stdout: text, stderr: 'boom' }, { limit: 300 });
  assert.match(out, /^exit_code: 1\nstdout:\nline 0\n/);
  assert.match(out, /stderr:\nboom\n$/);
});

test('AI SDK generateText with its mock model calls run_python and gets the real output', async () => {
  const sbx = await create();
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      const toolMessage = options.prompt.find((m) => m.role === 'tool');
      if (!toolMessage) {
        assert.ok(options.tools.some((t) => t.name === 'run_python'));
        return { content: [{ type: 'tool-call', toolCallId: 'c1', toolName: 'run_python',
          input: JSON.stringify({ code: PRIME_PROGRAM }) }], finishReason: { unified: 'tool-calls', raw: undefined },
        usage: USAGE, warnings: [] };
      }
      const output = toolMessage.content[0].output;
      const text = typeof output.value === 'string' ? output.value : JSON.stringify(output.value);
      return { content: [{ type: 'text', text: `The tool said: ${text}` }],
        finishReason: { unified: 'stop', raw: undefined }, usage: USAGE, warnings: [] };
    },
  });
  const result = await generateText({ model, prompt: 'What is the 1000th prime?',
    tools: { run_python: runPythonTool(sbx) }, stopWhen: stepCountIs(3) });
  const toolResult = result.steps[0].toolResults[0];
  assert.equal(toolResult.toolName, 'run_python');
  assert.equal(toolResult.output, 'exit_code: 0\nstdout:\n7919\nstderr: (empty)\n');
  assert.match(result.text, /stdout:\n7919\n/);
  assert.deepEqual(await sbx.files.list(), [], 'the tool leaves no file in the workspace');
});

test('the AI SDK runs a step\'s tool calls at once, and each gets its own output', async () => {
  const sbx = await create();
  // This sandbox answers a files.write only once every call of the step has written (as a busy server may): a tool
  // whose calls shared a file would then run the last call's code every time.
  const calls = 4;
  let written = 0;
  let allWritten;
  const barrier = new Promise((resolve) => { allWritten = resolve; });
  const gated = Object.create(sbx);
  gated.files = Object.create(sbx.files);
  gated.files.write = async (...args) => {
    const answer = await sbx.files.write(...args);
    if (++written === calls) allWritten();
    await barrier;
    return answer;
  };
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      if (!options.prompt.some((m) => m.role === 'tool')) {
        return { content: Array.from({ length: calls }, (_, i) => ({ type: 'tool-call', toolCallId: `c${i}`,
          toolName: 'run_python', input: JSON.stringify({ code: `print("call ${i}")` }) })),
        finishReason: { unified: 'tool-calls', raw: undefined }, usage: USAGE, warnings: [] };
      }
      return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: undefined },
        usage: USAGE, warnings: [] };
    },
  });
  const result = await generateText({ model, prompt: 'Run four programs.', tools: { run_python: runPythonTool(gated) },
    stopWhen: stepCountIs(2) });
  const outputs = Object.fromEntries(result.steps[0].toolResults.map((r) => [r.toolCallId, r.output]));
  assert.deepEqual(outputs, Object.fromEntries(Array.from({ length: calls },
    (_, i) => [`c${i}`, `exit_code: 0\nstdout:\ncall ${i}\nstderr: (empty)\n`])));
  assert.deepEqual(await sbx.files.list(), [], 'the tool leaves no file in the workspace');
});

test('the openai SDK with a scripted server answers the 1000th prime from a real run', async () => {
  const { server, requests, baseURL } = await startScriptedOpenAI();
  const sbx = await create();
  try {
    const openai = new OpenAI({ baseURL, apiKey: 'test-key', maxRetries: 0 });
    const messages = [{ role: 'user', content: 'What is the 1000th prime?' }];
    const tools = [{ type: 'function', function: { name: 'run_python', description: 'Runs Python code.',
      parameters: RUN_PYTHON_JSON_SCHEMA } }];
    let answer = null;
    for (let turn = 0; turn < 4 && answer === null; turn++) {
      const completion = await openai.chat.completions.create({ model: 'scripted', messages, tools });
      const msg = completion.choices[0].message;
      messages.push(msg);
      if (!msg.tool_calls?.length) {
        answer = msg.content;
        break;
      }
      for (const call of msg.tool_calls) {
        const { code } = JSON.parse(call.function.arguments);
        messages.push({ role: 'tool', tool_call_id: call.id, content: await runPython(sbx, code) });
      }
    }
    assert.equal(answer, 'The 1000th prime is 7919.');
    assert.equal(requests.length, 2);
    assert.equal(requests[1].body.messages.at(-1).content, 'exit_code: 0\nstdout:\n7919\nstderr: (empty)\n');
  } finally {
    server.close();
  }
});

test('a bad NSBOX_URL is an error naming it', async () => {
  await assert.rejects(Sandbox.create({ url: 'ftp://x' }),
    (e) => e instanceof NsboxError && /ftp:\/\/x/.test(e.message));
});

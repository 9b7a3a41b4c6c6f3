// tests/typescript-client/scripted-openai.mjs: a local OpenAI-compatible chat server that scripts a tool call.
// First turn: a run_python call with a program computing the 1000th prime. Next turn: an answer quoting the
// number found in the tool message, so the answer is what the sandbox printed, never a constant of this script.
import http from 'node:http';

export const PRIME_PROGRAM = [
  'n, count = 1, 0',
  'while count < 1000:',
  '    n += 1',
  '    if all(n % d for d in range(2, int(n ** 0.5) + 1)):',
  '        count += 1',
  'print(n)',
].join('\n');

export function startScriptedOpenAI() {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const request = JSON.parse(body || '{}');
      requests.push({ url: req.url, body: request });
      const tool = [...(request.messages ?? [])].reverse().find((m) => m.role === 'tool');
      const message = tool
        ? { role: 'assistant', content: `The 1000th prime is ${(/stdout:\n(\d+)/.exec(tool.content) ?? [])[1]}.` }
        : { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'run_python', arguments: JSON.stringify({ code: PRIME_PROGRAM }) } }] };
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', created: 0, model: request.model,
        choices: [{ index: 0, message, finish_reason: tool ? 'stop' : 'tool_calls' }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () =>
    resolve({ server, requests, baseURL: `http://127.0.0.1:${server.address().port}/v1` })));
}

#!/usr/bin/python3
# fake_provider.py: a scripted LLM on 127.0.0.1 speaking the Anthropic Messages and OpenAI Chat Completions wire formats; it checks every request and plays fixed conversations.
"""Scripted model for the agent tests.

Prints "PORT=<n>" on stdout once listening (the OS picks the port). Each request is checked as the
API references describe (headers, tools declared, message order, tool result ids matching the
tool call ids this server issued); a request that breaks a rule gets HTTP 400 with the rule in the
error message, and is recorded under POST /_control/problems. The conversation played is chosen by
the prompt (the first user message): the prime question, or a "[scenario:NAME]" tag. The model's
next move is computed from the history it is sent, so the answers echo what the tools really
printed; nothing the code prints is scripted here.
"""
import argparse
import base64
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANTHROPIC_VERSION = "2023-06-01"
PRIME_PROMPT = "What is the 1000th prime number? Verify by computing it."

PRIME_CODE = """def nth_prime(n):
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            count += 1
    return candidate

print(nth_prime(1000))
"""
BUGGY_CODE = "numbers = [4, 8, 15, 16, 23, 42]\nprint(sum(numbers) / len(numbrs))\n"
FIXED_CODE = "numbers = [4, 8, 15, 16, 23, 42]\nprint(sum(numbers) / len(numbers))\n"
LOOP_CODE = "while True:\n    pass\n"
FLOOD_CODE = "for i in range(200000):\n    print(i)\n"
COUNT_CODE = "with open('count.txt', 'a') as f:\n    f.write('x')\nprint('runs:', len(open('count.txt').read()))\n"

state_lock = threading.Lock()
problems = []
requests_seen = []
issued_ids = set()
prompt_hits = {}


class Problem(Exception):
    pass


def stdout_of(result):
    """The stdout section of a tool result as nsbox agent formats it."""
    m = re.search(r"^stdout:\n(.*?)^stderr:", result, re.S | re.M)
    return m.group(1) if m else ""


def new_id(prefix):
    i = prefix + uuid.uuid4().hex[:16]
    with state_lock:
        issued_ids.add(i)
    return i


# ---- the conversations: (prompt, turn index, tool results of the last turn) -> next move ----
# A move is ("tools", [(tool, input), ...]), optionally with the text before the calls as a third element, or
# ("text", answer).

def python_call(fmt, code):
    # Anthropic conversations use run_python, OpenAI ones execute_code, so both tools are exercised.
    if fmt == "anthropic":
        return ("run_python", {"code": code})
    return ("execute_code", {"language": "python", "code": code})


def require(cond, what):
    if not cond:
        raise Problem(what)


def next_move(fmt, prompt, turn, results):
    if prompt == PRIME_PROMPT:
        if turn == 0:
            return ("tools", [python_call(fmt, PRIME_CODE)])
        r = results[0]
        require(r.startswith("exit_code: 0"), "prime: expected exit_code: 0, got: " + r[:300])
        return ("text", "The 1000th prime number is %s (I computed it by running the code)." % stdout_of(r).strip())
    if "[scenario:fix]" in prompt:
        if turn == 0:
            return ("tools", [python_call(fmt, BUGGY_CODE)])
        if turn == 1:
            r = results[0]
            require(r.startswith("exit_code: 1"), "fix: expected exit_code: 1 for the bug, got: " + r[:300])
            require("Traceback" in r and "NameError" in r, "fix: expected the traceback in the result, got: " + r[:500])
            return ("tools", [python_call(fmt, FIXED_CODE)])
        r = results[0]
        require(r.startswith("exit_code: 0"), "fix: expected the fixed code to succeed, got: " + r[:300])
        return ("text", "After fixing the typo, the mean is %s." % stdout_of(r).strip())
    if "[scenario:loop]" in prompt:
        if turn == 0:
            return ("tools", [python_call(fmt, LOOP_CODE)])
        r = results[0]
        status = [line for line in r.splitlines() if line.startswith("status:")]
        require(status, "loop: expected a status line, got: " + r[:300])
        return ("text", "The program never finished; the sandbox reported %s" % status[0])
    if "[scenario:flood]" in prompt:
        if turn == 0:
            return ("tools", [python_call(fmt, FLOOD_CODE)])
        r = results[0]
        out = stdout_of(r)
        notes = [line for line in r.splitlines() if line.startswith("[... ")]
        require(notes, "flood: expected a note of what was cut, got: " + r[:300])
        require(out.startswith("0\n1\n2\n"), "flood: expected the head of the output, got: " + out[:100])
        last = [line for line in out.splitlines() if line and not line.startswith("[")][-1]
        return ("text", "The output was clipped (%s); it was %d bytes as I received it and its last line was %s."
                % (notes[0], len(r.encode()), last))
    if "[scenario:ratelimit]" in prompt:
        if turn == 0:
            return ("tools", [python_call(fmt, "print(6 * 7)")])
        return ("text", "6 * 7 = %s" % stdout_of(results[0]).strip())
    if "[scenario:parallel]" in prompt:
        if turn == 0:
            return ("tools", [("run_python", {"code": "print('from python')"}),
                              ("execute_code", {"language": "bash", "code": "echo from bash"})])
        require(len(results) == 2, "parallel: expected two tool results, got %d" % len(results))
        return ("text", " and ".join(stdout_of(r).strip() for r in results))
    if "[scenario:repeat]" in prompt:
        if turn < 2:
            return ("tools", [python_call(fmt, COUNT_CODE)])  # turn 1 reuses turn 0's id (see below)
        return ("text", "second answer: " + results[0].splitlines()[0] + " | " + stdout_of(results[0]).strip())
    if "[scenario:workspace]" in prompt:
        if turn == 0:
            return ("tools", [python_call(fmt, "import os\nprint(open('/workspace/marker.txt').read(), os.getcwd())")])
        return ("text", "the workspace says: " + stdout_of(results[0]).strip())
    if "[scenario:forever]" in prompt:
        return ("tools", [python_call(fmt, "print('again')")])
    if "[scenario:escape]" in prompt:  # a terminal escape sequence in the model's words before its call
        if turn == 0:
            return ("tools", [python_call(fmt, "print(1)")], "look \x1b]0;pwned\x07 here")
        return ("text", "done")
    if "[scenario:many]" in prompt:  # more tool calls in one answer than a turn runs
        if turn == 0:
            return ("tools", [("run_python", {"code": "print(%d)" % i}) for i in range(20)])
        not_run = [r for r in results if r.startswith("error: not run: one turn runs at most")]
        ran = [r for r in results if r.startswith("exit_code: 0")]
        return ("text", "ran %d, not run %d of %d" % (len(ran), len(not_run), len(results)))
    if "[scenario:stringinput]" in prompt:  # a tool_use whose input is a string, not an object
        if turn == 0:
            return ("tools", [("run_python", "print(1)")])
        return ("text", "told: " + results[0])
    if "[scenario:bloat]" in prompt:  # every answer carries 12 MiB the history keeps and sends back
        return ("tools", [python_call(fmt, "print(1)")], "pad " + "y" * (12 << 20))
    if "[scenario:escapeout]" in prompt:  # the code prints a terminal escape sequence, which the model repeats
        if turn == 0:
            return ("tools", [python_call(fmt, "print('\\x1b]0;TITLE\\x07 ok')")])
        return ("text", "it said " + stdout_of(results[0]).strip())
    if "[scenario:badargs]" in prompt:
        if turn == 0:
            return ("tools", [("execute_code", {"code": "print(1)"})])  # no language
        require(results[0].startswith("error:"), "badargs: expected an error result, got: " + results[0][:200])
        return ("text", "told: " + results[0])
    return ("text", "no scenario for this prompt")


# ---- wire formats ----

def anthropic_response(model, move, reuse_id=None):
    kind, payload = move[:2]
    if kind == "text":
        content, stop = [{"type": "text", "text": payload}], "end_turn"
    else:
        content = [{"type": "text", "text": move[2] if len(move) > 2 else "I will run code to find out."}]
        for tool, tool_input in payload:
            content.append({"type": "tool_use", "id": reuse_id or new_id("toolu_"), "name": tool, "input": tool_input})
        stop = "tool_use"
    return {"id": "msg_" + uuid.uuid4().hex[:20], "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 50}}


def openai_response(model, move, reuse_id=None):
    kind, payload = move[:2]
    message = {"role": "assistant", "content": None}
    if kind == "text":
        message["content"], finish = payload, "stop"
    else:
        message["tool_calls"] = [{"id": reuse_id or new_id("call_"), "type": "function",
                                  "function": {"name": tool, "arguments": json.dumps(tool_input)}}
                                 for tool, tool_input in payload]
        finish = "tool_calls"
    return {"id": "chatcmpl-" + uuid.uuid4().hex[:20], "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}


def check_tools(tools, fmt):
    require(isinstance(tools, list), "tools must be a list")
    by_name = {}
    for t in tools:
        if fmt == "anthropic":
            require(set(t) >= {"name", "description", "input_schema"}, "anthropic tool needs name, description, input_schema")
            by_name[t["name"]] = (t["description"], t["input_schema"])
        else:
            require(t.get("type") == "function", "openai tool needs type function")
            f = t.get("function", {})
            require(set(f) >= {"name", "description", "parameters"}, "openai function needs name, description, parameters")
            by_name[f["name"]] = (f["description"], f["parameters"])
    require(set(by_name) == {"execute_code", "run_python"}, "tools declared: %s" % sorted(by_name))
    for name, (description, schema) in by_name.items():
        require(len(description) > 80, "tool %s: description too short to guide a model" % name)
        require(schema.get("type") == "object", "tool %s: schema type must be object" % name)
    require(set(by_name["execute_code"][1].get("required", [])) == {"language", "code"}, "execute_code must require language and code")
    require(by_name["run_python"][1].get("required") == ["code"], "run_python must require code")


def check_system(text):
    low = text.lower()
    require("never" in low and "run" in low and "output" in low,
            "system prompt must say to run code and never make up output")


def check_anthropic(headers, body, key):
    """Returns (prompt, turn index, last tool results, last tool ids) or raises Problem; 401 is raised as PermissionError."""
    if headers.get("x-api-key") != key:
        raise PermissionError("invalid x-api-key")
    require(headers.get("anthropic-version") == ANTHROPIC_VERSION, "anthropic-version header must be " + ANTHROPIC_VERSION)
    require(headers.get("content-type", "").startswith("application/json"), "content-type must be application/json")
    require(isinstance(body.get("model"), str) and body["model"], "model missing")
    require(isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0, "max_tokens missing")
    require(isinstance(body.get("system"), str), "system prompt missing")
    check_system(body["system"])
    check_tools(body.get("tools"), "anthropic")
    msgs = body.get("messages")
    require(isinstance(msgs, list) and msgs, "messages missing")
    require(msgs[0].get("role") == "user" and isinstance(msgs[0].get("content"), str), "first message must be the user's text")
    for i, m in enumerate(msgs):
        require(m.get("role") == ("user" if i % 2 == 0 else "assistant"), "message %d: roles must alternate user/assistant" % i)
    require(msgs[-1]["role"] == "user", "the last message must be the user's")
    results, last_ids = [], []
    for i in range(1, len(msgs), 2):
        a, u = msgs[i], msgs[i + 1]
        require(isinstance(a.get("content"), list), "assistant message %d: content must be the blocks sent" % i)
        ids = [b["id"] for b in a["content"] if b.get("type") == "tool_use"]
        for b in a["content"]:
            if b.get("type") == "tool_use":  # the API refuses a history whose tool_use input is not an object
                require(isinstance(b.get("input"), dict), "assistant message %d: a tool_use input must be an object" % i)
        for tid in ids:
            require(tid in issued_ids, "assistant message %d: tool_use id %s was never issued" % (i, tid))
        require(ids, "assistant message %d: has no tool_use, yet the conversation went on" % i)
        c = u.get("content")
        require(isinstance(c, list), "user message %d: tool results must be content blocks" % (i + 1))
        require(all(b.get("type") == "tool_result" for b in c),
                "user message %d: every block must be a tool_result (all results in one user message)" % (i + 1))
        got = [b.get("tool_use_id") for b in c]
        require(got == ids, "user message %d: tool_result ids %s do not match tool_use ids %s" % (i + 1, got, ids))
        for b in c:
            require(isinstance(b.get("content"), str), "tool_result content must be text")
            # The one is_error rule (MCP's isError too): set exactly when the code did not exit 0, or did not run.
            text = b["content"].split("Its result was:\n", 1)[-1]
            failed = not text.startswith("exit_code: 0")
            require(bool(b.get("is_error", False)) == failed,
                    "tool_result is_error must be %s for a result starting %r" % (failed, text[:40]))
        results, last_ids = [b["content"] for b in c], ids
    return msgs[0]["content"], len(msgs) // 2, results, last_ids


def check_openai(headers, body, key):
    if headers.get("authorization") != "Bearer " + key:
        # As OpenAI's own answer does, the key sent is named in the message.
        raise PermissionError("Incorrect API key provided: %s" % headers.get("authorization", "")[len("Bearer "):])
    require(headers.get("content-type", "").startswith("application/json"), "Content-Type must be application/json")
    require(isinstance(body.get("model"), str) and body["model"], "model missing")
    check_tools(body.get("tools"), "openai")
    msgs = body.get("messages")
    require(isinstance(msgs, list) and len(msgs) >= 2, "messages missing")
    require(msgs[0].get("role") == "system", "first message must be the system prompt")
    check_system(msgs[0].get("content", ""))
    require(msgs[1].get("role") == "user" and isinstance(msgs[1].get("content"), str), "second message must be the user's")
    i, turn, results, last_ids = 2, 0, [], []
    while i < len(msgs):
        a = msgs[i]
        require(a.get("role") == "assistant", "message %d: expected the assistant's turn" % i)
        calls = a.get("tool_calls") or []
        require(calls, "message %d: assistant turn without tool_calls, yet the conversation went on" % i)
        ids = []
        for c in calls:
            require(c.get("type") == "function" and isinstance(c["function"].get("arguments"), str),
                    "tool_calls: type function with string arguments")
            json.loads(c["function"]["arguments"])
            require(c["id"] in issued_ids, "tool call id %s was never issued" % c["id"])
            ids.append(c["id"])
        tools = msgs[i + 1:i + 1 + len(ids)]
        require([t.get("role") for t in tools] == ["tool"] * len(ids), "message %d: each tool call needs a role tool message" % i)
        got = [t.get("tool_call_id") for t in tools]
        require(got == ids, "tool_call_ids %s do not match the tool calls %s" % (got, ids))
        for t in tools:
            require(isinstance(t.get("content"), str), "tool message content must be text")
        results, last_ids = [t["content"] for t in tools], ids
        i += 1 + len(ids)
        turn += 1
    return msgs[1]["content"], turn, results, last_ids


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj, extra_headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a client that stopped reading (the agent's cap on a huge answer)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if self.path == "/_control/problems":
            with state_lock:
                return self.reply(200, list(problems))
        if self.path == "/_control/requests":
            with state_lock:
                return self.reply(200, list(requests_seen))
        headers = {k.lower(): v for k, v in self.headers.items()}
        fmt = "anthropic" if self.path == "/v1/messages" else "openai" if self.path == "/v1/chat/completions" else None
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with state_lock:
            requests_seen.append({"path": self.path, "body": body,
                                  "headers": {k: v for k, v in headers.items() if k in ("anthropic-version", "content-type")}})
        if fmt is None:
            return self.reply(404, {"error": {"message": "no such endpoint " + self.path, "type": "not_found_error"}})
        if body is None:
            return self.fail(fmt, "the body is not JSON")
        try:
            if fmt == "anthropic":
                prompt, turn, results, last_ids = check_anthropic(headers, body, self.server.keys["anthropic"])
            else:
                prompt, turn, results, last_ids = check_openai(headers, body, self.server.keys["openai"])
        except PermissionError as e:
            if fmt == "anthropic":
                return self.reply(401, {"type": "error", "error": {"type": "authentication_error", "message": str(e)}})
            return self.reply(401, {"error": {"message": str(e), "type": "invalid_request_error", "code": "invalid_api_key"}})
        except (Problem, KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
            return self.fail(fmt, "%s: %s" % (type(e).__name__, e))

        with state_lock:
            hits = prompt_hits[prompt] = prompt_hits.get(prompt, 0) + 1
        if "[scenario:ratelimit]" in prompt and hits == 1:
            return self.reply(429, error_body(fmt, "rate_limit_error", "slow down"), [("retry-after", "1")])
        if "[scenario:overloaded]" in prompt:
            return self.reply(429, error_body(fmt, "rate_limit_error", "come back in an hour"), [("retry-after", "3600")])
        if "[scenario:echokey]" in prompt:  # an error message that ends with the key, past the one-line clip
            key = self.server.keys[fmt]
            return self.reply(400, error_body(fmt, "invalid_request_error", "invalid key " + "x" * 254 + key))
        if "[scenario:echokey200]" in prompt:  # the same echo in a 200's error object
            key = self.server.keys[fmt]
            return self.reply(200, error_body(fmt, "x", "y" * 280 + " key " + key))
        if "[scenario:echokeyjson]" in prompt:  # a body that is not JSON, whose parse error quotes the key
            data = ('{"content": "' + "z" * 60 + self.server.keys[fmt] + ' and more').encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if "[scenario:echoauth]" in prompt:  # an error that echoes the base URL's user:password (curl's Basic auth)
            basic = headers.get("authorization", "").removeprefix("Basic ")
            return self.reply(400, error_body(fmt, "invalid_request_error",
                                              "no account for " + base64.b64decode(basic or "").decode(errors="replace")))
        if "[scenario:refusal]" in prompt and fmt == "openai":
            return self.reply(200, {"id": "chatcmpl-r", "object": "chat.completion", "model": body["model"],
                                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                        "role": "assistant", "content": None, "refusal": "I cannot help with that."}}]})
        if "[scenario:error200]" in prompt:
            return self.reply(200, error_body(fmt, "overloaded_error", "Overloaded, try later"))
        if "[scenario:flaky]" in prompt and hits <= 2:
            return self.reply(503, error_body(fmt, "overloaded_error", "overloaded"))
        if "[scenario:malformed]" in prompt:
            if fmt == "anthropic":
                return self.reply(200, {"id": "msg_x", "type": "message", "role": "assistant", "stop_reason": "end_turn"})
            return self.reply(200, {"id": "chatcmpl-x", "object": "chat.completion", "model": body["model"]})
        if "[scenario:deep]" in prompt:
            # A valid answer with a field nested 100000 deep (200 KB): a recursive copy of it overflows a stack.
            make = anthropic_response if fmt == "anthropic" else openai_response
            data = json.dumps(make(body["model"], ("text", "hi")))
            data = data[:-1] + ', "extra": ' + "[" * 100000 + "]" * 100000 + "}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
            return
        if "[scenario:huge]" in prompt:
            # A valid answer of 40 MiB: more than the agent's HTTP client takes.
            move = ("text", "x" * (40 << 20))
            make = anthropic_response if fmt == "anthropic" else openai_response
            return self.reply(200, make(body["model"], move))
        if "[scenario:slow]" in prompt:
            time.sleep(5)
        try:
            move = next_move(fmt, prompt, turn, results)
        except Problem as e:
            return self.fail(fmt, str(e))
        reuse = last_ids[0] if "[scenario:repeat]" in prompt and turn == 1 else None
        make = anthropic_response if fmt == "anthropic" else openai_response
        return self.reply(200, make(body["model"], move, reuse))

    def fail(self, fmt, message):
        with state_lock:
            problems.append(message)
        self.reply(400, error_body(fmt, "invalid_request_error", "fake provider: " + message))


def error_body(fmt, kind, message):
    if fmt == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": None}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anthropic-key", default="test-anthropic-key")
    parser.add_argument("--openai-key", default="test-openai-key")
    parser.add_argument("--max-lifetime", type=float, default=1800)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.keys = {"anthropic": args.anthropic_key, "openai": args.openai_key}
    parent = os.getppid()

    def watchdog():
        # Stops by itself when the test that started it is gone, or after its lifetime.
        deadline = time.time() + args.max_lifetime
        while time.time() < deadline and os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    print("PORT=%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

# tests/python-client/scripted_model.py: a scripted model on 127.0.0.1 speaking the Anthropic Messages and OpenAI
# Chat Completions shapes; it plays fixed tool calls and answers from the tool results it is sent.
"""The conversation is chosen by the first user message: PRIME_PROMPT asks for one run of PRIME_CODE, then
answers with the number the run printed; PERSIST_PROMPT asks for two runs (the second reads what the first
left: a file and a REPL variable), then answers with what the second printed. Nothing a run prints is
scripted here. A request that breaks the wire format (no tool declared, a tool result for an id never
issued) gets HTTP 400 and is kept in `problems`."""
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from support import PRIME_CODE

PRIME_PROMPT = "What is the 1000th prime?"
PERSIST_PROMPT = "Remember something between two runs."
PERSIST_CODE = ["open('notes.txt', 'w').write('written by call 1')\ncounter = 41\nprint('saved')\n",
                "print(open('notes.txt').read(), counter + 1)\n"]


def stdout_of(tool_text):
    m = re.search(r"^stdout:\n(.*?)^stderr:", tool_text, re.S | re.M)
    return m.group(1).strip() if m else ""


class ScriptedModel:
    def __init__(self):
        self.problems = []
        self.issued = set()
        self.tool_results = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                try:
                    if self.path == "/v1/messages":
                        answer = model.anthropic(self.headers, body)
                    elif self.path == "/v1/chat/completions":
                        answer = model.openai(self.headers, body)
                    else:
                        raise ValueError("no route " + self.path)
                    status = 200
                except ValueError as e:
                    with model.lock:
                        model.problems.append(str(e))
                    status, answer = 400, {"error": {"type": "invalid_request_error", "message": str(e)}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _new_id(self, prefix):
        i = prefix + uuid.uuid4().hex[:16]
        with self.lock:
            self.issued.add(i)
        return i

    def _check_result_id(self, i, text):
        if i not in self.issued:
            raise ValueError("tool result for %r, an id this model never issued" % i)
        with self.lock:
            self.tool_results.append(text)

    def _next_move(self, prompt, results):
        """(code to run, None) or (None, final text), from the prompt and the tool results so far."""
        if prompt == PRIME_PROMPT:
            return (PRIME_CODE, None) if not results else (None, "The 1000th prime is %s." % stdout_of(results[-1]))
        if prompt == PERSIST_PROMPT:
            if len(results) < 2:
                return PERSIST_CODE[len(results)], None
            return None, "The second run printed: %s" % stdout_of(results[-1])
        raise ValueError("no script for the prompt %r" % prompt)

    def anthropic(self, headers, body):
        if headers.get("anthropic-version") != "2023-06-01" or not headers.get("x-api-key"):
            raise ValueError("anthropic-version and x-api-key headers are required")
        if [t.get("name") for t in body.get("tools", [])] != ["run_python"] or "input_schema" not in body["tools"][0]:
            raise ValueError("the run_python tool (with input_schema) must be declared")
        msgs = body["messages"]
        results = []
        for m in msgs[1:]:
            if m["role"] == "user":
                for block in m["content"]:
                    if block.get("type") != "tool_result":
                        raise ValueError("a user turn after the first holds tool_result blocks only")
                    self._check_result_id(block["tool_use_id"], block["content"])
                    results.append(block["content"])
        code, final = self._next_move(msgs[0]["content"], results)
        if final is not None:
            return {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant",
                    "content": [{"type": "text", "text": final}], "stop_reason": "end_turn"}
        return {"id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant", "stop_reason": "tool_use",
                "content": [{"type": "text", "text": "Let me run it."},
                            {"type": "tool_use", "id": self._new_id("toolu_"), "name": "run_python",
                             "input": {"code": code}}]}

    def openai(self, headers, body):
        if not (headers.get("Authorization") or "").startswith("Bearer "):
            raise ValueError("a bearer token is required")
        tools = body.get("tools", [])
        if [t.get("function", {}).get("name") for t in tools] != ["execute_code"] or tools[0].get("type") != "function":
            raise ValueError("the execute_code function tool must be declared")
        msgs = body["messages"]
        results = []
        for m in msgs[1:]:
            if m["role"] == "tool":
                self._check_result_id(m["tool_call_id"], m["content"])
                results.append(m["content"])
        code, final = self._next_move(msgs[0]["content"], results)
        if final is not None:
            message = {"role": "assistant", "content": final}
            reason = "stop"
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": self._new_id("call_"), "type": "function",
                 "function": {"name": "execute_code", "arguments": json.dumps({"code": code})}}]}
            reason = "tool_calls"
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": reason}]}

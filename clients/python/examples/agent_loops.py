# clients/python/examples/agent_loops.py: Anthropic-shaped and OpenAI-shaped tool loops that run the model's code
# in an nsbox sandbox (standard library HTTP to the model; any server speaking those wire formats).
"""answer(prompt, model_url, shape="anthropic" | "openai") makes one sandbox for the conversation, runs every
tool call of the model in it (files and, with repl=True, the interpreter's state persist between calls) and
terminates it in `finally`, whatever happened."""
import json
import os
import urllib.request

from nsbox import Sandbox, format_tool_output

CODE_SCHEMA = {"type": "object", "properties": {"code": {"type": "string", "description": "Python source"}},
               "required": ["code"]}
RUN_PYTHON = {"name": "run_python", "description": "Run Python code in a sandbox; answers exit code and output.",
              "input_schema": CODE_SCHEMA}
EXECUTE_CODE = {"type": "function", "function": {"name": "execute_code", "parameters": CODE_SCHEMA,
                                                 "description": "Run Python code in a sandbox."}}


def _post(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers=dict(headers, **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read().decode())


def _run(sbx, code, repl):
    return format_tool_output(sbx.run_code(code, repl=repl, timeout=60), limit=16000)


def anthropic_loop(sbx, prompt, model_url, model="claude-sonnet-4-5", max_turns=8, repl=False):
    """The Messages API loop: tool_use blocks run in `sbx`, tool_result blocks go back, until a final text."""
    headers = {"x-api-key": os.environ.get("ANTHROPIC_API_KEY", "test-key"), "anthropic-version": "2023-06-01"}
    messages = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        reply = _post(model_url + "/v1/messages", {"model": model, "max_tokens": 1024, "tools": [RUN_PYTHON],
                                                   "messages": messages}, headers)
        messages.append({"role": "assistant", "content": reply["content"]})
        if reply.get("stop_reason") != "tool_use":
            return "".join(b.get("text", "") for b in reply["content"] if b.get("type") == "text")
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b["id"], "content": _run(sbx, b["input"]["code"], repl)}
            for b in reply["content"] if b.get("type") == "tool_use"]})
    raise RuntimeError("no final answer after %d turns" % max_turns)


def openai_loop(sbx, prompt, model_url, model="gpt-4.1", max_turns=8, repl=False):
    """The Chat Completions loop: tool_calls run in `sbx`, role "tool" messages go back, until a final text."""
    headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "test-key")}
    messages = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        reply = _post(model_url + "/v1/chat/completions", {"model": model, "tools": [EXECUTE_CODE],
                                                           "messages": messages}, headers)
        message = reply["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return message.get("content") or ""
        for call in message["tool_calls"]:
            code = json.loads(call["function"]["arguments"])["code"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": _run(sbx, code, repl)})
    raise RuntimeError("no final answer after %d turns" % max_turns)


def answer(prompt, model_url, shape="anthropic", repl=False, **create):
    """One conversation in one sandbox: the reference pattern, terminate in `finally`."""
    sbx = Sandbox.create(**dict({"template": "python", "network": "none", "timeout": 600}, **create))
    try:
        loop = anthropic_loop if shape == "anthropic" else openai_loop
        return loop(sbx, prompt, model_url, repl=repl)
    finally:
        sbx.terminate()

#!/usr/bin/python3
# fake_nsbox.py: a stand-in for the nsbox binary speaking the session/exec/run CLI contract (no isolation), so NsboxRuntime's session lifecycle and one-shot fallback are testable on their own.
"""Behaviour is chosen by environment variables:
FAKE_NSBOX_LOG    file that gets one line per invocation ("create", "exec ID", "run", "rm ID")
FAKE_NSBOX_MODE   "sessions" (default): create/exec/rm work; "no-sessions": `session` is an
                  unknown subcommand, as CLI11 reports it, and only `run` works; "broken": create
                  fails with a different error.
FAKE_NSBOX_COMPILE_SECONDS  for --lang c: how long its "compile step" takes before the code runs
                  (as sh), within the language's compile time-out rather than --timeout.
Code arrives on stdin (--file -) and runs with the host's python3/bash/sh; the result is printed
as nsbox's JSON result object.
"""
import json
import os
import subprocess
import sys
import time
import uuid


def log(line):
    path = os.environ.get("FAKE_NSBOX_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def run_code(args):
    lang = option(args, "--lang")
    timeout = option(args, "--timeout", "30s")
    seconds = float(timeout[:-2]) / 1000 if timeout.endswith("ms") else float(timeout.rstrip("s"))
    if lang == "c":
        time.sleep(float(os.environ.get("FAKE_NSBOX_COMPILE_SECONDS", "0")))
        lang = "sh"
    interp = {"python": ["/usr/bin/python3", "-"], "bash": ["/bin/bash", "-s"], "sh": ["/bin/sh", "-s"]}.get(lang)
    if interp is None:
        print("nsbox: unknown language %s" % lang, file=sys.stderr)
        return 125
    code = sys.stdin.read()
    start = time.time()
    result = {"signal": 0, "stdout_bytes": 0, "stderr_bytes": 0, "stdout_truncated": False,
              "stderr_truncated": False, "cpu_ms": 0, "peak_memory_bytes": 0}
    try:
        p = subprocess.run(interp, input=code.encode(), capture_output=True, timeout=seconds)
        result.update(status="ok" if p.returncode == 0 else "exit", exit_code=p.returncode,
                      reason="exited with code %d" % p.returncode,
                      stdout=p.stdout.decode(errors="replace"), stderr=p.stderr.decode(errors="replace"))
    except subprocess.TimeoutExpired as e:
        result.update(status="timeout", exit_code=-1, reason="wall-clock limit of %s reached" % timeout,
                      stdout=(e.stdout or b"").decode(errors="replace"), stderr=(e.stderr or b"").decode(errors="replace"))
    result["stdout_bytes"] = len(result["stdout"])
    result["stderr_bytes"] = len(result["stderr"])
    result["wall_ms"] = int((time.time() - start) * 1000)
    print(json.dumps(result))
    return 0


def main(args):
    mode = os.environ.get("FAKE_NSBOX_MODE", "sessions")
    if args[:2] == ["session", "create"]:
        if mode == "no-sessions":
            print("The following argument was not expected: session", file=sys.stderr)
            print("Run with --help for more information.", file=sys.stderr)
            return 125
        if mode == "broken":
            print("nsbox: session create: mkdir(/run/nsbox): Permission denied (EACCES)", file=sys.stderr)
            return 125
        sid = "s" + uuid.uuid4().hex[:8]
        log("create " + sid + " " + " ".join(args[2:]))
        print(json.dumps({"id": sid}))
        return 0
    if args[:2] == ["session", "rm"]:
        log("rm " + args[2])
        return 0
    if args[:1] == ["exec"]:
        log("exec " + args[1])
        return run_code(args)
    if args[:1] == ["run"]:
        log("run")
        return run_code(args)
    print("nsbox: unexpected arguments %s" % args, file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

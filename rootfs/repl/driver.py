# nsbox REPL driver: a persistent Python interpreter for one session; one JSON line in (the cell), one JSON line out.
# Run by /usr/bin/python3 -u -c inside the session. fd 3 is the channel to the session supervisor; fds 1 and 2 are the
# cell's stdout and stderr (read by the supervisor); stdin is /dev/null. Each request carries the cell's id and the
# answer echoes it: the supervisor takes anything else on the channel (a cell that wrote to fd 3) as a channel out of
# step, and restarts the interpreter.
import ast
import json
import linecache
import os
import socket
import sys
import traceback
import types

# An answer's parts are cut to these sizes, so that the supervisor can cap what it reads from the channel (anything
# longer is not the driver's answer).
MAX_VALUE_CHARS = 64 * 1024
MAX_TRACEBACK_CHARS = 256 * 1024

channel = socket.socket(fileno=3)
reader = channel.makefile("rb")
# The cells' names live here, across calls, like a notebook's: in a module that is sys.modules["__main__"], so that
# what a cell defines can be found by name as a script's can (pickle, and so multiprocessing's pool workers). The
# driver's own module is kept referenced: its functions run in its dict.
driver_module = sys.modules["__main__"]
cells_module = types.ModuleType("__main__")
cells_module.__builtins__ = __builtins__
sys.modules["__main__"] = cells_module
namespace = cells_module.__dict__
cell_number = 0


def compile_cell(source, filename):
    """The cell's statements, and its final expression (if the last statement is one) compiled apart."""
    tree = ast.parse(source, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec")
    return body, compile(last, filename, "eval") if last is not None else None


def exit_code_of(error):
    """What a script's process would exit with on this SystemExit; like Python, a message that is not a number goes to
    stderr."""
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_cell(source):
    global cell_number
    cell_number += 1
    filename = f"<cell {cell_number}>"
    # Tracebacks show the cell's lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    # exit_code: set only when the cell called sys.exit (raised SystemExit), which ends the cell, not the interpreter.
    answer = {"value": None, "exception": None, "traceback": None, "exit_code": None}
    try:
        body, last = compile_cell(source, filename)
        exec(body, namespace)
        if last is not None:
            value = eval(last, namespace)
            if value is not None:
                namespace["_"] = value
                text = repr(value)
                answer["value"] = text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "..."
    except SystemExit as error:
        answer["exit_code"] = exit_code_of(error)
    except BaseException as error:  # KeyboardInterrupt included: the interpreter stays
        answer["exception"] = "".join(traceback.format_exception_only(type(error), error)).strip()[:MAX_VALUE_CHARS]
        frames = traceback.extract_tb(error.__traceback__)
        # The driver's own frame (exec/eval above) is not the user's.
        frames = [f for f in frames if f.filename != "<string>"]
        answer["traceback"] = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + \
            "".join(traceback.format_exception_only(type(error), error))
        # As a script's failure would: the traceback on the cell's stderr too.
        sys.stderr.write(answer["traceback"])
        if len(answer["traceback"]) > MAX_TRACEBACK_CHARS:  # the end says what was raised: keep that
            answer["traceback"] = "..." + answer["traceback"][-MAX_TRACEBACK_CHARS:]
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
    return answer


def valid_text(value):
    """Text as valid UTF-8: a repr or an exception may hold lone surrogates (a file name's undecodable bytes, from
    os.fsdecode), which json.dumps writes as escapes no JSON reader takes; they are shown as \\udcXX instead."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(value, str) else value


def main():
    os.chdir("/workspace")
    if "" not in sys.path:
        sys.path.insert(0, "")
    while True:
        line = reader.readline()
        if not line:
            return
        request = json.loads(line)
        # The exec's environment (the sandbox's and the cell's own --env): set before the cell, and kept for later
        # cells as a cell's own assignment to os.environ would be. The interpreter may have been started for another
        # exec (a pool's, an earlier cell's), whose environment it took.
        os.environ.update(request.get("env") or {})
        answer = {key: valid_text(value) for key, value in run_cell(request["code"]).items()}
        answer["id"] = request["id"]
        channel.sendall((json.dumps(answer) + "\n").encode())


main()

# An attacker left in a session by one exec: it catches every process the next execs start in its pid namespace and,
# again and again until that process is a program of its own, stops it and tries to open its memory for writing. A
# process still in nsbox's memory (an exec's payload before execve, a parked payload being set up) must refuse.
# Writes "PID COMM open|refused EXE" per look to /workspace/verdict (EXE "?" when not readable), "PID became EXE" when
# one first seen in nsbox's memory turns into `cat`, and "done" once /workspace/stop exists (or after 60 s).
# /workspace/ready appears when it is armed.
import os
import signal
import time


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def last_pid():
    return int(read("/proc/sys/kernel/ns_last_pid"))


def in_nsbox_memory(exe):
    return exe == "?" or os.path.basename(exe).startswith("nsbox")


def exe_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return "?"


def look(pid):
    """Stops pid, waits until it is stopped, tries its memory, continues it. (comm, mem, exe) or None once gone.
    A look at a process that did not stop in time says "unsure" (it may have changed in between)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    stopped = False
    for _ in range(100000):
        state = read(f"/proc/{pid}/stat").rpartition(")")[2].split()[:1]
        if state in (["T"], ["t"]):
            stopped = True
            break
        if state not in (["R"], ["S"], ["D"]):
            break  # a zombie, or gone
    comm = read(f"/proc/{pid}/comm")
    before = exe_of(pid)
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        mem = "open"
    except OSError:
        mem = "refused"
    after = exe_of(pid)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # it ended meanwhile (a SIGKILL, say, or it never stopped)
    if not stopped:
        mem = "unsure"
    return comm, mem, before if before != "?" else after


log = open("/workspace/verdict", "w", buffering=1)
target = last_pid() + 1
open("/workspace/ready", "w").close()
end = time.time() + 60
misses = refusals = 0
while time.time() < end:
    try:
        os.kill(target, 0)  # pids in a namespace come in order: wait for the next one
    except ProcessLookupError:
        misses += 1
        if misses % 5000 == 0:
            if os.path.exists("/workspace/stop"):
                break
            if last_pid() >= target and not os.path.exists(f"/proc/{target}"):
                target += 1  # it came and went between two looks
        continue
    except PermissionError:  # not the sandbox user's yet; one that stays so is not ours to catch
        refusals += 1
        if refusals > 200000:
            target, refusals = target + 1, 0
        continue
    seen = look(target)
    first_in_nsbox_memory = seen is not None and in_nsbox_memory(seen[2])
    until = time.time() + 5
    while seen is not None:
        comm, mem, exe = seen
        log.write(f"{target} {comm} {mem} {exe}\n")
        # Followed while in nsbox's memory, until it is a program (or a parked payload that waits).
        if not in_nsbox_memory(exe) or comm == "nsbox-exec" or time.time() > until:
            break
        seen = look(target)
    if seen is not None and os.path.basename(seen[2]) == "cat" and first_in_nsbox_memory:
        log.write(f"{target} became {seen[2]}\n")
    if os.path.exists("/workspace/stop"):
        break
    target, misses, refusals = target + 1, 0, 0
log.write("done\n")

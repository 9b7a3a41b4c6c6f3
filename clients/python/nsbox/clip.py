# nsbox/clip.py: head-and-tail clipping of program output for a model, and the tool-output text.

DEFAULT_OUTPUT_LIMIT = 16000  # characters a model sees of one call's stdout and stderr together


def clip(text, limit=DEFAULT_OUTPUT_LIMIT, name="output"):
    """Keeps the head and the tail of `text` within about `limit` characters, with a marker line saying how
    much was cut. Cuts at a line boundary when one is near, so the model sees whole lines."""
    text = "" if text is None else (text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text))
    limit = max(int(limit), 0)
    if len(text) <= limit:
        return text
    tail_size = limit // 2
    head = text[:limit - tail_size]
    tail = text[len(text) - tail_size:] if tail_size else ""
    nl = head.rfind("\n")
    if nl >= 0 and nl + 1 >= len(head) / 2:
        head = head[:nl + 1]
    tnl = tail.find("\n")
    if 0 <= tnl and tnl + 1 <= len(tail) / 2 and tnl + 1 < len(tail):
        tail = tail[tnl + 1:]
    cut = len(text) - len(head) - len(tail)
    sep = "" if not head or head.endswith("\n") else "\n"
    return "%s%s[... %d characters of %s cut here: kept the first %d and the last %d of %d ...]\n%s" % (
        head, sep, cut, name, len(head), len(tail), len(text), tail)


def _get(result, key, default=None):
    raw = getattr(result, "raw", result)
    value = raw.get(key) if isinstance(raw, dict) else None
    return default if value is None else value


def format_tool_output(result, limit=DEFAULT_OUTPUT_LIMIT):
    """The text a model gets for a run (an ExecResult or the server's result dict): `exit_code:`, a `status:`
    line when the program did not simply exit, then stdout and stderr sharing `limit` characters."""
    status = _get(result, "status", "")
    signal = _get(result, "signal", 0)
    exit_code = 124 if status == "timeout" else 128 + signal if signal else _get(result, "exit_code", -1)
    out = "exit_code: %s\n" % exit_code
    if status not in ("ok", "exit"):
        out += "status: %s (%s)\n" % (status, _get(result, "reason", ""))
    so, se = _get(result, "stdout", ""), _get(result, "stderr", "")
    so_limit, se_limit = len(so), len(se)
    if len(so) + len(se) > limit:
        half = limit // 2
        if len(se) <= half:
            so_limit = limit - len(se)
        elif len(so) <= half:
            se_limit = limit - len(so)
        else:
            so_limit, se_limit = limit - half, half
    for name, data, lim in (("stdout", so, so_limit), ("stderr", se, se_limit)):
        if not data:
            out += "%s: (empty)\n" % name
            continue
        text = clip(data, limit=lim, name=name)
        out += "%s:\n%s%s" % (name, text, "" if text.endswith("\n") else "\n")
    return out

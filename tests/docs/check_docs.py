#!/usr/bin/python3
# tests/docs/check_docs.py: runs every ```sh/```bash block of README.md and of docs/ pages marked runnable, and checks
# every relative link and the prose line length of README.md and docs/*.md; writes JUnit (one case per block and file).
"""Usage: tests/docs/check_docs.py [RESULTS_DIR]   (from anywhere; without RESULTS_DIR only the report is printed)

Which blocks run:
  - README.md: every fenced block whose info string is sh or bash;
  - docs/*.md: the same, on pages that hold the line <!-- runnable --> (other pages' blocks are reference only);
  - a block right after a line <!-- not-run: REASON --> is not run and counts as skipped with that reason.
How a block runs: as one bash script with `set -e -o pipefail`, from the checkout's top directory, under a time-out,
with `nsbox` on PATH meaning ./build/src/nsbox (it must be built), and with a state directory of its own for sessions
(NSBOX_STATE_DIR), whose sessions are removed after each block, and with a TMPDIR removed at the end. `bash tools/setup` in a block is run as written: on a
set-up tree it only checks the packages and finds nothing to build.
"""

import glob
import html
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK_TIMEOUT_S = 60
MAX_PROSE_LINE = 120
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")
RUNNABLE = re.compile(r"^\s*<!--\s*runnable\s*-->\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages():
    return ["README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))


def parse(path):
    """Returns (blocks, prose) for a page: blocks as dicts (line, lang, text, skip), prose as (line number, text)."""
    lines = open(os.path.join(REPO, path), encoding="utf-8").read().split("\n")
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = NOT_RUN.match(before)
        blocks.append({"line": start + 1, "lang": lang, "text": "\n".join(body), "skip": skip.group(1) if skip else None})
    return blocks, lines, prose


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(lines):
    seen, out = {}, set()
    in_fence = False
    for line in lines:
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def check_links(path, lines, prose):
    problems = []
    here = os.path.dirname(os.path.join(REPO, path))
    for number, text in prose:
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(here, file_part)) if file_part else os.path.join(REPO, path)
            if not os.path.exists(full):
                problems.append(f"{path}:{number}: {target}: no such file")
                continue
            if anchor and full.endswith(".md"):
                target_lines = open(full, encoding="utf-8").read().split("\n")
                if anchor not in anchors(target_lines):
                    problems.append(f"{path}:{number}: {target}: no heading with that anchor")
    return problems


def check_prose_lines(path, prose):
    return [f"{path}:{n}: {len(t)} characters (at most {MAX_PROSE_LINE} outside code blocks and tables)"
            for n, t in prose if len(t) > MAX_PROSE_LINE and not t.lstrip().startswith("|")]


def run_block(block, env):
    script = "set -e -o pipefail\n" + block["text"] + "\n"
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", script], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        failure = None if proc.returncode == 0 else f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        failure = f"no end within {BLOCK_TIMEOUT_S} s (killed)"
    return failure, out.decode("utf-8", "replace"), time.monotonic() - start


def main():
    results = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else None
    nsbox = os.path.join(REPO, "build", "src", "nsbox")
    cases = []  # (name, failure or None, skipped reason or None, output)
    work = tempfile.mkdtemp(prefix="nsbox-docs-test-")
    try:
        bindir = os.path.join(work, "bin")
        state = os.path.join(work, "sessions")
        tmp = os.path.join(work, "tmp")  # a block's mktemp lands here, and goes with it
        os.makedirs(bindir)
        os.makedirs(tmp)
        os.makedirs(state, mode=0o700)
        with open(os.path.join(bindir, "nsbox"), "w") as f:
            f.write(f'#!/bin/sh\nexec "{nsbox}" "$@"\n')
        os.chmod(os.path.join(bindir, "nsbox"), 0o755)
        env = dict(os.environ, PATH=bindir + ":" + os.environ.get("PATH", "/usr/bin:/bin"), NSBOX_STATE_DIR=state,
                   TMPDIR=tmp)
        built = os.access(nsbox, os.X_OK)
        for path in pages():
            blocks, lines, prose = parse(path)
            problems = check_links(path, lines, prose)
            cases.append((f"{path}: every relative link resolves", "\n".join(problems) or None, None, ""))
            problems = check_prose_lines(path, prose)
            cases.append((f"{path}: prose lines are at most {MAX_PROSE_LINE} characters", "\n".join(problems) or None,
                          None, ""))
            if path != "README.md" and not any(RUNNABLE.match(line) for line in lines):
                continue
            for n, block in enumerate(b for b in blocks if b["lang"] in ("sh", "bash")):
                first = block["text"].strip().split("\n")[0][:60]
                name = f"{path}:{block['line']} block {n + 1}: {first}"
                if block["skip"] is not None:
                    # junit-summary prints a skipped case by its name: the reason goes with it.
                    cases.append((f"{name} (not run: {block['skip']})", None, block["skip"], ""))
                    continue
                if not built:
                    cases.append((name, f"{nsbox} is not built (run bash tools/setup)", None, ""))
                    continue
                failure, out, seconds = run_block(block, env)
                # Whatever the block left: its sessions end with it.
                subprocess.run([nsbox, "session", "rm", "--all"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)
                print(f"{'FAIL' if failure else 'ok  '} {seconds:5.1f}s {name}", file=sys.stderr)
                cases.append((name, failure, None, out))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    failed = 0
    for name, failure, skipped, out in cases:
        if failure:
            failed += 1
            print(f"FAILED: {name}: {failure}\n{out[-3000:]}", file=sys.stderr)
        elif skipped:
            print(f"skipped: {name}", file=sys.stderr)
    print(f"tests/docs: {len(cases) - failed - sum(1 for c in cases if c[2])} passed, {failed} failed, "
          f"{sum(1 for c in cases if c[2])} skipped", file=sys.stderr)
    if results:
        xml = ['<testsuites><testsuite name="docs">']
        for name, failure, skipped, out in cases:
            xml.append(f'<testcase classname="docs" name="{html.escape(name)}">')
            if failure:
                xml.append(f'<failure message="{html.escape(failure)}">{html.escape(out[-3000:])}</failure>')
            elif skipped:
                xml.append(f'<skipped message="{html.escape(skipped)}"/>')
            xml.append("</testcase>")
        xml.append("</testsuite></testsuites>")
        os.makedirs(results, exist_ok=True)
        with open(os.path.join(results, "docs.xml"), "w", encoding="utf-8") as f:
            f.write("\n".join(xml) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

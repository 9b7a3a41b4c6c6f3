#!/usr/bin/python3
# go-json-junit.py: turns `go test -json` output (plus the go vet outcome) into one JUnit XML file.
import json
import sys
from xml.sax.saxutils import quoteattr, escape

src, dst, vet_rc, vet_log = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cases, output, order = {}, {}, []
for line in open(src, errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    test = ev.get("Test")
    if not test:
        continue
    key = (ev.get("Package", ""), test)
    if key not in output:
        output[key] = []
        order.append(key)
    if ev["Action"] == "output":
        output[key].append(ev.get("Output", ""))
    elif ev["Action"] in ("pass", "fail", "skip"):
        cases[key] = (ev["Action"], ev.get("Elapsed", 0))
parts = []
vet_text = open(vet_log, errors="replace").read()
vet_case = '<testcase classname="go-client" name="go vet"'
parts.append(vet_case + ("/>" if vet_rc == "0" else "><failure message=%s/></testcase>" % quoteattr(vet_text[-2000:])))
failures = 0 if vet_rc == "0" else 1
skipped = 0
for key in order:
    action, elapsed = cases.get(key, ("fail", 0))  # a test with no end event crashed or hung
    text = "".join(output[key])
    head = '<testcase classname=%s name=%s time="%.3f"' % (quoteattr(key[0]), quoteattr(key[1]), elapsed)
    if action == "pass":
        parts.append(head + "/>")
    elif action == "skip":
        skipped += 1
        parts.append(head + "><skipped message=%s/></testcase>" % quoteattr(text.strip()[-500:]))
    else:
        failures += 1
        parts.append(head + "><failure message=%s>%s</failure></testcase>" % (quoteattr(text.strip()[-300:]),
                                                                           escape(text[-4000:])))
if not order:
    failures += 1
    parts.append('<testcase classname="go-client" name="go test ran"><failure message=%s/></testcase>'
                 % quoteattr("go test reported no test: " + vet_text[-1000:]))
with open(dst, "w") as f:
    counts = (len(parts), failures, skipped)
    f.write('<testsuites><testsuite name="go-client" tests="%d" failures="%d" skipped="%d">' % counts)
    f.write("".join(parts) + "</testsuite></testsuites>\n")

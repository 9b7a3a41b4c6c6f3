#!/usr/bin/python3
# tests/python-client/junit_run.py: runs the suite's unittest modules and writes one JUnit XML file per module.
"""Usage: junit_run.py RESULTS_DIR [MODULE...]. Each test's outcome (pass, failure, error, skipped with
its reason) becomes a <testcase>; the summary goes to stderr. Exits 0 when the XML was written."""
import os
import sys
import time
import traceback
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.cases = []
        self._start = {}

    def startTest(self, test):
        self._start[test.id()] = time.monotonic()
        super().startTest(test)

    def _add(self, test, kind, message="", detail=""):
        took = time.monotonic() - self._start.get(test.id(), time.monotonic())
        self.cases.append((test.id(), kind, message, detail, took))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "failure", str(err[1]).split("\n")[0][:300], "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", "%s: %s" % (err[0].__name__, str(err[1]).split("\n")[0][:300]),
                  "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._add(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._add(test, "failure", "unexpected success")


def write_xml(path, suite_name, cases):
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=suite_name, tests=str(len(cases)),
                          failures=str(sum(c[1] == "failure" for c in cases)),
                          errors=str(sum(c[1] == "error" for c in cases)),
                          skipped=str(sum(c[1] == "skipped" for c in cases)))
    for test_id, kind, message, detail, took in cases:
        parts = test_id.rsplit(".", 1)
        case = ET.SubElement(suite, "testcase", classname="python-client." + parts[0], name=parts[-1],
                             time="%.3f" % took)
        if kind in ("failure", "error", "skipped"):
            el = ET.SubElement(case, kind, message=message)
            el.text = detail or None
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main():
    results = sys.argv[1]
    modules = sys.argv[2:] or sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
    sys.path.insert(0, HERE)
    os.makedirs(results, exist_ok=True)
    totals = {"pass": 0, "failure": 0, "error": 0, "skipped": 0}
    for name in modules:
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Recorder)
        try:
            suite = unittest.defaultTestLoader.loadTestsFromName(name)
            res = runner.run(suite)
            cases = res.cases
        except Exception:  # a module that does not even import is one failed case
            cases = [(name + ".import", "error", "the module did not load", traceback.format_exc(), 0.0)]
        for c in cases:
            totals[c[1]] += 1
        write_xml(os.path.join(results, "python-client-%s.xml" % name.replace("test_", "")), name, cases)
    print("python-client: %(pass)d passed, %(failure)d failed, %(error)d errors, %(skipped)d skipped" % totals,
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

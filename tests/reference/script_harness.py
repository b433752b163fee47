"""Running a bench script under test: as a program, or its main() in this process.

Shared by the self-tests of tests/bench/step_breakdown.py, step_breakdown_vs_torch.py and roofline.py.
Python 3 standard library only.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest


def run(script, *args):
    """The script as a program: its exit status, stdout and stderr."""
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)


def call(main, *args):
    """main(args) in this process (no second interpreter to start: a test stays well under a second),
    its exit status, stdout and stderr in the same form as run()."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


class InputFiles(unittest.TestCase):
    """A test case whose input files live in a temporary directory, removed after each test."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name

    def write(self, name, data):
        """data (a str as it is, anything else as JSON) into the file `name` there; its path."""
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(data if isinstance(data, str) else json.dumps(data))
        return path

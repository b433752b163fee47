#!/usr/bin/env python3
"""Checks of tests/docs/sync_docs.py itself, on small repositories made in a temporary folder.

Run by CTest (docs.sync_docs_selftest); Python 3 standard library only:

    python3 tests/docs/test_sync_docs.py
"""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "sync_docs.py"


def make_repo(root, chapter_text, readme_text="# readme\n"):
    """One stage, one chapter holding chapter_text, one README."""
    (root / "stages" / "00_base").mkdir(parents=True)
    (root / "stages" / "00_base" / "stage.cuh").write_text("struct Stage00 {\n};\n")
    (root / "docs").mkdir()
    (root / "docs" / "00_base.md").write_text(chapter_text)
    (root / "README.md").write_text(readme_text)


def check(root):
    run = subprocess.run([sys.executable, str(SCRIPT), "--check", "--root", str(root)], capture_output=True,
                         text=True, timeout=60)
    return run.returncode, run.stdout + run.stderr


class UnnamedSources(unittest.TestCase):
    def run_on(self, chapter, readme="# readme\n"):
        with tempfile.TemporaryDirectory() as tmp:
            make_repo(Path(tmp), chapter, readme)
            return check(Path(tmp))

    def test_named_source_passes(self):
        code, out = self.run_on('The blog post "nanoGPT-training" reports about 16,000 tokens/s.\n')
        self.assertEqual(code, 0, out)

    def test_source_material_fails_and_names_the_line(self):
        code, out = self.run_on("# 00\n\nThe source material reports about 16,000 tokens/s.\n")
        self.assertEqual(code, 1, out)
        self.assertIn("docs/00_base.md:3:", out)
        self.assertIn("source material", out)

    def test_phrase_broken_across_lines_fails(self):
        code, out = self.run_on("# 00\n\nAs the source\nmaterial notes.\n")
        self.assertEqual(code, 1, out)
        self.assertIn("docs/00_base.md:3:", out)

    def test_readme_is_checked_too(self):
        code, out = self.run_on("# 00\n", readme="# readme\n\nSee the Source Material.\n")
        self.assertEqual(code, 1, out)
        self.assertIn("README.md:3:", out)

    def test_write_mode_reports_it_too(self):
        # Regenerating cannot fix a citation: the write mode exits 1 as well.
        with tempfile.TemporaryDirectory() as tmp:
            make_repo(Path(tmp), "the source material\n")
            run = subprocess.run([sys.executable, str(SCRIPT), "--root", tmp], capture_output=True, text=True,
                                 timeout=60)
            self.assertEqual(run.returncode, 1, run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""Checks of tests/docs/sync_docs.py and tests/docs/workshop_counts.py themselves, on small
repositories made in a temporary folder.

Run by CTest (docs.sync_docs_selftest); Python 3 standard library only:

    python3 tests/docs/test_sync_docs.py
"""
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "sync_docs.py"
COUNTS_SCRIPT = Path(__file__).resolve().parent / "workshop_counts.py"


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


def make_run(root, name, gpu, date, ms_per_step, commit="abc1234"):
    """A results directory as tests/gpu_check.sh archives it: a ladder with stage 00, its kernels."""
    run = root / "docs" / "results" / name
    (run / "ladder").mkdir(parents=True)
    (run / "kernels").mkdir()
    (run / f"gpu_check_{commit}.txt").write_text("GPU check\n")
    ceilings = {"copy": {"gb_per_s": 4000.0}, "gemm": {"tflops": 800.0, "dtype": "bf16"}, "datasheet_bf16_tflops": 989}
    entry = {"key": "cpp_00", "status": "ok", "median_ms": ms_per_step, "tokens_per_s": 16384 / ms_per_step * 1e3,
             "mfu": 0.03, "peak_memory_bytes": 2 ** 30}
    (run / "ladder" / "results.json").write_text(json.dumps(
        {"meta": {"gpu": gpu, "date": date + " 06:00 UTC"}, "ceilings": ceilings, "entries": [entry]}))
    row = {"op": "LayerNorm", "pass": "forward", "batch": 16, "status": "ok", "ms_median": 0.5, "gb_per_s": 2000.0}
    (run / "kernels" / "stage00.json").write_text(json.dumps(
        {"device_name": gpu, "date": date + "T06:00:00Z", "ceilings": ceilings, "rows": [row]}))


TABLE = "# 00\n\n## Measured effect\n\n<!-- measured: 00 -->\n<!-- end measured -->\n"


class MeasuredTables(unittest.TestCase):
    def test_a_table_is_written_from_the_results_and_kept_by_check(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, TABLE)
            make_run(root, "2026-01-01_h200", "NVIDIA H200", "2026-01-01", 500.0)
            code, out = check(root)
            self.assertEqual(code, 1, out)
            self.assertIn("measured table 00 is not what docs/results/ says", out)
            code, out = write(root)
            self.assertEqual(code, 0, out)
            text = (root / "docs" / "00_base.md").read_text()
            self.assertIn("| step | 500.0 ms [a] |", text)
            self.assertIn("| LayerNorm forward | 0.5000 ms, 2,000 GB/s, 50 % of copy [a] |", text)
            self.assertIn("[a] [2026-01-01_h200](results/2026-01-01_h200/): NVIDIA H200, 2026-01-01 06:00 UTC, "
                          "commit abc1234", text)
            self.assertEqual(check(root)[0], 0, check(root)[1])

    def test_a_new_run_makes_the_table_stale_and_regenerating_takes_its_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, TABLE)
            make_run(root, "2026-01-01_h200", "NVIDIA H200", "2026-01-01", 500.0)
            write(root)
            make_run(root, "2026-02-01_h200", "NVIDIA H200", "2026-02-01", 400.0, commit="def5678")
            self.assertEqual(check(root)[0], 1)
            write(root)
            text = (root / "docs" / "00_base.md").read_text()
            self.assertIn("| step | 400.0 ms [a] |", text)
            self.assertIn("commit def5678", text)
            self.assertNotIn("500.0 ms", text)

    def test_an_older_gpu_keeps_its_own_column(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, TABLE)
            make_run(root, "2026-01-01_h100", "NVIDIA H100 80GB HBM3", "2026-01-01", 600.0)
            make_run(root, "2026-02-01_h200", "NVIDIA H200", "2026-02-01", 400.0)
            write(root)
            text = (root / "docs" / "00_base.md").read_text()
            self.assertIn("| B = 16, T = 1024 | NVIDIA H200 | NVIDIA H100 80GB HBM3 |", text)
            self.assertIn("| step | 400.0 ms [a] | 600.0 ms [b] |", text)

    def test_the_yardstick_is_the_median_of_every_ceiling_of_a_gpu_model(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, "<!-- measured: yardsticks -->\n<!-- end measured -->\n")
            make_run(root, "2026-01-01_h200", "NVIDIA H200", "2026-01-01", 500.0)
            make_run(root, "2026-02-01_h200", "NVIDIA H200", "2026-02-01", 400.0)
            ladder = root / "docs" / "results" / "2026-02-01_h200" / "ladder" / "results.json"
            data = json.loads(ladder.read_text())
            data["ceilings"]["gemm"]["tflops"] = 700.0
            ladder.write_text(json.dumps(data))
            write(root)
            text = (root / "docs" / "00_base.md").read_text()
            # four GEMM ceilings (a ladder and a kernel benchmark per run): 800, 800, 800, 700
            self.assertIn("| NVIDIA H200 | 4,000 GB/s (median of 4; 4,000–4,000) | 800 TFLOP/s (median of 4; 700–800) | "
                          "989 TFLOP/s | 2 [a, b] |", text)

    def test_the_runs_before_dq_had_its_own_pass_are_read_under_what_they_timed(self):
        # 2026-11-27_h200 is one of measured.ATOMIC_DQ_RUNS: its "C++ stage 03" timed the backward that
        # is now the atomic-dq variant, and the backward of its other stage 03 entries was that one too.
        def attention(root, name, rows):
            (root / "docs" / "results" / name / "attention").mkdir()
            (root / "docs" / "results" / name / "attention" / "results.json").write_text(json.dumps(
                {"device": "NVIDIA H200", "rows": [{"entry": e, "T": 1024, "B": 16, "forward": f, "backward": b}
                                                   for e, f, b in rows]}))
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, "<!-- measured: 03a -->\n<!-- end measured -->\n")
            make_run(root, "2026-11-27_h200", "NVIDIA H200", "2026-11-27", 500.0)
            attention(root, "2026-11-27_h200", [("C++ stage 03 (no tensor cores (forward))", 2.0, 0.7),
                                                ("C++ stage 03", 0.2, 0.6)])
            make_run(root, "2026-12-01_h200", "NVIDIA H200", "2026-12-01", 400.0)
            attention(root, "2026-12-01_h200", [("C++ stage 03 (no tensor cores (forward))", 2.2, 0.5),
                                                ("C++ stage 03", 0.1, 0.3)])
            write(root)
            text = (root / "docs" / "00_base.md").read_text()
            self.assertIn("| C++ stage 02 |  |  |", text)  # a row no run timed: empty cells
            self.assertIn("| C++ stage 03 (no tensor cores (forward)) | 2.10 ms (2.000–2.200, 2 runs) [a,b] | "
                          "0.5000 ms [b] |", text)
            self.assertIn("| C++ stage 03 | 0.1000 ms [b] | 0.3000 ms [b] |", text)
            self.assertIn("| C++ stage 03 (atomic dq (FlashAttention-2's)) | 0.2000 ms [a] | 0.6000 ms [a] |", text)
            self.assertIn("Run a came before stage 03 made dq in a pass of its own: their *C++ stage 03* entry is "
                          "the *atomic dq (FlashAttention-2's)* row; the backward of their other stage 03 entries", text)
            self.assertEqual(check(root)[0], 0, check(root)[1])

    def test_an_unknown_table_or_an_unclosed_marker_fails(self):
        for chapter, message in (("<!-- measured: 99 -->\n<!-- end measured -->\n", "no measured table named '99'"),
                                 ("<!-- measured: 00 -->\n", "is not closed")):
            with tempfile.TemporaryDirectory() as tmp:
                make_repo(Path(tmp), chapter)
                code, out = check(Path(tmp))
                self.assertEqual(code, 1, out)
                self.assertIn(message, out)


class Links(unittest.TestCase):
    def run_on(self, chapter, source=None):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_repo(root, chapter)
            (root / "docs" / "other.md").write_text("# Other\n\n## A `code` heading: (yes)\n\n```\n# not a heading\n```\n")
            if source:
                (root / "common").mkdir()
                (root / "common" / "x.h").write_text(source)
            return check(root)

    def test_links_to_files_and_headings_that_exist_pass(self):
        code, out = self.run_on("# 00\n\n## Here\n\n[a](other.md#a-code-heading-yes) [b](#here) [c](https://x.org/#y)\n",
                                "// see docs/other.md#other\n")
        self.assertEqual(code, 0, out)

    def test_a_missing_file_or_heading_fails(self):
        for chapter in ("[a](missing.md)\n", "[a](other.md#nowhere)\n", "[a](#nowhere)\n", "[a](other.md#not-a-heading)\n"):
            code, out = self.run_on(chapter)
            self.assertEqual(code, 1, chapter + out)
            self.assertIn("docs/00_base.md:1: link", out)

    def test_a_link_in_code_is_not_checked(self):
        code, out = self.run_on("`[a](missing.md)`\n\n```\n[b](missing.md)\n```\n")
        self.assertEqual(code, 0, out)

    def test_a_chapter_named_in_the_source_must_have_the_heading(self):
        code, out = self.run_on("# 00\n", "// see docs/other.md#gone\n")
        self.assertEqual(code, 1, out)
        self.assertIn("common/x.h:1: docs/other.md#gone: no heading #gone", out)


BASE_POLICY = "struct Stage00 {\n    static constexpr bool kCaptureStep = false;\n};\n"
NEXT_POLICY = "struct Stage01 : Stage00 {\n    static constexpr bool kCaptureStep = true;\n};\n"
LINKS = "# 01\n\n[patch](diffs/01_next.patch), [shared code](diffs/01_next.shared.md)\n"
MARKED = ("void step() {\n"
          "    // [stage switch kCaptureStep]\n"
          "    if constexpr (S::kCaptureStep) replay();\n"
          "    // [end stage switch kCaptureStep]\n"
          "}\n")


def make_two_stages(root, shared, chapter=LINKS):
    """Stages 00 and 01 (01 turns kCaptureStep on), common/train/gpt.h holding `shared`."""
    make_repo(root, "# 00\n")
    (root / "stages" / "01_next").mkdir()
    (root / "stages" / "00_base" / "stage.cuh").write_text(BASE_POLICY)
    (root / "stages" / "01_next" / "stage.cuh").write_text(NEXT_POLICY)
    (root / "docs" / "01_next.md").write_text(chapter)
    (root / "common" / "train").mkdir(parents=True)
    (root / "common" / "train" / "gpt.h").write_text(shared)


def write(root):
    run = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True,
                         timeout=60)
    return run.returncode, run.stdout + run.stderr


class SharedCode(unittest.TestCase):
    def run_on(self, shared, chapter=LINKS):
        """Writes (sync_docs.py without --check) on two stages; its exit code, output and listing."""
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_two_stages(root, shared, chapter)
            code, out = write(root)
            listing = root / "docs" / "diffs" / "01_next.shared.md"
            return code, out, listing.read_text() if listing.is_file() else ""

    def test_marked_code_is_listed_with_the_stage_that_turns_it_on(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            make_two_stages(root, MARKED)
            code, out = write(root)
            self.assertEqual(code, 0, out)
            listing = (root / "docs" / "diffs" / "01_next.shared.md").read_text()
            self.assertIn("## kCaptureStep", listing)
            self.assertIn("if constexpr (S::kCaptureStep) replay();", listing)
            self.assertIn("Set in `stages/01_next/stage.cuh`, first by `static constexpr bool kCaptureStep = true;`", listing)
            self.assertNotIn("[stage switch", listing.split("## kCaptureStep")[1])  # the markers are not shown
            self.assertEqual(check(root), (0, ""))
            # Marked code that changes makes the listing stale.
            (root / "common" / "train" / "gpt.h").write_text(MARKED.replace("replay()", "replay_step()"))
            code, out = check(root)
            self.assertEqual(code, 1, out)
            self.assertIn("docs/diffs/01_next.shared.md: no longer matches the source", out)

    def test_a_setting_read_outside_its_region_fails(self):
        code, out, _ = self.run_on(MARKED + "bool f() { return S::kCaptureStep; }\n")
        self.assertEqual(code, 1, out)
        self.assertIn("common/train/gpt.h:6: reads kCaptureStep outside a [stage switch kCaptureStep] region", out)

    def test_a_setting_derived_in_a_region_is_checked_too(self):
        derived = MARKED.replace("    if constexpr (S::kCaptureStep) replay();\n",
                                 "    static constexpr bool kCaptured = S::kCaptureStep;\n")
        code, out, _ = self.run_on(derived + "void g() { if (kCaptured) replay(); }\n")
        self.assertEqual(code, 1, out)
        self.assertIn("common/train/gpt.h:6: reads kCaptured (derived from kCaptureStep) outside", out)

    def test_the_processes_are_found_by_their_member(self):
        code, out, _ = self.run_on(MARKED + "void h() { parallel_->all_reduce_sum(); }\n")
        self.assertEqual(code, 1, out)
        self.assertIn("common/train/gpt.h:6: uses Parallel", out)

    def test_comments_and_descriptions_are_not_reads(self):
        code, out, _ = self.run_on(MARKED + "// S::kCaptureStep in a comment\n"
                                            "bool g() { return S::kCaptureStep; }  // [describes the policy]\n")
        self.assertEqual(code, 0, out)

    def test_an_unclosed_marker_fails(self):
        code, out, _ = self.run_on(MARKED.replace("    // [end stage switch kCaptureStep]\n", ""))
        self.assertEqual(code, 1, out)
        self.assertIn("common/train/gpt.h:2: [stage switch kCaptureStep] is never ended", out)

    def test_a_switch_no_stage_turns_on_fails(self):
        code, out, _ = self.run_on(MARKED + "// [stage switch kNothing]\nint x;\n// [end stage switch kNothing]\n")
        self.assertEqual(code, 1, out)
        self.assertIn("[stage switch kNothing]: no stage turns kNothing on", out)

    def test_the_chapter_must_link_to_the_listing(self):
        code, out, _ = self.run_on(MARKED, chapter="# 01\n\n[patch](diffs/01_next.patch)\n")
        self.assertEqual(code, 1, out)
        self.assertIn("docs/01_next.md: does not link to diffs/01_next.shared.md", out)

    def test_a_stage_without_switches_says_its_patch_is_the_whole_change(self):
        code, out, listing = self.run_on("int nothing_marked;\n")
        self.assertEqual(code, 0, out)
        self.assertIn("its patch is the whole change", listing)


# One exercise whose regex selects three of the four tests, one of which needs the corpus fixture.
STAGE_TESTS = ("TEST_F(Kernels, LayerNormForward) {}\n"
               "TEST_F(Kernels, Other) {}\n"
               "TEST_F(Model, Step0LossAndGradients) {}\n"
               "TEST(Model, FullSizeCurveMatchesPyTorch) {}\n")
EXERCISE = ("    // EXERCISE BEGIN stage00.layernorm_forward TESTS "
            "Kernels.LayerNormForward|Model.Step0LossAndGradients|Model.FullSizeCurveMatchesPyTorch\n"
            "    // EXERCISE END\n")
STAGES_CMAKE = ("set_tests_properties(${prefix}.Model.FullSizeCurveMatchesPyTorch PROPERTIES\n"
                "    FIXTURES_REQUIRED corpus RESOURCE_LOCK gpt2_124m_full_size)\n")
DONE = "`tests/workshop_check.sh stage00.layernorm_forward` prints `PASS` (3 tests)"
WORKSHOP = f"""# Workshop

| exercise | what you write | done when | hints |
|---|---|---|---|
| `stage00.layernorm_forward` | the LayerNorm | {DONE} | none |

```text
$ tests/workshop_check.sh stage00.layernorm_forward
stage00.layernorm_forward  SKIPPED      no GPU (3 tests)
```

```text
$ ctest --preset stage00-workshop -L stage00.layernorm_forward
100% tests passed, 0 tests failed out of 4
note: 3 of 4 tests were skipped (no CUDA device found): those checked nothing.
```

(The fourth test is the fixture that installs the default corpus.)
"""
CHAPTER = f"""# Stage 00

## Exercise

Write it.

**Done** when {DONE}.
"""


class WorkshopCounts(unittest.TestCase):
    def run_on(self, workshop=WORKSHOP, exercise=EXERCISE, chapter=CHAPTER):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "stages" / "00_base").mkdir(parents=True)
            (root / "stages" / "00_base" / "layernorm.cuh").write_text(exercise)
            (root / "stages" / "CMakeLists.txt").write_text(STAGES_CMAKE)
            (root / "tests" / "gpu").mkdir(parents=True)
            (root / "tests" / "gpu" / "stage_tests.cuh").write_text(STAGE_TESTS)
            (root / "docs").mkdir()
            (root / "docs" / "workshop.md").write_text(workshop)
            (root / "docs" / "00_base.md").write_text(chapter)
            run = subprocess.run([sys.executable, str(COUNTS_SCRIPT), "--check", "--root", tmp],
                                 capture_output=True, text=True, timeout=60)
            return run.returncode, run.stdout + run.stderr

    def test_matching_counts_pass(self):
        code, out = self.run_on()
        self.assertEqual(code, 0, out)

    def test_a_wrong_table_count_fails(self):
        code, out = self.run_on(WORKSHOP.replace("(3 tests) | none |", "(4 tests) | none |"))
        self.assertEqual(code, 1, out)
        self.assertIn("docs/workshop.md:5: stage00.layernorm_forward has 3 tests, the line says 4", out)

    def test_a_test_added_to_the_regex_makes_every_quote_stale(self):
        code, out = self.run_on(exercise=EXERCISE.replace("TESTS ", "TESTS Kernels.Other|"))
        self.assertEqual(code, 1, out)
        self.assertIn("docs/workshop.md:5: stage00.layernorm_forward has 4 tests, the line says 3", out)
        self.assertIn("docs/00_base.md:7: stage00.layernorm_forward has 4 tests, the line says 3", out)
        self.assertIn("docs/workshop.md:9: stage00.layernorm_forward has 4 tests", out)
        self.assertIn("docs/workshop.md:14: ctest -L stage00.layernorm_forward runs 5 tests", out)
        self.assertIn("docs/workshop.md:15: ctest -L stage00.layernorm_forward skips 4 of 5", out)
        self.assertIn("docs/workshop.md:18: the fixture is test 5", out)

    def test_a_chapter_without_its_done_line_fails(self):
        code, out = self.run_on(chapter=CHAPTER.replace(DONE, "it passes"))
        self.assertEqual(code, 1, out)
        self.assertIn("docs/00_base.md: no line says what done looks like for stage00.layernorm_forward", out)

    def test_a_table_row_without_its_done_line_fails(self):
        code, out = self.run_on(WORKSHOP.replace(f"| {DONE} |", "| soon |"))
        self.assertEqual(code, 1, out)
        self.assertIn("docs/workshop.md:5: the 'done when' cell of stage00.layernorm_forward is not", out)

    def test_a_name_in_the_regex_that_is_no_test_fails(self):
        code, out = self.run_on(exercise=EXERCISE.replace("TESTS ", "TESTS Kernels.Misspelt|"))
        self.assertEqual(code, 1, out)
        self.assertIn("exercise stage00.layernorm_forward: 'Kernels.Misspelt' in its TESTS names no test", out)

    def test_a_group_in_the_regex_is_one_alternative(self):
        code, out = self.run_on(exercise=EXERCISE.replace("Kernels.LayerNormForward|", "Kernels\\.(LayerNormForward|None)|"))
        self.assertEqual(code, 0, out)

    def test_without_the_fixture_the_total_is_the_label(self):
        code, out = self.run_on(exercise=EXERCISE.replace("|Model.FullSizeCurveMatchesPyTorch", ""))
        self.assertEqual(code, 1, out)
        self.assertIn("runs 2 tests (2 tests and the fixtures' setup), the quote says 4", out)

    def test_an_exercise_without_a_row_fails(self):
        code, out = self.run_on(exercise=EXERCISE + EXERCISE.replace("layernorm_forward", "second"))
        self.assertEqual(code, 1, out)
        self.assertIn("the table of exercises has no row for stage00.second", out)

    def test_a_regex_that_selects_nothing_fails(self):
        code, out = self.run_on(exercise=EXERCISE.replace("Kernels.LayerNormForward|", "Kernels.None|")
                                .replace("Model.Step0LossAndGradients|Model.FullSizeCurveMatchesPyTorch", "X"))
        self.assertEqual(code, 1, out)
        self.assertIn("exercise stage00.layernorm_forward: no test of tests/gpu/stage_tests.cuh matches", out)


if __name__ == "__main__":
    unittest.main()

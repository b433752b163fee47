#!/usr/bin/env python3
"""Check that the test counts docs/workshop.md quotes are the ones a build would register.

Usage (from anywhere; Python 3 standard library only, nothing is compiled or configured):

    python3 tests/docs/workshop_counts.py --check [--root DIR]

The CTest test docs.workshop_counts_match_tests runs it. An exercise's tests are the tests of
tests/gpu/stage_tests.cuh, as gtest_add_tests finds them in the text (CMake's GoogleTest module:
TEST, TEST_F, TEST_P, TYPED_TEST), named stageNN.<Suite>.<Name> (in a workshop build <exercise>.<Suite>.<Name>), whose name matches the TESTS
regex of the exercise's `// EXERCISE BEGIN` marker in stages/ (stages/CMakeLists.txt gives the
tests that label). `ctest -L <exercise>` also runs the setup test of each fixture those tests
require: the corpus fixture, required by the tests named so in stages/CMakeLists.txt.

What is compared, in docs/workshop.md and the chapters docs/NN_*.md:
  - every line "`tests/workshop_check.sh <exercise>` prints `PASS` (N tests)": N is the count of
    the exercise's label, and each exercise has one in its chapter and one in the guide;
  - the guide's table of exercises: a row for each exercise, whose "done when" cell is that line;
  - the room check's lines, "stage00.layernorm_forward  SKIPPED  no GPU (11 tests)" (also
    "PASS  11 tests" and "FAIL  3 of 11 tests fail");
  - CTest's output quoted after "$ ctest ... -L <exercise>": "out of 12" and "11 of 12 tests
    were skipped" (every test of the label skips without a GPU; the fixture's setup does not),
    and the sentence that names the fixture's place ("The twelfth test is the fixture ...").
Exit status 1 when a count differs or cannot be derived, with one line per problem.
"""
import argparse
import re
import sys
from pathlib import Path

DOC = "docs/workshop.md"
STAGE_TESTS = "tests/gpu/stage_tests.cuh"
STAGES_CMAKE = "stages/CMakeLists.txt"

MARKER = re.compile(r"^[ \t]*// EXERCISE BEGIN[ \t]+(stage(\d\d)\.[a-z][a-z0-9_]*)[ \t]+TESTS[ \t]+(\S.*?)\s*$")
# CMake's GoogleTest module, gtest_add_tests(): the same two expressions.
GTEST_HIT = re.compile(r"((?:TYPED_TEST|TEST)_?[FP]?) *\(([A-Za-z_0-9 ,]+)\)")
GTEST_CASE = re.compile(r"^ *([A-Za-z_0-9]+) *, *([A-Za-z_0-9]+) *$")
# set_tests_properties(${prefix}.Model.X ... PROPERTIES ... FIXTURES_REQUIRED corpus
CORPUS_USERS = re.compile(r"set_tests_properties\(((?:\s*\$\{prefix\}\.[\w.]+)+)\s+PROPERTIES[^)]*?"
                          r"FIXTURES_REQUIRED\s+corpus\b")
# What "done" looks like, in the chapters and the guide: `tests/workshop_check.sh X` prints `PASS` (N tests)
DONE = re.compile(r"`tests/workshop_check\.sh (stage\d\d\.[a-z0-9_]+)` prints `PASS` \((\d+) tests?\)")
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
            "eighteenth", "nineteenth", "twentieth"]


def exercises(root):
    """{name: (stage number "NN", tests regex)} from the markers in stages/."""
    found = {}
    for path in sorted((root / "stages").rglob("*")):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for line in text.split("\n"):
            m = MARKER.match(line)
            if m:
                found[m.group(1)] = (m.group(2), m.group(3))
    return found


def gtest_names(source_text):
    """The test names gtest_add_tests registers for a source ("Suite.Name", TEST_P "*/Suite.Name/*")."""
    names = []
    for m in GTEST_HIT.finditer(source_text):
        kind, args = m.group(1), m.group(2)
        case = GTEST_CASE.match(args)
        if not case:
            continue
        suite, test = case.groups()
        name = {"TEST": f"{suite}.{test}", "TEST_F": f"{suite}.{test}", "TEST_P": f"*/{suite}.{test}/*",
                "TYPED_TEST": f"{suite}/*.{test}", "TYPED_TEST_P": f"*/{suite}/*.{test}"}.get(kind)
        if name:
            names.append(re.sub(r"(^|\.)DISABLED_", r"\1", name))
    return names


def top_level_alternatives(regex):
    """The alternatives of a regex at the top level: "A|B(c|d)" -> ["A", "B(c|d)"]."""
    parts, depth, start, escaped = [], 0, 0, False
    for i, ch in enumerate(regex):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(regex[start:i])
            start = i + 1
    return parts + [regex[start:]]


def label_counts(root, problems):
    """{exercise: (tests of its label, tests `ctest -L` runs with the fixtures' setups)}."""
    names = gtest_names((root / STAGE_TESTS).read_text(encoding="utf-8"))
    stages_cmake = (root / STAGES_CMAKE).read_text(encoding="utf-8")
    corpus_users = {n for m in CORPUS_USERS.finditer(stages_cmake) for n in m.group(1).split()}
    corpus_users = {n[len("${prefix}."):] for n in corpus_users}
    if not corpus_users:
        problems.append(f"{STAGES_CMAKE}: no set_tests_properties(${{prefix}}.<test> ... FIXTURES_REQUIRED corpus) "
                        f"found: {Path(__file__).name} cannot tell which tests bring the corpus fixture")
    counts = {}
    for name, (nn, regex) in exercises(root).items():
        matched = [n for n in names if re.fullmatch(rf"stage{nn}\.({regex})", f"stage{nn}.{n}")]
        if not matched:
            problems.append(f"exercise {name}: no test of {STAGE_TESTS} matches its TESTS '{regex}'")
        # A dry run of the list: each alternative of the regex must name a test, or a renamed or
        # misspelt test drops out of the exercise's tests without a word.
        for alternative in top_level_alternatives(regex):
            if not any(re.fullmatch(alternative, n) for n in names):
                problems.append(f"exercise {name}: '{alternative}' in its TESTS names no test of {STAGE_TESTS}")
        counts[name] = (len(matched), len(matched) + (1 if corpus_users & set(matched) else 0))
    return counts


def tests_word(n):
    return f"{n} test" if n == 1 else f"{n} tests"


def check_doc(root, counts, problems):
    lines = (root / DOC).read_text(encoding="utf-8").split("\n")
    where = lambda i: f"{DOC}:{i + 1}"

    # The table: a row starts with `stageNN.name`; its count is in its "done when" cell, which
    # check_done_lines reads with every other such line.
    column, in_table = None, set()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells and cells[0] == "exercise" and "done when" in cells:
            column = cells.index("done when")
            continue
        if not cells:
            column = None
            continue
        m = re.match(r"`(stage\d\d\.[a-z0-9_]+)`", cells[0])
        if column is None or not m:
            continue
        name = m.group(1)
        in_table.add(name)
        if name not in counts:
            problems.append(f"{where(i)}: the table names {name}, which no // EXERCISE BEGIN marker in stages/ does")
        elif column >= len(cells) or not DONE.search(cells[column]) or DONE.search(cells[column]).group(1) != name:
            problems.append(f"{where(i)}: the 'done when' cell of {name} is not "
                            f"\"`tests/workshop_check.sh {name}` prints `PASS` ({tests_word(counts[name][0])})\"")
    for name in sorted(set(counts) - in_table):
        problems.append(f"{DOC}: the table of exercises has no row for {name} ({tests_word(counts[name][0])})")

    # The room check's lines.
    for i, line in enumerate(lines):
        m = re.match(r"(stage\d\d\.[a-z0-9_]+)\s+(PASS|SKIPPED|FAIL)\s+(.*)$", line)
        if not m or m.group(1) not in counts:
            continue
        name, detail, n = m.group(1), m.group(3), counts[m.group(1)][0]
        quoted = (re.search(r"\((\d+ tests?)\)$", detail) or re.fullmatch(r"(\d+ tests?)", detail)
                  or re.match(r"\d+ of (\d+) tests", detail))
        if quoted and quoted.group(1) not in (tests_word(n), str(n)):
            problems.append(f"{where(i)}: {name} has {tests_word(n)}, the line says '{detail}'")

    # CTest's own output after "$ ctest ... -L <exercise>", up to the end of its block, and the
    # sentence after the block that names the fixture's place among the tests.
    label = None
    for i, line in enumerate(lines):
        m = re.match(r"\$ ctest .*-L\s+(\S+)", line)
        if m:
            label = m.group(1) if m.group(1) in counts else None
            continue
        if not label:
            continue
        n, total = counts[label]
        if line.startswith("```"):
            place = ORDINALS[total - 1] if total <= len(ORDINALS) else str(total)
            for j in range(i + 1, min(i + 4, len(lines))):
                s = re.search(r"The (\w+) test is the fixture", lines[j])
                if s and s.group(1).lower() != place:
                    problems.append(f"{where(j)}: the fixture is test {total} of ctest -L {label}, "
                                    f"the text calls it the {s.group(1)}")
            label = None
            continue
        m = re.search(r"tests failed out of (\d+)", line)
        if m and int(m.group(1)) != total:
            problems.append(f"{where(i)}: ctest -L {label} runs {total} tests ({tests_word(n)} and the "
                            f"fixtures' setup), the quote says {m.group(1)}")
        m = re.search(r"note: (\d+) of (\d+) tests were skipped", line)
        if m and (int(m.group(1)), int(m.group(2))) != (n, total):
            problems.append(f"{where(i)}: ctest -L {label} skips {n} of {total} tests without a GPU, "
                            f"the quote says {m.group(1)} of {m.group(2)}")

def check_done_lines(root, counts, problems):
    """Every exercise says what "done" prints, with its count, in its chapter and in the guide."""
    chapters = {}  # a stage's chapter may come in parts: 03_flash_attention.md, 03b_...md
    for p in sorted((root / "docs").glob("[0-9][0-9]*_*.md")):
        chapters.setdefault(p.stem[:2], []).append(p)
    found = {}
    for path in sorted((root / "docs").glob("*.md")):
        rel = path.relative_to(root).as_posix()
        for i, line in enumerate(path.read_text(encoding="utf-8").split("\n")):
            for m in DONE.finditer(line):
                name, n = m.group(1), int(m.group(2))
                found.setdefault(name, set()).add(rel)
                if name not in counts:
                    problems.append(f"{rel}:{i + 1}: {name} is no exercise (no // EXERCISE BEGIN marker in stages/)")
                elif n != counts[name][0]:
                    problems.append(f"{rel}:{i + 1}: {name} has {tests_word(counts[name][0])}, the line says {n}")
    for name, (nn, _) in sorted(exercises(root).items()):
        for paths in (chapters.get(nn, []), [root / DOC]):
            rels = [p.relative_to(root).as_posix() for p in paths]
            rel = " or ".join(rels) or f"docs/{nn}_*.md"
            if not found.get(name, set()) & set(rels):
                problems.append(f"{rel}: no line says what done looks like for {name}: "
                                f"\"`tests/workshop_check.sh {name}` prints `PASS` ({tests_word(counts[name][0])})\"")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare (the only mode; it writes nothing)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="repository root")
    args = parser.parse_args()
    root = args.root.resolve()
    problems = []
    counts = label_counts(root, problems)
    check_doc(root, counts, problems)
    check_done_lines(root, counts, problems)
    seen = set()
    for line in problems:
        if line not in seen:
            print(line)
            seen.add(line)
    if not problems:
        print(f"{DOC} and the chapters: the test counts of the {len(counts)} exercises match their labels")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

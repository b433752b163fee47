#!/usr/bin/env python3
r"""Keep the code shown in docs/ equal to the source, and the per-stage patches up to date.

Usage (from anywhere; Python 3 standard library only):

    python3 tests/docs/sync_docs.py           rewrite every excerpt and patch from the source
    python3 tests/docs/sync_docs.py --check   rewrite nothing; list what is stale, exit 1 if any
    ... [--root DIR]                          the repository (default: the one holding this file)

The CTest test docs.excerpts_and_diffs_match_source runs --check.

Excerpts. A fenced code block in docs/*.md is an excerpt when the line right before its opening
fence is a marker (an HTML comment, so the rendered page does not show it):

    <!-- excerpt: stages/01_tf32/stage.cuh from "struct Stage01" to "^};$" -->
    <!-- excerpt: common/cuda/gemm.cuh line "cublasLtMatmulDescCreate(" -->
    <!-- excerpt: stages/06_multi_gpu_mfu/nccl_data_parallel.cuh from "void gradients_ready(" to "^    }$" dedent -->

The path is relative to the repository root. A text in quotes ("..." or '...', whichever it
does not contain) matches a source line that contains it; a leading ^ or a trailing $ ties it to
the start or the end of the line (indentation counts); \n between two parts matches them on
consecutive lines ("template <>\nstruct MatmulMath<Precision::TF32>"); nothing else is special.
The start text ("from", or "line") must match in exactly one place in the file. The excerpt runs
from there to the first match of the end text ("to") after it; "line" takes the start text's
lines alone. The block holds those lines verbatim; "dedent" removes the indentation they all
share. A block that shows code deliberately in outline, not as it is in the source, is marked
<!-- sketch --> instead; both modes warn (without failing) about C, C++, CUDA or CMake blocks
that carry neither marker.

Patches. For every stage after 00, docs/diffs/NN_name.patch is a unified diff from the previous
stage to this one, so that the chapter can show its one optimization in one place:
  - the previous stage's stage.cuh -> this stage's stage.cuh (the policy that replaces it);
    stage 01's is shown whole: it derives from stage 00's, the base policy that names every op,
    and a diff against that would list all of stage 00 as removed;
  - every other file of the stage directory as a new file (--- /dev/null). No stage edits an
    earlier stage's files: a file with the name of an earlier one (04_fused_kernels/classifier.cuh
    beside 00_fp32_baseline/classifier.cuh) is a second header in its own namespace, compiled
    next to the first, so it is shown whole and not as a rewrite of the other.
Each patch starts with comment lines, which patch tools skip. The chapter of stage NN_name must
link to diffs/NN_name.patch; --check says so when it does not.

Sources. A figure quoted from elsewhere names its source where it is quoted (title, author,
year, address), so no page of docs/ and not README.md may say "the source material": both modes
report each such line as a problem to fix by hand.
"""
import argparse
import difflib
import re
import sys
import textwrap
from pathlib import Path

QUOTED = r"""("[^"]+"|'[^']+')"""
MARKER = re.compile(rf"<!-- excerpt: (\S+) (?:from {QUOTED} to {QUOTED}|line {QUOTED})( dedent)? -->$")
SKETCH = "<!-- sketch -->"
CODE_LANGS = {"c", "c++", "cpp", "cu", "cuda", "cmake"}
REGENERATE = "python3 tests/docs/sync_docs.py"
UNNAMED_SOURCE = re.compile(r"\bsource\s+material\b", re.IGNORECASE)


def matches(line, text):
    """A line matches "text" if it contains it; ^ and $ anchor it to the line's start and end."""
    if text.startswith("^") and text.endswith("$") and len(text) > 1:
        return line == text[1:-1]
    if text.startswith("^"):
        return line.startswith(text[1:])
    if text.endswith("$"):
        return line.endswith(text[:-1])
    return text in line


def find(lines, text, begin=0):
    """The indices i >= begin where text matches, one part of it (split at \\n) per line from i on."""
    parts = text.split("\\n")
    return [i for i in range(begin, len(lines) - len(parts) + 1)
            if all(matches(lines[i + k], part) for k, part in enumerate(parts))]


def parse_marker(line):
    """{"path", "start", "end", "dedent"} from a marker line, or None if it is malformed."""
    m = MARKER.match(line)
    if not m:
        return None
    path, start, end, single, dedent = m.groups()
    unquote = lambda text: text and text[1:-1]
    return {"path": path, "start": unquote(start or single), "end": unquote(end), "dedent": bool(dedent)}


def excerpt(root, m):
    """The source lines a marker names, or raises ValueError saying why there are none."""
    path = root / m["path"]
    if not path.is_file():
        raise ValueError(f"{m['path']} does not exist")
    lines = path.read_text(encoding="utf-8").split("\n")
    start_text = m["start"]
    starts = find(lines, start_text)
    if not starts:
        raise ValueError(f'start text "{start_text}" not found in {m["path"]}')
    if len(starts) > 1:
        where = ", ".join(str(i + 1) for i in starts)
        raise ValueError(f'start text "{start_text}" is ambiguous in {m["path"]} (lines {where})')
    first = starts[0]
    last = first + start_text.count("\\n")
    if m["end"]:
        ends = find(lines, m["end"], last + 1)
        if not ends:
            raise ValueError(f'end text "{m["end"]}" not found in {m["path"]} after line {last + 1}')
        last = ends[0] + m["end"].count("\\n")
    text = "\n".join(lines[first:last + 1]) + "\n"
    return (textwrap.dedent(text) if m["dedent"] else text).split("\n")[:-1]


def sync_markdown(root, md, problems, warnings):
    """Returns the text of md with every excerpt taken from its source; problems gets (line, fixable)."""
    name = md.relative_to(root).as_posix()
    lines = md.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1  # now the 1-based number of `line`
        if line.startswith("<!-- excerpt:"):
            m = parse_marker(line)
            close = next((j for j in range(i + 1, len(lines)) if lines[j] == "```"), None)
            if not m or i >= len(lines) or not lines[i].startswith("```") or close is None:
                problems.append((f"{name}:{i}: malformed excerpt marker, or no closed ``` block right after it", False))
                continue
            old = lines[i + 1:close]
            try:
                new = excerpt(root, m)
                if new != old:
                    problems.append((f"{name}:{i}: excerpt of {m['path']} no longer matches its source", True))
            except ValueError as e:
                problems.append((f"{name}:{i}: excerpt: {e}", False))
                new = old
            out += [lines[i]] + new + ["```"]
            i = close + 1
        elif line.startswith("```"):
            # a block without a marker: copied as it is; code in it that claims no source is noted
            lang = line[3:].strip().lower()
            if lang in CODE_LANGS and not (len(out) > 1 and out[-2].strip() == SKETCH):
                warnings.append(f"{name}:{i}: warning: {lang} block is neither an excerpt nor marked {SKETCH}")
            while i < len(lines):
                out.append(lines[i])
                i += 1
                if out[-1].strip() == "```":
                    break
    return "\n".join(out)


def unnamed_sources(root, page, problems):
    """A line that cites "the source material" instead of naming the source is a problem."""
    name = page.relative_to(root).as_posix()
    text = page.read_text(encoding="utf-8")
    for number, line in enumerate(text.split("\n"), start=1):
        if UNNAMED_SOURCE.search(line):
            problems.append((f'{name}:{number}: says "source material": name the source (title, author, year, '
                             f"address) where the figure is quoted", False))
    # the phrase broken across two lines
    for match in re.finditer(r"\bsource\n\s*material\b", text, re.IGNORECASE):
        number = text.count("\n", 0, match.start()) + 1
        problems.append((f'{name}:{number}: says "source material": name the source (title, author, year, '
                         f"address) where the figure is quoted", False))


def file_diff(root, old, new):
    """Unified diff lines from file old (None: a new file) to file new, paths relative to root."""
    def read(p):
        text = (root / p).read_text(encoding="utf-8")
        lines = text.split("\n")
        return [l + "\n" for l in lines[:-1]] + ([lines[-1]] if lines[-1] else [])

    a = read(old) if old else []
    b = read(new)
    out = []
    for line in difflib.unified_diff(a, b, old or "/dev/null", new, n=3):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def stage_patch(root, prev, stage, prev_is_base):
    """The patch of stage dir `stage` against `prev` (see the module docstring)."""
    prev_name, name = prev.relative_to(root).as_posix(), stage.relative_to(root).as_posix()
    how = ("Its policy (stage.cuh) derives from the base policy of " + prev_name + " and is shown whole"
           if prev_is_base else "Its policy (stage.cuh) is diffed against the previous stage's")
    head = (f"# {name}: what this stage changes, as one patch against {prev_name}.\n"
            f"# {how}; its other files are new.\n"
            f"# Generated from the source by tests/docs/sync_docs.py; the docs test checks that it is current.\n")
    body = file_diff(root, None if prev_is_base else f"{prev_name}/stage.cuh", f"{name}/stage.cuh")
    for f in sorted(stage.rglob("*")):
        rel = f.relative_to(root).as_posix()
        if f.is_file() and f.name != "stage.cuh" and not any(p.startswith(".") for p in f.relative_to(stage).parts):
            body += file_diff(root, None, rel)
    return head + body


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if anything is stale")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="repository root")
    args = parser.parse_args()
    root = args.root.resolve()
    problems, warnings = [], []  # problems: (line, whether regenerating fixes it)
    writes, removals = [], []

    for md in sorted((root / "docs").glob("*.md")):
        new = sync_markdown(root, md, problems, warnings)
        if new != md.read_text(encoding="utf-8"):
            writes.append((md, new))
        unnamed_sources(root, md, problems)
    if (root / "README.md").is_file():
        unnamed_sources(root, root / "README.md", problems)

    stages = sorted(d for d in (root / "stages").iterdir() if d.is_dir() and re.match(r"\d\d_", d.name))
    diffs = root / "docs" / "diffs"
    for prev, stage in zip(stages, stages[1:]):
        patch = diffs / f"{stage.name}.patch"
        new = stage_patch(root, prev, stage, prev_is_base=prev == stages[0])
        if not patch.is_file():
            problems.append((f"docs/diffs/{patch.name}: missing", True))
            writes.append((patch, new))
        elif patch.read_text(encoding="utf-8") != new:
            problems.append((f"docs/diffs/{patch.name}: no longer matches the stages", True))
            writes.append((patch, new))
        chapter = root / "docs" / f"{stage.name}.md"
        if not chapter.is_file() or f"(diffs/{stage.name}.patch)" not in chapter.read_text(encoding="utf-8"):
            problems.append((f"docs/{stage.name}.md: does not link to diffs/{stage.name}.patch", False))
    wanted = {f"{s.name}.patch" for s in stages[1:]}
    for patch in sorted(diffs.glob("*.patch")) if diffs.is_dir() else []:
        if patch.name not in wanted:
            problems.append((f"docs/diffs/{patch.name}: no such stage", True))
            removals.append(patch)

    for w in warnings:
        print(w)
    if args.check:
        for line, _ in problems:
            print(line)
        if problems:
            print(f"to regenerate the excerpts and patches: {REGENERATE}")
        if any(not fixable for _, fixable in problems):
            print("(a marker whose text is not found or is ambiguous, or a missing link, is fixed by hand first)")
        return 1 if problems else 0

    diffs.mkdir(parents=True, exist_ok=True)
    for path, text in writes:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(f"wrote {path.relative_to(root).as_posix()}")
    for patch in removals:
        patch.unlink()
        print(f"removed {patch.relative_to(root).as_posix()}")
    errors = [line for line, fixable in problems if not fixable]
    for line in errors:
        print(line, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

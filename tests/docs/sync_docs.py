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

Shared code a stage turns on. Some of what a stage changes is code in common/ that every build
compiles and only some stages run: stage 04's kCaptureStep records the step as a CUDA Graph
(common/train/gpt.h, common/cuda/graph.cuh), its Epilogue plumbing lives in common/cuda/gemm.cuh.
Such code is marked where it is, each region between two comment lines naming its switch:

    // [stage switch kCaptureStep]
    ...
    // [end stage switch kCaptureStep]

A switch is a policy setting (a `static constexpr ... kName` of stages/00_*/stage.cuh) or any
other name a stage's own code uses (Epilogue, Parallel). A stage turns it on when the name
appears in the code (not the comments) of a line its patch adds, and
docs/diffs/NN_name.shared.md then shows every region of that switch; the chapter must link to
it. The check fails when
  - a line of common/ reads a policy setting (`S::kName`, `Stage::kName`), or a setting derived
    from one inside its region (`static constexpr bool kLossInChunks = S::kLossChunkRows > 0;`),
    or uses a switch of WATCHED_CODE through its member (`parallel_->`), outside a region of
    that switch: the code it turns on would not be shown. Not checked: the settings in
    NOT_SWITCHES, common/train/policy.h (it describes every setting), and a line whose comment
    says `[describes the policy]` (the banner's words, not code the setting turns on). Code a
    switch reaches in other ways (the Epilogue plumbing) is marked by hand;
  - a marker is not closed, is closed without being opened, or names a switch no stage turns on;
  - a listing is stale (regenerating fixes it) or a chapter does not link to its listing.

Measured tables. A chapter never copies a measured number by hand: where it shows its measured
table it holds a marker pair, and the table between the two lines is written from the committed
GPU runs in docs/results/ by tests/docs/measured.py (which says what each table holds):

    <!-- measured: 03 -->
    <!-- end measured -->

--check fails when a table is not what the results files say; regenerating fixes it, so a new
results directory updates every chapter by regeneration alone.

Links. Every relative link of docs/ (appendices and results included) and README.md must lead to
a file that exists, and a link to a heading (page.md#anchor, or #anchor within the page) to a
heading of that page (anchors as GitHub makes them); so must every "docs/<page>.md#<anchor>" named
in the source (stages/, common/, tests/). --check reports each one that does not.

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

import measured  # beside this file

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


# Policy settings that are read in common/ but turn no code on: every stage runs the same code
# with its own value.
NOT_SWITCHES = {
    "kIsGpu": "which backend, not a stage's choice",
    "kMinComputeCapability": "read by the one device check every GPU stage runs",
    "kGpuReason": "read by the one device check every GPU stage runs",
}
# Switches that are not settings, read through a member rather than S::kName: each such read
# must lie in a region of the switch too.
WATCHED_CODE = {"Parallel": re.compile(r"\bparallel_->")}
# Files that read every setting to describe the policy (the banner, --help).
DESCRIBES_THE_POLICY = {"common/train/policy.h"}
DESCRIBES_TAG = "[describes the policy]"
SHARED_SUFFIXES = {".h", ".cuh", ".cpp", ".cu", ".inl"}
SWITCH_BEGIN = re.compile(r"^\s*// \[stage switch (\w+)\]\s*$")
SWITCH_END = re.compile(r"^\s*// \[end stage switch (\w+)\]\s*$")
# A setting derived from a switch inside its region (`static constexpr bool kLossInChunks = ...`):
# its reads are the switch's reads.
DERIVED = re.compile(r"constexpr\s+[\w:<>]+\s+(k\w+)\s*=")


def code_part(line):
    """A C++ line without its // comment (good enough here: no // inside the strings that matter)."""
    return line.split("//", 1)[0]


def policy_settings(root, base):
    """The names of the base policy's settings: static constexpr ... kName = ...;"""
    text = (base / "stage.cuh").read_text(encoding="utf-8")
    return sorted(set(re.findall(r"static\s+constexpr\s+[\w:<>* ]+?\s(k\w+)\s*=", text)))


def shared_files(root):
    common = root / "common"
    if not common.is_dir():
        return []
    return sorted(f for f in common.rglob("*") if f.is_file() and f.suffix in SHARED_SUFFIXES
                  and "node_modules" not in f.parts)


def switch_regions(root, problems):
    """{switch: [(path, first line number, lines)]} from the markers in common/, every line of
    code with the switches open there, and the settings derived inside a region ({name: switch});
    the problems of the markers themselves go to `problems`."""
    regions, derived = {}, {}
    reads = []  # (path, line number, setting) of every setting read in code, with the open switches
    for f in shared_files(root):
        rel = f.relative_to(root).as_posix()
        open_ = {}  # switch -> (start line number, lines)
        for number, line in enumerate(f.read_text(encoding="utf-8").split("\n"), start=1):
            begin, end = SWITCH_BEGIN.match(line), SWITCH_END.match(line)
            if begin:
                if begin.group(1) in open_:
                    problems.append((f"{rel}:{number}: [stage switch {begin.group(1)}] opened again before its end",
                                     False))
                open_[begin.group(1)] = (number + 1, [])
                continue
            if end:
                key = end.group(1)
                if key not in open_:
                    problems.append((f"{rel}:{number}: [end stage switch {key}] without its beginning", False))
                    continue
                start, lines = open_.pop(key)
                regions.setdefault(key, []).append((rel, start, lines))
                continue
            for start, lines in open_.values():
                lines.append(line)
            for key in open_:
                for name in DERIVED.findall(code_part(line)):
                    derived[name] = key
            reads.append((rel, number, line, set(open_)))
        for key, (start, _) in open_.items():
            problems.append((f"{rel}:{start - 1}: [stage switch {key}] is never ended", False))
    return regions, reads, derived


def unmarked_reads(settings, reads, derived, problems):
    """A policy setting read in the code of common/ outside a region of its switch, or a setting
    derived from a switch read outside a region of that switch."""
    watched = [k for k in settings if k not in NOT_SWITCHES]
    for rel, number, line, open_ in reads:
        if rel in DESCRIBES_THE_POLICY or DESCRIBES_TAG in line:
            continue
        code = code_part(line)
        for key in watched:
            if re.search(rf"\b\w+::{key}\b", code) and key not in open_:
                problems.append((f"{rel}:{number}: reads {key} outside a [stage switch {key}] region: mark the "
                                 f"code it turns on, so that the stage that sets it shows it", False))
        for key, pattern in WATCHED_CODE.items():
            if pattern.search(code) and key not in open_:
                problems.append((f"{rel}:{number}: uses {key} ({pattern.pattern}) outside a [stage switch {key}] "
                                 f"region: mark the code it turns on", False))
        for name, key in derived.items():
            if re.search(rf"\b{name}\b", code) and key not in open_:
                problems.append((f"{rel}:{number}: reads {name} (derived from {key}) outside a [stage switch "
                                 f"{key}] region: mark the code it turns on", False))


def switches_turned_on(patch, keys):
    """{switch: (file, line)}: the switches whose names appear in the code of a line the patch
    adds, each with the first such line and its file."""
    on, path = {}, None
    for line in patch.split("\n"):
        if line.startswith("+++ "):
            path = line[4:].strip()
        elif line.startswith("+"):
            for k in sorted(keys):
                if k not in on and re.search(rf"\b{k}\b", code_part(line[1:])):
                    on[k] = (path, line[1:].strip())
    return dict(sorted(on.items()))


def shared_listing(stage_name, prev_name, on, regions):
    """docs/diffs/NN_name.shared.md: the shared code of each switch the stage turns on."""
    out = [f"# {stage_name}: the shared code this stage turns on",
           "",
           f"[{stage_name}.patch]({stage_name}.patch) shows what this stage adds to {prev_name}: its policy and "
           "its own files. The code below is in common/ and compiled into every stage; what it does depends on "
           "the setting or name in each heading, which this stage sets or starts to use. Each region is marked "
           "in the source between `// [stage switch NAME]` and `// [end stage switch NAME]`.",
           "",
           "Generated from the source by tests/docs/sync_docs.py; the docs test checks that it is current.",
           ""]
    if not on:
        out += ["This stage turns on no shared code: its patch is the whole change.", ""]
    for key, (path, line) in on.items():
        how = "Set" if path.endswith("/stage.cuh") else "Used"
        out += [f"## {key}", "", f"{how} in `{path}`, first by `{code_part(line).strip()}`", ""]
        for rel, _, lines in regions[key]:
            body = textwrap.dedent("\n".join(lines)).strip("\n")
            out += [f"`{rel}`:", "", "```cpp", body, "```", ""]
    return "\n".join(out)


def pages(root):
    """The pages whose excerpts and measured tables are kept: docs/, its appendices, the results'
    README and README.md."""
    docs = root / "docs"
    found = [*sorted(docs.glob("*.md")), *sorted((docs / "appendices").glob("*.md"))]
    found += [p for p in (docs / "results" / "README.md", root / "README.md") if p.is_file()]
    return found


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading counts by its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path, cache={}):
    """Every anchor of a Markdown page: its headings (outside code blocks), numbered as GitHub
    numbers repeats (name, name-1, ...), and <a id=...> / <a name=...> tags."""
    if path not in cache:
        found, seen, fence = set(), {}, None
        for line in path.read_text(encoding="utf-8").split("\n"):
            m = re.match(r"\s*(```+|~~~+)", line)
            if m:
                fence = None if fence and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) else (fence or m.group(1))
                continue
            if fence:
                continue
            h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if h:
                base = slug(h.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
        cache[path] = found
    return cache[path]


def link_problem(root, page, target, pending):
    """Why a relative link from `page` to `target` leads nowhere, or None (`pending`: files about to be written)."""
    path, _, anchor = target.partition("#")
    dest = page if not path else (page.parent / path).resolve()
    if path and not dest.exists() and dest not in pending:
        return "no such file"
    if anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
        return f"no heading #{anchor} in {dest.relative_to(root).as_posix() if root in dest.parents else dest}"
    return None


LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SOURCE_LINK = re.compile(r"\bdocs/([\w./-]+\.md)#([\w-]+)")


def broken_links(root, problems, pending):
    """Relative links of the pages and README.md, and docs/<page>.md#<anchor> in the source, that lead nowhere."""
    docs = root / "docs"
    md_pages = [*sorted(docs.glob("*.md")), *sorted((docs / "appendices").glob("*.md")), *sorted((docs / "results").glob("*.md"))]
    md_pages += [root / "README.md"] if (root / "README.md").is_file() else []
    for page in md_pages:
        fence = False
        for n, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
            if re.match(r"\s*```", line):
                fence = not fence
            if fence:
                continue
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("<"):
                    continue  # https:, mailto: ...
                why = link_problem(root, page, target, pending)
                if why:
                    problems.append((f"{page.relative_to(root).as_posix()}:{n}: link {target}: {why}", False))
    for folder in ("stages", "common", "tests"):
        for src in sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []:
            if not src.is_file() or src.suffix not in {".cuh", ".h", ".cpp", ".cu", ".py", ".sh", ".cmake", ".txt", ".md"} \
                    or src.name == "test_sync_docs.py":  # its made-up pages
                continue
            try:
                text = src.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.split("\n"), 1):
                for page, anchor in SOURCE_LINK.findall(line):
                    dest = docs / page
                    why = "no such file" if not dest.is_file() else \
                        None if anchor in anchors(dest) else f"no heading #{anchor}"
                    if why:
                        problems.append((f"{src.relative_to(root).as_posix()}:{n}: docs/{page}#{anchor}: {why}", False))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if anything is stale")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="repository root")
    args = parser.parse_args()
    root = args.root.resolve()
    problems, warnings = [], []  # problems: (line, whether regenerating fixes it)
    writes, removals = [], []

    for md in pages(root):
        new = sync_markdown(root, md, problems, warnings)
        new = measured.sync(root, md, new, problems)
        if new != md.read_text(encoding="utf-8"):
            writes.append((md, new))
        if md.parent == root / "docs":
            unnamed_sources(root, md, problems)
    if (root / "README.md").is_file():
        unnamed_sources(root, root / "README.md", problems)

    stages = sorted(d for d in (root / "stages").iterdir() if d.is_dir() and re.match(r"\d\d_", d.name))
    diffs = root / "docs" / "diffs"
    regions, reads, derived = switch_regions(root, problems)
    unmarked_reads(policy_settings(root, stages[0]) if stages else [], reads, derived, problems)
    turned_on = set()
    for prev, stage in zip(stages, stages[1:]):
        patch = diffs / f"{stage.name}.patch"
        new = stage_patch(root, prev, stage, prev_is_base=prev == stages[0])
        listing = diffs / f"{stage.name}.shared.md"
        on = switches_turned_on(new, regions)
        turned_on.update(on)
        for path, text in ((patch, new), (listing, shared_listing(stage.name, prev.name, on, regions))):
            if not path.is_file():
                problems.append((f"docs/diffs/{path.name}: missing", True))
                writes.append((path, text))
            elif path.read_text(encoding="utf-8") != text:
                problems.append((f"docs/diffs/{path.name}: no longer matches the source", True))
                writes.append((path, text))
        chapter = root / "docs" / f"{stage.name}.md"
        chapter_text = chapter.read_text(encoding="utf-8") if chapter.is_file() else ""
        for path in (patch, listing):
            if f"(diffs/{path.name})" not in chapter_text:
                problems.append((f"docs/{stage.name}.md: does not link to diffs/{path.name}", False))
    for key in sorted(set(regions) - turned_on):
        for rel, start, _ in regions[key]:
            problems.append((f"{rel}:{start - 1}: [stage switch {key}]: no stage turns {key} on (no stage's patch "
                             f"adds code that names it), so no listing would show this code", False))
    wanted = {f"{s.name}{suffix}" for s in stages[1:] for suffix in (".patch", ".shared.md")}
    for path in sorted([*diffs.glob("*.patch"), *diffs.glob("*.shared.md")]) if diffs.is_dir() else []:
        if path.name not in wanted:
            problems.append((f"docs/diffs/{path.name}: no such stage", True))
            removals.append(path)

    broken_links(root, problems, {path.resolve() for path, _ in writes})
    for w in warnings:
        print(w)
    if args.check:
        for line, _ in problems:
            print(line)
        if problems:
            print(f"to regenerate the excerpts, patches and listings: {REGENERATE}")
        if any(not fixable for _, fixable in problems):
            print("(a marker whose text is not found or is ambiguous, a missing link, or shared code that is not "
                  "marked, is fixed by hand first)")
        return 1 if problems else 0

    diffs.mkdir(parents=True, exist_ok=True)
    for path, text in writes:
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(f"wrote {path.relative_to(root).as_posix()}")
    for path in removals:
        path.unlink()
        print(f"removed {path.relative_to(root).as_posix()}")
    errors = [line for line, fixable in problems if not fixable]
    for line in errors:
        print(line, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The register check of the kernels that keep their tiles or rows in registers (stage 03's
attention, stage 04's row kernels and AdamW): compiles a file that instantiates them
(tests/gpu/flash_attention_registers.cu, tests/gpu/row_kernel_registers.cu) for each architecture
the kernels are written for, reads what ptxas reports for every kernel, and prints its registers
beside the most it may use. It fails when a kernel spills to local memory or uses local memory at
all: the results stay right and no other test notices, but the kernel reads and writes device
memory inside its loop.

A check, not a build step: a ptxas that spills a few bytes (another CUDA version) fails this test,
and the stage still builds and trains. tests/gpu/checks.cmake registers it as registers.stageNN;
the GPU check's quick phase prints its margins.

The compile command is the build's own for the file (compile_commands.json, from the OBJECT
library checks.cmake declares), with the architecture replaced, -ptx, and then ptxas -v on the
PTX. A kernel's most registers: 255, or fewer where __launch_bounds__ asks for several blocks per
SM (PTX .maxntid and .minnctapersm): the 64K registers of an SM shared by that many warps, per
thread in steps of 8.

  register_check.py --compile-commands BUILD/compile_commands.json --source FILE --arch 80 --arch 90
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

REGISTERS_PER_SM = 65536
MOST_PER_THREAD = 255


def compile_command(commands_path, source):
    """The build's nvcc command for `source` as a list, without the compiler launcher (ccache),
    the output, the dependency file and the architectures; and the directory it runs in."""
    with open(commands_path) as f:
        entries = json.load(f)
    source = os.path.realpath(source)
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == source:
            args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
            break
    else:
        raise SystemExit(f"register_check.py: error: {source} is not in {commands_path} "
                         "(configure the build again)")
    while args and not os.path.basename(args[0]).startswith("nvcc"):
        args = args[1:]  # a launcher such as ccache
    if not args:
        raise SystemExit(f"register_check.py: error: the command for {source} does not run nvcc")
    kept, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MF", "-MT", "-arch", "-gencode", "--generate-code", "-code"):
            skip = 1
        elif a in ("-c", "-MD") or a.startswith(("--generate-code=", "-gencode=", "-arch=", "-code=", "-Xptxas")):
            pass
        elif os.path.realpath(os.path.join(e["directory"], a)) == source:
            pass
        else:
            kept.append(a)
    return kept, e["directory"]


def launch_bounds(ptx):
    """{mangled kernel: (threads, blocks per SM or None)} from the PTX's .entry directives."""
    bounds, current = {}, None
    for line in ptx.splitlines():
        m = re.match(r"\s*\.(?:visible\s+|weak\s+)*\.entry\s+([\w$]+)", line)
        if m:
            current = m.group(1)
            bounds[current] = [None, None]
            continue
        if current is None:
            continue
        m = re.match(r"\s*\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", line)
        if m:
            bounds[current][0] = int(m.group(1)) * int(m.group(2) or 1) * int(m.group(3) or 1)
        m = re.match(r"\s*\.minnctapersm\s+(\d+)", line)
        if m:
            bounds[current][1] = int(m.group(1))
        if line.strip().startswith("{"):
            current = None  # the body: the directives come before it
    return {k: tuple(v) for k, v in bounds.items()}


def most_registers(threads, blocks):
    if not threads or not blocks:
        return MOST_PER_THREAD
    warps = (threads + 31) // 32
    per_thread = REGISTERS_PER_SM // (warps * 32 * blocks) // 8 * 8
    return min(MOST_PER_THREAD, per_thread)


def ptxas_report(text):
    """[{name, registers, stack, spill_stores, spill_loads}] and the warnings, from ptxas -v."""
    kernels, warnings, current = [], [], None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = {"name": m.group(1), "registers": None, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            kernels.append(current)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            current["registers"] = int(m.group(1))
        if "warning" in line.lower() or "error" in line.lower():
            warnings.append(line.strip())
    return kernels, warnings


def check_arch(base, directory, source, arch, tmp, nvcc_dir):
    ptx_path = os.path.join(tmp, f"sm_{arch}.ptx")
    cmd = base + [f"-arch=sm_{arch}", "-ptx", source, "-o", ptx_path]
    r = subprocess.run(cmd, cwd=directory, capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"nvcc -ptx for sm_{arch} failed:\n  {shlex.join(cmd)}\n{r.stdout}{r.stderr}"
    ptxas = shutil.which("ptxas", path=nvcc_dir) or shutil.which("ptxas") or "ptxas"
    cmd = [ptxas, f"-arch=sm_{arch}", "-v", "-warn-spills", "-warn-lmem-usage", ptx_path, "-o", os.devnull]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"ptxas for sm_{arch} failed:\n  {shlex.join(cmd)}\n{r.stdout}{r.stderr}"
    with open(ptx_path) as f:
        bounds = launch_bounds(f.read())
    kernels, warnings = ptxas_report(r.stdout + r.stderr)
    for k in kernels:
        threads, blocks = bounds.get(k["name"], (None, None))
        k["most"] = most_registers(threads, blocks)
        k["bounds"] = (f"{threads} threads" if threads else "no launch bounds") + \
            (f", {blocks} block{'s' if blocks > 1 else ''} an SM" if blocks else "")
    return (kernels, warnings, version(ptxas)), None


def version(ptxas):
    r = subprocess.run([ptxas, "--version"], capture_output=True, text=True)
    m = re.search(r"release ([0-9.]+)", r.stdout)
    return m.group(1) if m else "?"


def readable(names):
    """Demangled names, shortened to the kernel and its template arguments."""
    filt = shutil.which("c++filt")
    out = names
    if filt:
        r = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True)
        if r.returncode == 0 and len(r.stdout.splitlines()) == len(names):
            out = r.stdout.splitlines()
    short = []
    for n in out:
        n = re.sub(r"^void ", "", n)
        depth, cut = 0, len(n)
        for i, ch in enumerate(n):  # the parameter list: the first '(' outside template brackets
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                cut = i
                break
        n = n[:cut]
        n = re.sub(r"\bgpt::(stage\d+::)?", "", n)
        n = n.replace("__nv_bfloat16", "bf16")
        short.append(n)
    return short


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile-commands", required=True, help="the build's compile_commands.json")
    p.add_argument("--source", required=True, help="the file that instantiates the kernels")
    p.add_argument("--arch", action="append", required=True, help="80, 90, ... (repeatable)")
    args = p.parse_args()

    base, directory = compile_command(args.compile_commands, args.source)
    nvcc_dir = os.path.dirname(base[0]) if os.path.dirname(base[0]) else None
    source = os.path.realpath(args.source)
    with tempfile.TemporaryDirectory() as tmp:
        with concurrent.futures.ThreadPoolExecutor(len(args.arch)) as pool:
            results = list(pool.map(lambda a: check_arch(base, directory, source, a, tmp, nvcc_dir), args.arch))
    errors = [err for _, err in results if err]
    if errors:
        print("\n".join(errors))
        return 1

    rel = os.path.relpath(source, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    print(f"registers of the kernels of {rel} (ptxas {results[0][0][2]}): used / most (margin)")
    names = sorted({k["name"] for (kernels, _, _), _ in results for k in kernels})
    short = dict(zip(names, readable(names)))
    failures, least, rows = [], None, []
    for name in names:
        cells, bounds = [], ""
        for a, ((kernels, _, _), _) in zip(args.arch, results):
            k = next((k for k in kernels if k["name"] == name), None)
            if k is None:
                cells.append("-")
                continue
            bounds = k["bounds"]
            margin = k["most"] - (k["registers"] or 0)
            cell = f"{k['registers']} / {k['most']} ({margin})"
            if k["spill_stores"] or k["spill_loads"] or k["stack"]:
                cell += " SPILL"
                failures.append(f"{short[name]} on sm_{a}: {k['stack']} bytes stack frame, "
                                f"{k['spill_stores']} bytes spill stores, {k['spill_loads']} bytes spill loads")
            if least is None or margin < least[0]:
                least = (margin, f"{short[name]} on sm_{a}")
            cells.append(cell)
        rows.append((short[name], cells, bounds))
    width = max([len(r[0]) for r in rows] + [6])
    cell_width = max([len(c) for r in rows for c in r[1]] + [6])
    print(f"  {'kernel':<{width}}" + "".join(f"  {'sm_' + a:>{cell_width}}" for a in args.arch) + "  launch bounds")
    for kernel, cells, bounds in rows:
        print(f"  {kernel:<{width}}" + "".join(f"  {c:>{cell_width}}" for c in cells) + f"  {bounds}")
    for a, ((_, warnings, _), _) in zip(args.arch, results):
        for w in warnings:
            failures.append(f"sm_{a}: {w}")
    count = len(names)
    if failures:
        print(f"FAIL: local memory in {len(failures)} place(s); the kernels stay correct but slow:")
        for f in failures:
            print(f"  {f}")
        return 1
    if least is None:
        print("FAIL: ptxas reported no kernel: the file instantiates none")
        return 1
    print(f"registers: {count} kernel{'s' if count > 1 else ''} on {', '.join('sm_' + a for a in args.arch)}, none spilled; "
          f"least margin {least[0]} ({least[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

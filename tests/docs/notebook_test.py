#!/usr/bin/env python3
"""Checks docs/notebook.ipynb: committed clean, and running top to bottom on the CPU.

    notebook_test.py --check-clean --root SRC
        valid JSON, nbformat 4, no outputs and no execution counts (Python standard library only)
    notebook_test.py --root SRC --build-dir SRC/build/cpu --out DIR
        the same, then runs every cell with nbclient, as a reader would, with the preset of the
        build tree (the CPU one), a few steps of the tiny model and the outputs under DIR; the
        executed notebook is kept in DIR/notebook.executed.ipynb, never in docs/

The run needs nbclient, nbformat, ipykernel and matplotlib (Debian: python3-nbclient
python3-ipykernel python3-matplotlib). Without them it reports skipped (exit 77), unless
REQUIRE_NOTEBOOK=1, when it fails. It checks that every cell ran without an error, that the
plot is an image, that text was generated, that the profile cell printed its table (--profile
runs on the CPU trainer too), that each GPU cell printed only its skip line, that
the first cells stop with one line when there is no checkout and no REPO_URL, and that the
repository is as it was (git status).
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

SKIP = 77
STEPS = 4
MODULES = ("nbclient", "nbformat", "ipykernel", "matplotlib")
PACKAGES = "python3-nbclient python3-ipykernel python3-matplotlib"


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def skip(message):
    if os.environ.get("REQUIRE_NOTEBOOK") == "1":
        fail(f"{message} (REQUIRE_NOTEBOOK=1)")
    print(f"skipped: {message}")
    sys.exit(SKIP)


def check_clean(path):
    """The committed notebook: valid JSON, nbformat 4, code cells without outputs or counts."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: not a readable JSON file: {e}")
    if nb.get("nbformat") != 4:
        fail(f"{path}: nbformat is {nb.get('nbformat')!r}, not 4")
    dirty = [i for i, cell in enumerate(nb.get("cells", []))
             if cell.get("cell_type") == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)]
    if dirty:
        fail(f"{path}: cells {dirty} carry outputs or execution counts; clear them before committing "
             "(Jupyter: Edit > Clear All Outputs)")
    if not any(cell.get("cell_type") == "code" for cell in nb.get("cells", [])):
        fail(f"{path}: no code cells")
    return nb


def text_of(cell):
    """What a cell printed (stream outputs), as one string."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def tagged(nb, tag):
    return [(i, c) for i, c in enumerate(nb.cells) if tag in c.get("metadata", {}).get("tags", [])]


def git_new_files(root):
    """The untracked and ignored files and folders git status lists, or None outside a git
    checkout. The notebook changes no tracked file but its own, which is compared whole."""
    try:
        out = subprocess.run(["git", "-C", root, "status", "--porcelain", "--ignored"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return {line for line in out.stdout.splitlines() if line.startswith(("??", "!!"))}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True, help="the repository")
    parser.add_argument("--check-clean", action="store_true", help="only check the committed notebook")
    parser.add_argument("--build-dir", help="the CPU build tree the run uses: ROOT/build/PRESET")
    parser.add_argument("--out", help="a folder for the run's files (emptied first)")
    args = parser.parse_args()
    root = os.path.realpath(args.root)
    path = os.path.join(root, "docs", "notebook.ipynb")
    check_clean(path)
    if args.check_clean:
        print(f"ok: {path} is valid JSON, nbformat 4, without outputs")
        return
    if not args.build_dir or not args.out:
        parser.error("running the notebook needs --build-dir and --out")

    missing = [m for m in MODULES if not _importable(m)]
    if missing:
        skip(f"running the notebook needs {', '.join(missing)} for {sys.executable} (Debian: {PACKAGES})")
    # ./train runs the tree ROOT/build/PRESET; this must be that tree, and a CPU one.
    build = os.path.realpath(args.build_dir)
    preset = os.path.basename(build)
    if os.path.dirname(build) != os.path.join(root, "build"):
        skip(f"./train runs build trees in {root}/build/ only, and this one is {build}")
    try:
        with open(os.path.join(build, "train.target")) as f:
            target = f.readline().strip()
    except OSError:
        skip(f"{build} is not configured for ./train (no train.target)")
    if target != "train_cpu" or not preset.startswith("cpu"):
        skip(f"the notebook test runs the CPU trainer, and {build} builds {target}")
    run(root, path, preset, os.path.realpath(args.out))


def _importable(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


def run(root, path, preset, out):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if os.path.exists(out):
        shutil.rmtree(out)
    work, jupyter = os.path.join(out, "work"), os.path.join(out, "jupyter")
    os.makedirs(work)
    # A kernel of this Python (whatever "python3" kernels the machine has), and Jupyter's,
    # IPython's and matplotlib's files kept under `out`, out of the home folder.
    kernel = "gpt_notebook_test"
    os.makedirs(os.path.join(jupyter, "kernels", kernel))
    with open(os.path.join(jupyter, "kernels", kernel, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "notebook test", "language": "python"}, f)
    # The notebook's settings, as its first cell reads them; its defaults for the others.
    settings = {
        "GPT_NOTEBOOK_PRESET": preset, "GPT_NOTEBOOK_REPO_DIR": root, "GPT_NOTEBOOK_REPO_URL": "",
        "GPT_NOTEBOOK_OUT": os.path.join(out, "run"), "GPT_NOTEBOOK_STEPS": str(STEPS),
        "GPT_NOTEBOOK_MODEL": "tiny", "GPT_NOTEBOOK_INSTALL": "0",
    }
    for name in [n for n in os.environ if n.startswith("GPT_NOTEBOOK_")]:
        del os.environ[name]
    os.environ.update(settings)
    os.environ.update({
        "JUPYTER_PATH": jupyter, "JUPYTER_DATA_DIR": jupyter, "JUPYTER_CONFIG_DIR": jupyter,
        "JUPYTER_RUNTIME_DIR": os.path.join(jupyter, "runtime"), "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": os.path.join(out, "ipython"), "MPLCONFIGDIR": os.path.join(out, "matplotlib"),
        "PYTHONDONTWRITEBYTECODE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })

    with open(path, "rb") as f:
        committed = hashlib.sha256(f.read()).hexdigest()
    before = git_new_files(root)
    default_out = os.path.join(root, "runs", "notebook")
    default_out_existed = os.path.exists(default_out)

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=kernel, timeout=240, resources={"metadata": {"path": work}})
    executed = os.path.join(out, "notebook.executed.ipynb")
    start = time.monotonic()
    failure = None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t = time.monotonic()
            try:
                client.execute_cell(cell, index)
            except CellExecutionError as e:
                failure = f"cell {index} failed:\n{text_of(cell)}{e}"
                break
            tags = ",".join(cell.metadata.get("tags", [])) or "-"
            print(f"cell {index:2d} ({tags}): {time.monotonic() - t:5.1f} s", flush=True)
        if failure is None:
            # The same first cells with no checkout and no REPO_URL: one line that says what to set.
            repo = tagged(nb, "repo")
            if not repo:
                failure = "no cell is tagged 'repo' (the one that finds or clones the checkout)"
            else:
                stop = nbformat.v4.new_code_cell('REPO_DIR, REPO_URL = "", ""\n' + repo[0][1].source)
                try:
                    client.execute_cell(stop, len(nb.cells))
                    failure = "with no checkout and no REPO_URL, the 'repo' cell did not stop"
                except CellExecutionError:
                    errors = [o for o in stop.outputs if o.output_type == "error"]
                    lines = errors[0].traceback if errors else []
                    if len(lines) != 1 or "set REPO_URL" not in lines[0]:
                        failure = f"with no checkout and no REPO_URL, the 'repo' cell said {lines!r}, not one line to set REPO_URL"
    nbformat.write(nb, executed)
    print(f"ran the notebook in {time.monotonic() - start:.1f} s (executed copy: {executed})")
    if failure:
        fail(failure)

    # What the cells showed.
    if not tagged(nb, "gpu") or not tagged(nb, "generate") or not tagged(nb, "profile"):
        fail("the notebook has no cell tagged 'gpu', 'generate' or 'profile'")
    for index, cell in tagged(nb, "gpu"):
        shown = text_of(cell)
        if shown != f"skipped: needs a GPU (PRESET is {preset})\n":
            fail(f"GPU cell {index} printed {shown!r}, not its one skip line")
    if not any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for cell in nb.cells for o in cell.get("outputs", [])):
        fail("no cell displayed an image (the loss curve)")
    for index, cell in tagged(nb, "generate"):
        shown = text_of(cell)
        if "The jury said that" not in shown or "generated " not in shown:
            fail(f"the generate cell {index} printed no generated text:\n{shown}")
    for index, cell in tagged(nb, "profile"):
        shown = text_of(cell)
        if "timed op by op" not in shown or "sum of the ops" not in shown:
            fail(f"the profile cell {index} printed no profile table:\n{shown}")
    log = os.path.join(out, "run", "run.jsonl")
    with open(log) as f:
        records = [json.loads(line) for line in f]
    steps = [r for r in records if r["type"] == "step"]
    if len(steps) != STEPS or not any(r["type"] == "val" for r in records):
        fail(f"{log}: {len(steps)} steps and no validation loss, where {STEPS} steps with validation were asked for")
    if not os.path.isfile(os.path.join(out, "run", "run.ckpt")):
        fail("no checkpoint in the run's folder")

    # Nothing left behind in the repository.
    with open(path, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != committed:
            fail(f"{path} changed while the test ran")
    after = git_new_files(root)
    if before is not None and after is not None and after - before:
        fail("the run left files in the repository (git status):\n" + "\n".join(sorted(after - before)))
    if not default_out_existed and os.path.exists(default_out):
        fail(f"the run wrote {default_out}, not only the folder GPT_NOTEBOOK_OUT named")
    print(f"ok: every cell ran ({STEPS} steps of the tiny model on {preset}); plot, text, profile and GPU skip lines shown")


if __name__ == "__main__":
    main()

"""What the CLI framework costs every command: `import typer` against `import click`, each in a fresh interpreter.

    .venv/bin/python bench/cli_import.py [--rounds 10]

Each round starts one interpreter per case (a bare `python -c pass` for the interpreter's own start, each import
alone, and the same small two-command app in each framework run with an option), in alternating order, so all see
the same load. Prints wall-clock seconds per case (median, min, max), the
versions, the CPU model and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata

# The same two-command app in each framework, run with an option as `imgtxt search "a dog" -n 3` would be: what a
# command pays before it does its own work (typer converts and validates its options when the app runs, so
# `import typer` alone does not show that cost).
CLICK_APP = """
import click
@click.group()
def app():
    pass
@app.command()
@click.argument("text")
@click.option("-n", type=int, default=10)
@click.option("--json", "as_json", is_flag=True)
def search(text, n, as_json):
    pass
@app.command()
@click.option("--json", "as_json", is_flag=True)
def status(as_json):
    pass
app(["search", "a dog", "-n", "3"], standalone_mode=False)
"""
TYPER_APP = """
import typer
app = typer.Typer()
@app.command()
def search(text: str, n: int = typer.Option(10, "-n"), json: bool = False):
    pass
@app.command()
def status(json: bool = False):
    pass
app(["search", "a dog", "-n", "3"], standalone_mode=False)
"""
CANDIDATES = {"bare interpreter": "pass", "import click": "import click", "import typer": "import typer",
              "click app, 1 command": CLICK_APP, "typer app, 1 command": TYPER_APP}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def time_once(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()

    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    names = list(CANDIDATES)
    time_once("import click, typer")   # warm the page cache so the first round is not an outlier
    for round_no in range(args.rounds):
        order = names if round_no % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(time_once(CANDIDATES[name]))
    load_after = os.getloadavg()

    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f}; python {sys.version.split()[0]}; "
          f"click {metadata.version('click')}, typer {metadata.version('typer')}")
    for name, values in times.items():
        print(f"{name:22s} median {statistics.median(values):.3f} s  min {min(values):.3f} s  "
              f"max {max(values):.3f} s  ({len(values)} runs)")


if __name__ == "__main__":
    main()

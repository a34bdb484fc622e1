"""What a ``lightning-edit`` command pays before it starts: import and ``--help`` wall-clock times (not a test).

    python benchmarks/startup_time.py                              # median of 5 runs of each step
    python benchmarks/startup_time.py --checkout /tmp/before       # the same steps with another checkout first
    python benchmarks/startup_time.py --importtime                 # also the slowest imports of lightning_edit.cli

Each step is a fresh ``python`` process, so nothing is cached in memory between runs (the OS file cache is warm after
the first). ``lightning-edit --help`` alone is answered by the console script without importing torch
(:mod:`lightning_edit.console`). The other steps nest: torch, then Lightning (which imports torchmetrics and
``torch._dynamo``), then the CLI module (every editor and benchmark, which import transformers), then
``lightning-edit validate --help`` (which also builds the parser of ``validate``). With ``--checkout`` the steps run
with that directory first on ``PYTHONPATH`` as well, interleaved with the installed package's runs, so a before/after
comparison shares the machine's load.
"""

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lightning_edit import tools

STEPS = {
    "import torch": ["-c", "import torch"],
    "import lightning.pytorch": ["-c", "import lightning.pytorch"],
    "import lightning_edit.cli": ["-c", "import lightning_edit.cli"],
    "lightning-edit validate --help": ["-m", "lightning_edit", "validate", "--help"],
    "lightning-edit --help": ["-m", "lightning_edit", "--help"],
}


def seconds(arguments: list[str], pythonpath: str | None) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], env=env, check=True, capture_output=True, cwd=Path.home())
    return time.perf_counter() - start


def slowest_imports(count: int) -> list[tuple[float, str]]:
    """The ``count`` imports with the largest cumulative time under ``import lightning_edit.cli`` (-X importtime)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import lightning_edit.cli"], capture_output=True, text=True
    )
    rows = re.findall(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", result.stderr)
    top = sorted(((int(cumulative) / 1e6, f"{indent}{name}") for cumulative, indent, name in rows), reverse=True)
    return top[:count]


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=tools.positive_int, default=5)
    parser.add_argument("--checkout", type=Path, default=None, help="another checkout to compare (put on PYTHONPATH)")
    parser.add_argument("--importtime", action="store_true", help="list the slowest imports of lightning_edit.cli")
    args = parser.parse_args()
    sources = {"installed": None, **({str(args.checkout): str(args.checkout)} if args.checkout else {})}
    times = {(step, source): [] for step in STEPS for source in sources}
    for _ in range(args.runs):
        for step, arguments in STEPS.items():
            for source, pythonpath in sources.items():
                times[step, source].append(seconds(arguments, pythonpath))
    print(f"| step | {' | '.join(sources)} |")
    print("|---|" + "---|" * len(sources))
    for step in STEPS:
        medians = [f"{statistics.median(times[step, source]):.2f} s" for source in sources]
        print(f"| {step} | {' | '.join(medians)} |")
    print(f"\nmedians of {args.runs} runs each; lightning-edit --help target: 2 s")
    if args.importtime:
        print("\nslowest imports under `import lightning_edit.cli` (cumulative seconds, indented by depth):")
        for cumulative, name in slowest_imports(25):
            print(f"{cumulative:6.2f}  {name}")


if __name__ == "__main__":
    tools.run(main)

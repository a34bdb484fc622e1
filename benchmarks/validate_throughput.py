"""Validate throughput on 1 and on N CPU processes (not a test): prompts/s and edits/s of the same run.

    python benchmarks/validate_throughput.py                          # ROME quickstart, 100 toy edits, 1 and 2
    python benchmarks/validate_throughput.py --method NoEdit --limit 100
    python benchmarks/validate_throughput.py --devices 1 2 4 -- --model.protocol=sequential
    python benchmarks/validate_throughput.py --cold-statistics   # each row also runs the key statistics pass

Each row is one ``python -m lightning_edit validate --config configs/quickstart.yaml --trainer.devices=N
--trainer.strategy=ddp`` command in a fresh directory; arguments after ``--`` are appended to every command. It
gives the evaluation loop's time (``seconds`` in results.json: edits and scoring on every process, until process
0 has the synced metrics) and the whole command's (which adds starting N processes and loading the model in
each). The statistics cache is warmed first, so no row pays for the statistics pass, unless ``--cold-statistics``
gives each row an empty cache of its own (N processes then share the pass). Prompts are the scored
(case, prompt) pairs of every metric in results.json; the metrics must be equal on every row, which the script
checks.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightning_edit import tools

ROOT = Path(__file__).resolve().parents[1]


def run(directory: Path, devices: int, args: list[str]) -> tuple[float, dict]:
    """Wall-clock seconds of one validate command, and its results.json."""
    command = [sys.executable, "-m", "lightning_edit", "validate", f"--config={ROOT / 'configs/quickstart.yaml'}"]
    command += [f"--trainer.devices={devices}", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    command += [f"--trainer.default_root_dir={directory}", *(["--trainer.strategy=ddp"] if devices > 1 else [])]
    print(" ".join(command + args), file=sys.stderr)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    start = time.perf_counter()
    subprocess.run(command + args, cwd=directory, env=env, check=True, capture_output=True)
    return time.perf_counter() - start, json.loads((directory / "results.json").read_text())


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=tools.positive_int, nargs="+", default=[1, 2], help="process counts to time")
    parser.add_argument("--limit", type=tools.positive_int, default=100, help="toy CounterFact cases")
    parser.add_argument("--method", default=None, help="an editor class instead of the quickstart's ROME")
    parser.add_argument("--cold-statistics", action="store_true", help="each row computes the key statistics")
    parser.add_argument("extra", nargs="*", help="more validate arguments (after --)")
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="validate_throughput_"))
    args = [f"--data.limit={options.limit}", *options.extra]
    if options.method:
        args += [f"--model={options.method}"]
    if not options.cold_statistics:
        args += [f"--model.stats.cache_dir={root / 'stats'}"]
        (root / "warm").mkdir()
        run(root / "warm", 1, [*args, "--data.limit=1"])  # computes and caches the key statistics

    rows = []
    for devices in options.devices:
        directory = root / f"devices{devices}"
        directory.mkdir()
        cache = [f"--model.stats.cache_dir={directory / 'stats'}"] if options.cold_statistics else []
        seconds, results = run(directory, devices, [*args, *cache])
        rows.append((devices, seconds, results))
    first = rows[0][2]["metrics"]
    for devices, _, results in rows[1:]:
        for name, result in first.items():
            other = results["metrics"][name]
            if abs(other["macro"] - result["macro"]) > 1e-6 or other["n_prompts"] != result["n_prompts"]:
                raise SystemExit(f"{devices} processes: {name} differs from {rows[0][0]} process(es)")

    cases = first[next(iter(first))]["n_cases"]
    prompts = sum(result["n_prompts"] for result in first.values() if result["kind"] != "derived")
    print(f"\n{cases} cases, {prompts} scored prompts; {os.cpu_count()} CPUs; runs in {root}\n")
    print("| processes | loop s | cases/s | prompts/s | loop speed-up | command s | command speed-up |")
    print("|---|---|---|---|---|---|---|")
    for devices, command_seconds, results in rows:
        loop, speedup = results["seconds"], rows[0][2]["seconds"] / results["seconds"]
        print(
            f"| {devices} | {loop:.1f} | {cases / loop:.2f} | {prompts / loop:.1f} | {speedup:.2f}x "
            f"| {command_seconds:.1f} | {rows[0][1] / command_seconds:.2f}x |"
        )


if __name__ == "__main__":
    tools.run(main)

"""Editors on a real pretrained model with its preset: metrics, seconds per edit and peak memory (not a test).

    python benchmarks/real_editing.py --preset smollm2-135m --data <dir>/counterfact-edit-1k.json --limit 100 \
        --methods unedited ROME MEMIT --stats-corpus smollm2-samples.jsonl
    python benchmarks/real_editing.py --data <dir>/counterfact-val.json --offset 200 --limit 100 --methods ROME \
        --stats-corpus smollm2-samples.jsonl --flags --trainer.accelerator cuda
    python benchmarks/real_editing.py --preset smollm2-135m --benchmark zsre --data <dir>/zsre_mend_eval.json
    python benchmarks/real_editing.py --preset smollm2-135m --benchmark ruleedit --data builtin:data/ruleedit --limit 79
    python benchmarks/real_editing.py --data <dir>/counterfact-val.json --methods MEMIT --generated-answers bare

Each row is one ``lightning-edit validate`` command in a process of its own (printed on stderr), composed of
``configs/methods/<method>.yaml``, ``configs/models/<preset>.yaml`` (editors that take no preset get its ``lm.path``)
and ``configs/benchmarks/<benchmark>.yaml``, then the key-statistics options (only for the editors that take them) and
``--flags``. Seconds per edit are the whole command's wall clock
(model loading and the unedited checks included) over the number of edits; peak memory is the process's maximum
resident set. Metrics are macro means (ROME's aggregation). With ``--generated-answers`` the runs also generate and
grade an answer to every prompt (``--data.generated_answers``) and the table adds those metrics. Each run's
results.json is under ``--root``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from lightning_edit import tools

ROOT = Path(__file__).resolve().parents[1]

#: row name -> (method config, composes with a model preset, flags that make the row)
METHODS = {
    "unedited": ("no_edit", False, []),
    "ROME": ("rome", True, []),
    "r-ROME": ("rome", True, ["--model.key=prompt"]),
    "MEMIT": ("memit", True, []),
    "AlphaEdit": ("alphaedit", True, []),
    "FT-L": ("ft_l", True, []),
    "FT-M": ("ft_m", True, []),
    "LoRA": ("lora", True, []),
    "GRACE": ("grace", True, []),
    "WISE": ("wise", True, []),
    "RECT": ("rect", True, []),
    "UltraEdit": ("ultraedit", True, []),
    "PROMPT": ("prompt", False, []),
    "IKE": ("ike", False, []),  # give its pool: --flags --model.in_context.pool <file>
}
#: the editors that read key statistics C (``--model.stats``)
TAKES_STATS = {"ROME", "r-ROME", "MEMIT", "AlphaEdit", "RECT"}
METRICS = {
    "counterfact": ("ES", "PS", "NS", "rewrite_acc", "rephrase_acc", "locality_acc"),  # ROME's and EasyEdit's
    "zsre": ("rewrite_acc", "rephrase_acc", "locality_acc"),
    "qaedit": ("rewrite_acc", "rephrase_acc", "locality_acc"),  # EasyEdit's token-level metrics
    "ruleedit": ("Rel", "Gen", "Loc", "IP", "RU"),  # the paper's five, judged by sympy (its judge is an LLM)
}
#: the generated-answer metrics beside them (``--generated-answers``; docs/metrics.md#generated-answers)
GENERATED = {
    "counterfact": ("ES_gen", "ES_gen_contains", "PS_gen", "PS_gen_contains", "NS_gen"),
    "zsre": ("rewrite_gen", "rewrite_gen_contains", "rephrase_gen", "rephrase_gen_contains", "locality_gen"),
    "qaedit": ("rewrite_gen", "rewrite_gen_contains", "rephrase_gen", "rephrase_gen_contains", "locality_gen"),
}


def command(method: str, preset: str, benchmark: str, directory: Path, flags: list[str], protocol: str) -> list[str]:
    config, composes, row_flags = METHODS[method]
    args = [f"--config={ROOT / 'configs/methods' / config}.yaml"]
    preset_path = ROOT / "configs/models" / f"{preset}.yaml"
    if composes:
        args += [f"--config={preset_path}"]
    else:
        args += [f"--model.lm.path={yaml.safe_load(preset_path.read_text())['model']['init_args']['lm']['path']}"]
    args += [f"--config={ROOT / 'configs/benchmarks' / benchmark}.yaml"]
    if method != "unedited":
        args += [f"--model.protocol={protocol}"]
    args += [f"--trainer.default_root_dir={directory}", "--trainer.logger=false", "--trainer.enable_progress_bar=false"]
    return ["lightning-edit", "validate", *args, *row_flags, *flags]


def run(argv: list[str], threads: int | None) -> tuple[float, float]:
    """(wall-clock seconds, peak resident memory in GiB) of one command."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    print(" ".join(argv), file=sys.stderr, flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return seconds, usage.ru_maxrss / 2**20  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="smollm2-135m", help="configs/models/<preset>.yaml")
    parser.add_argument("--benchmark", default="counterfact", choices=sorted(METRICS))
    parser.add_argument("--data", required=True, help="the benchmark file")
    parser.add_argument("--offset", type=tools.non_negative_int, default=0, help="cases skipped first (--data.offset)")
    parser.add_argument("--limit", type=tools.positive_int, default=100)
    parser.add_argument("--stats-corpus", help="key-statistics corpus for the editors that take one")
    parser.add_argument(
        "--stats-samples", type=tools.positive_int, default=600, help="its documents (--model.stats.n_samples)"
    )
    parser.add_argument("--methods", nargs="+", default=["unedited", "ROME", "MEMIT"], choices=list(METHODS))
    parser.add_argument("--protocol", default="single", choices=("single", "batch", "sequential"))
    parser.add_argument("--generated-answers", choices=["bare", "qa_inst", "chat"], help="--data.generated_answers")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="appended to every command")
    parser.add_argument("--threads", type=tools.positive_int, default=None)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="real_editing_"))
    metrics = METRICS[args.benchmark]
    if args.generated_answers:
        metrics += GENERATED[args.benchmark]
    rows = []
    for method in args.methods:
        directory = root / f"{args.preset}-{args.benchmark}-{args.protocol}-{method}"
        flags = [f"--data.path={args.data}", f"--data.offset={args.offset}", f"--data.limit={args.limit}"]
        if args.generated_answers:
            flags += [f"--data.generated_answers={args.generated_answers}"]
        if args.stats_corpus and method in TAKES_STATS:
            flags += [f"--model.stats.corpus={args.stats_corpus}", f"--model.stats.n_samples={args.stats_samples}"]
        flags += args.flags
        seconds, memory = run(
            command(method, args.preset, args.benchmark, directory, flags, args.protocol), args.threads
        )
        results = json.loads(next(directory.glob("**/results.json")).read_text())
        values = {name: results["metrics"][name]["macro"] for name in metrics}
        rows.append({"method": method, **values, "s_per_edit": seconds / args.limit, "peak_gib": memory})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n| method | {' | '.join(metrics)} | s/edit | peak memory |\n|{'---|' * (len(metrics) + 3)}")
    for row in rows:
        values = " | ".join(f"{row[name]:.2f}" for name in metrics)
        print(f"| {row['method']} | {values} | {row['s_per_edit']:.1f} | {row['peak_gib']:.1f} GiB |")
    (root / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    tools.run(main)

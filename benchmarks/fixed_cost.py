"""How much of an evaluation-only run is scoring (not a test): NoEdit validate on the toy CounterFact cases.

    python benchmarks/fixed_cost.py --threads 1            # toy GPT-2, 100 cases, 5 runs after a warm-up run

Each run is ``lightning-edit validate --model NoEdit`` in this process (``build_cli``: after Python's imports, the
whole command: parsing, loading the model, the Trainer, checks, scoring, reports). Scoring is the time spent in
:class:`~lightning_edit.evaluation.CaseScorer` (``reference`` and ``score``); everything else is the run's fixed
cost. Prints each run and the median share of the time spent outside scoring.
"""

import os
import statistics
import tempfile
import time
from functools import wraps
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch  # noqa: E402

from lightning_edit import evaluation, tools  # noqa: E402
from lightning_edit.cli import build_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
scoring_seconds = [0.0]


def timed(method):
    @wraps(method)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            scoring_seconds[0] += time.perf_counter() - start

    return wrapper


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="toy-gpt2", help="a model preset: configs/models/<model>.yaml")
    parser.add_argument(
        "--limit", type=tools.positive_int, default=100, help="the first cases of the toy CounterFact file"
    )
    parser.add_argument("--runs", type=tools.positive_int, default=5)
    parser.add_argument(
        "--threads", type=tools.positive_int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    evaluation.CaseScorer.reference = timed(evaluation.CaseScorer.reference)
    evaluation.CaseScorer.score = timed(evaluation.CaseScorer.score)  # score_unedited calls score
    directory = Path(tempfile.mkdtemp(prefix="fixed_cost_"))  # a folder per run: no run writes into another's
    command = [
        "validate", "--model=NoEdit", f"--config={ROOT / 'configs/models' / args.model}.yaml",
        f"--config={ROOT / 'configs/benchmarks/counterfact.yaml'}", "--data.path=builtin:data/toy/counterfact.json",
        f"--data.limit={args.limit}", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
    ]  # fmt: skip
    build_cli([*command, f"--trainer.default_root_dir={directory / 'warm-up'}"])  # file caches, lazy imports
    shares = []
    for run in range(args.runs):
        scoring_seconds[0] = 0.0
        start = time.perf_counter()
        build_cli([*command, f"--trainer.default_root_dir={directory / f'run{run}'}"])
        total = time.perf_counter() - start
        shares.append((total - scoring_seconds[0]) / total)
        print(f"run {run}: {total:.3f} s, scoring {scoring_seconds[0]:.3f} s, outside scoring {shares[-1]:.1%}")
    print(f"\n{args.model}, NoEdit, {args.limit} toy CounterFact cases, threads {torch.get_num_threads()}: "
          f"median share of the run outside scoring {statistics.median(shares):.1%}")  # fmt: skip


if __name__ == "__main__":
    tools.run(main)

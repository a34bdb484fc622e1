"""ScEdit on a shipped toy model: token level and judged text level of ScEdit's editors (not a test).

    python benchmarks/toy_scedit.py                                  # trains the toy MEND network first (~6 min)
    python benchmarks/toy_scedit.py --mend runs/toy-mend/lightning_logs/version_0/mend.pt --limit 50

Each row is one ``lightning-edit validate`` run, in-process, of ``configs/methods/<method>.yaml`` (+ the toy GPT-2
preset for weight editors) + ``configs/benchmarks/scedit.yaml`` on the toy ScEdit-CF, with ``--data.generation``
and ``--data.text_level`` on, under the paper's protocol (single edits, rolled back); the command is printed on
stderr. The methods are the paper's (FT, FT+L, MEND, ROME, MEMIT; PROMPT stands for its in-context row). Scripts
are written after the bare Script Question (the toy model never saw the paper's instruction prompt) and judged by
the shipped toy judge (``builtin:models/toy-judge-gpt2``, docs/toy-presets.md): a smoke test of the pipeline, whose
Likert values are not comparable with the paper's GPT-4o ratings. Each method runs a second time with the same
scripts (generation is seeded per case) judged by the rules the toy judge was trained to imitate
(``lightning_edit.toy.ToyRuleJudge``): text-level cells are ``toy judge / rules``. MEND edits with ``--mend`` (a
``mend.pt``), or with a network trained here by ``configs/toy/mend.yaml``. Token-level metrics are macro means
(fractions); Exec/Coh/Cons/Comp are mean ratings (1-7); GE is the mean n-gram entropy of the sampled scripts.
"""

import json
import tempfile
from pathlib import Path

import torch
from toy_runs import ROOT, validate

from lightning_edit import tools

TOKEN_LEVEL = ("ES", "S-ES", "S-NS", "GE")
TEXT_LEVEL = ("Exec", "Coh", "Cons", "Comp")
ROWS = ("unedited", "FT", "FT-L", "MEND", "ROME", "MEMIT", "PROMPT")
#: run-directory suffix -> the text level's judge
JUDGES = {
    "": '{"local_lm": {"path": "builtin:models/toy-judge-gpt2"}}',
    "-rules": '{"lightning_edit.toy.ToyRuleJudge": {}}',
}


def train_mend(root: Path) -> Path:
    """The toy GPT-2's MEND network, trained by ``configs/toy/mend.yaml`` into ``root``."""
    from lightning_edit.cli import build_cli

    build_cli(["fit", f"--config={ROOT / 'configs/toy/mend.yaml'}", f"--trainer.default_root_dir={root}",
               "--trainer.logger=false", "--trainer.enable_progress_bar=false",
               f"--model.output_dir={root}"], exit_on_error=False)  # fmt: skip
    return root / "mend.pt"


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument(
        "--limit", type=tools.positive_int, default=50, help="the first cases of the toy ScEdit-CF file"
    )
    parser.add_argument("--mend", type=Path, default=None, help="a trained toy MEND network (default: train one)")
    parser.add_argument("--root", type=Path, default=None, help="where the runs write (default: a temporary dir)")
    parser.add_argument(
        "--threads", type=tools.positive_int, default=1, help="torch CPU threads (docs/results/toy-benchmarks.md: 1)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root = args.root or Path(tempfile.mkdtemp(prefix="toy_scedit_"))
    data = [f"--data.limit={args.limit}", "--data.generation=true", "--data.text_level=true",
            "--data.script_prompt={question}"]  # fmt: skip
    results = []
    for name in args.methods:
        flags = []
        if name == "MEND":
            mend = args.mend or train_mend(root / "mend-training")
            flags = [f"--model.ckpt_path={mend}"]
        runs = {}
        for suffix, judge in JUDGES.items():
            judged = [*data, f"--data.judge={judge}", *flags]
            runs[suffix] = validate(name, "toy-gpt2", "scedit", root / (name + suffix), judged)
        results.append((name, runs[""][0], runs["-rules"][0], runs[""][1]))
    print(f"\ntoy-gpt2, {args.limit} toy ScEdit-CF edits, single; text level: toy judge / rules (runs in {root})\n")
    print("| method | " + " | ".join(TOKEN_LEVEL + TEXT_LEVEL) + " | seconds |")
    print("|---|" + "---|" * len(TOKEN_LEVEL + TEXT_LEVEL) + "---|")
    for name, metrics, rules, seconds in results:
        cells = [f"{metrics[m]['macro']:.{2 if m == 'GE' else 3}f}" for m in TOKEN_LEVEL]
        cells += [f"{metrics[m]['macro']:.2f} / {rules[m]['macro']:.2f}" for m in TEXT_LEVEL]
        print(f"| {name} | {' | '.join(cells)} | {seconds:.0f} |")
    (root / "table.json").write_text(json.dumps(
        [{"method": n, "metrics": m, "rules": r, "seconds": s} for n, m, r, s in results], indent=1, default=str
    ))  # fmt: skip


if __name__ == "__main__":
    tools.run(main)

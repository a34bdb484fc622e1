"""How much of a ROME edit reaches each CounterFact neighbourhood prompt, and whether that predicts a lost neighbour.

ROME writes ΔW = Λ (C⁻¹k̄)ᵀ (eq. 2), so at any token whose key is k the edit adds Λ · α with
α = (C⁻¹k̄)·k / (C⁻¹k̄)·k̄: the share of the edit that token receives (1 at the edited subject). For each case this
prints the largest |α| over the tokens of its neighbourhood prompt, beside whether the ROME run lost that neighbour
(NS 1 -> 0 against the unedited run). It needs no v*, only keys, so it runs in seconds per case on a CPU (not a test):

    python benchmarks/rome_neighbour_leak.py --preset smollm2-135m --data <dir>/counterfact-val.json --offset 200 \\
        --limit 100 --stats-corpus smollm2-samples.jsonl --rome <run>/cases.jsonl --unedited <run>/cases.jsonl
"""

import json
import statistics
from pathlib import Path

import torch
import yaml

from lightning_edit import tools
from lightning_edit.data import CounterFact
from lightning_edit.editors import ROME
from lightning_edit.editors.locate import compute_keys
from lightning_edit.models.hooks import Trace
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.tokenization import encode_prompt
from lightning_edit.presets import editor_arguments
from lightning_edit.stats.config import KeyStatistics

ROOT = Path(__file__).resolve().parents[1]


def neighbour_ns(path: Path) -> dict[int, float]:
    return {row["case_id"]: row["scores"]["NS"] for row in map(json.loads, path.read_text().splitlines())}


def token_keys(editor: ROME, prompt: str) -> torch.Tensor:
    """(T, d_in): the input of the edited projection at every token of ``prompt`` (the forward stops there)."""
    name = editor.arch.layer_name(editor.arch.spec.mlp_out, editor.layer)
    with torch.no_grad(), Trace(editor.model, name, inputs=True, outputs=False, stop_after=name) as trace:
        editor.model(torch.tensor([encode_prompt(editor.tokenizer, prompt)]))
    return trace.inputs[name][0].double()


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--data", required=True)
    parser.add_argument("--offset", type=tools.non_negative_int, default=0)
    parser.add_argument("--limit", type=tools.positive_int, default=100)
    parser.add_argument("--stats-corpus", required=True)
    parser.add_argument("--stats-samples", type=tools.positive_int, default=600)
    parser.add_argument("--rome", type=Path, required=True, help="cases.jsonl of the ROME run")
    parser.add_argument("--unedited", type=Path, required=True, help="cases.jsonl of the unedited run")
    args = parser.parse_args()
    preset = editor_arguments(yaml.safe_load((ROOT / "configs/models" / f"{args.preset}.yaml").read_text()), ROME)
    editor = ROME(
        ModelSource(**preset["lm"]),
        layer=preset["layer"],
        stats=KeyStatistics(corpus=args.stats_corpus, n_samples=args.stats_samples),
    )
    covariance = editor.covariance()
    templates = editor.templates.get(editor.model, editor.tokenizer, editor.template_lengths, editor.template_seed)
    data = CounterFact(args.data, offset=args.offset, limit=args.limit)
    data.setup()
    before, after = neighbour_ns(args.unedited), neighbour_ns(args.rome)
    rows = []
    for case in data.cases:
        (request,) = case.requests
        k_bar = compute_keys(editor.model, editor.tokenizer, [request], editor.layer, templates)[0].double()
        u = covariance.solve(k_bar)
        leaks = [(token_keys(editor, prompt) @ u).abs().max().item() / (u @ k_bar).item() for prompt in
                 case.groups["neighborhood"].prompts]  # fmt: skip
        lost = before[case.case_id] > after[case.case_id]
        rows.append(
            {"case_id": case.case_id, "leak": max(leaks), "kept_by_unedited": before[case.case_id], "lost": lost}
        )
        print(json.dumps(rows[-1]), flush=True)
    for name, chosen in (("lost", [r for r in rows if r["lost"]]), ("kept", [r for r in rows if not r["lost"]])):
        leaks = sorted(r["leak"] for r in chosen if r["kept_by_unedited"] == 1.0)
        if leaks:
            print(
                f"{name}: {len(leaks)} neighbours the unedited model had right; largest |α|: median "
                f"{statistics.median(leaks):.3f}, min {leaks[0]:.3f}, max {leaks[-1]:.3f}"
            )


if __name__ == "__main__":
    tools.run(main)

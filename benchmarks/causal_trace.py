"""Causal tracing of a model over facts it knows (ROME, §2.1 and Figures 1-2); writes a heatmap PNG and a JSON.

Facts come from a CounterFact file (either format): each record's true fact, kept when the model's greedy next token
after the prompt is the first token of the true object ("a fact the model knows"), in file order, until ``--facts``.
The figure averages each fact's indirect effects over the paper's six token categories; the JSON holds the averages
and every fact's own table. The noise is 3σ of the traced subjects' embeddings (``--noise-factor``).

    python benchmarks/causal_trace.py --model gguf:smollm2-135m-instruct --data <dir>/counterfact-train.json \
        --facts 20 --out docs/figures/causal-trace-smollm2-135m
"""

import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from lightning_edit import tools  # noqa: E402
from lightning_edit.data import CounterFact  # noqa: E402
from lightning_edit.errors import ConfigError, Interrupted  # noqa: E402
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer  # noqa: E402
from lightning_edit.models.registry import resolve_architecture  # noqa: E402
from lightning_edit.models.tokenization import encode_prompt, encode_prompt_target  # noqa: E402
from lightning_edit.models.tracing import CATEGORIES, KINDS, Fact, category_effects, noise_scale, trace_fact  # noqa: E402
from lightning_edit.stopping import stop_requested  # noqa: E402


def known_facts(model, tokenizer, path: str, n: int, skip: int = 0) -> list[Fact]:
    """The first ``n`` true facts of the file (after ``skip`` records) whose first object token the model predicts."""
    facts = []
    for case in CounterFact(path=path).load_cases()[skip:]:
        request = case.requests[0]
        prompt, answer = request.filled_prompt, request.target_true
        with torch.no_grad():
            logits = model(torch.tensor([encode_prompt(tokenizer, prompt)]), logits_to_keep=1).logits
        if logits[0, -1].argmax().item() == encode_prompt_target(tokenizer, prompt, answer)[1][0]:
            facts.append(Fact(prompt, request.subject, answer))
        if len(facts) == n:
            break
    return facts


def mean_table(tables: list[list[list[float | None]]]) -> list[list[float | None]]:
    """``[layer][category]`` mean over facts, each cell over the facts that have that category."""
    layers, categories = len(tables[0]), len(tables[0][0])
    means = []
    for layer in range(layers):
        row = []
        for category in range(categories):
            values = [table[layer][category] for table in tables if table[layer][category] is not None]
            row.append(sum(values) / len(values) if values else None)
        means.append(row)
    return means


def plot(averages: dict, title: str, path: Path) -> None:
    kinds = list(averages)
    figure, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 3.2), squeeze=False)
    labels = {"hidden": "single restored layer", "mlp": "MLP, window", "attn": "attention, window"}
    for axis, kind in zip(axes[0], kinds):
        table = torch.tensor([[v if v is not None else float("nan") for v in row] for row in averages[kind]])
        image = axis.imshow(table.T, aspect="auto", cmap={"hidden": "Purples", "mlp": "Greens"}.get(kind, "Reds"))
        axis.set_yticks(range(len(CATEGORIES)), CATEGORIES, fontsize=7)
        axis.set_xlabel("layer")
        axis.set_title(f"AIE, {labels[kind]}", fontsize=9)
        figure.colorbar(image, ax=axis)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gguf:smollm2-135m-instruct")
    parser.add_argument("--data", required=True, help="a CounterFact file (not the split you report)")
    parser.add_argument("--facts", type=tools.positive_int, default=20)
    parser.add_argument("--skip", type=tools.non_negative_int, default=0, help="records to pass over first")
    parser.add_argument("--samples", type=tools.positive_int, default=10, help="noise draws per fact (paper: 10)")
    parser.add_argument(
        "--window", type=tools.positive_int, default=10, help="layers restored for mlp/attn (paper: 10)"
    )
    parser.add_argument("--kinds", nargs="+", default=["hidden", "mlp", "attn"], choices=KINDS)
    parser.add_argument("--noise-factor", type=float, default=3.0)
    parser.add_argument("--threads", type=tools.positive_int, default=None)
    parser.add_argument("--out", required=True, help="output path without extension (.json and .png are written)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)  # a name with a dot (qwen2.5-...) keeps it whole: the extension is appended
    with tools.output(out.with_name(out.name + ".json"), "--out") as file:  # before the model loads: can it be written?
        summary = summarise(args)
        file.write(json.dumps(summary, indent=1) + "\n")
    title = (f"{args.model}: {summary['facts']} known facts, {args.samples} noise draws,\nν = {summary['noise']:.3g}; "
             f"P* {summary['p_clean']:.3f}, corrupted {summary['p_corrupted']:.3f}")  # fmt: skip
    plot(summary["average_indirect_effect"], title, out.with_name(out.name + ".png"))
    print(json.dumps({k: summary[k] for k in ("facts", "p_clean", "p_corrupted", "peak_layer", "seconds")}))
    if "stopped" in summary:
        raise Interrupted(f"causal tracing stopped by {summary['stopped']}; {out.name}.json and .png hold the facts "
                          "traced so far: run the same command again for all of them", summary["signal"])  # fmt: skip


def summarise(args) -> dict:
    """The JSON summary of tracing the known facts of ``args.data`` (module docstring)."""
    model, tokenizer = load_model_and_tokenizer(ModelSource(args.model))
    arch = resolve_architecture(model)
    facts = known_facts(model, tokenizer, args.data, args.facts, args.skip)
    if not facts:
        raise ConfigError(f"--data {args.data!r}: the model knows none of its facts (after --skip {args.skip})")
    noise = noise_scale(model, tokenizer, arch, [fact.subject for fact in facts], args.noise_factor)
    start, traces, stopped = time.perf_counter(), [], {}
    for index, fact in enumerate(facts):
        trace = trace_fact(
            model, tokenizer, arch, fact, noise, args.samples, tuple(args.kinds), args.window, seed=index
        )
        traces.append(trace)
        print(f"{index + 1}/{len(facts)} {fact.prompt!r} -> {fact.answer!r}: P* {trace.p_clean:.3f}, corrupted "
              f"{trace.p_corrupted:.3f} ({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
        if (signum := stop_requested()) is not None and len(traces) < len(facts):  # SIGTERM: keep the facts traced
            stopped = {"stopped": f"signal {signum} after {len(traces)} of {len(facts)} facts", "signal": signum}
            break
    tables = [category_effects(trace) for trace in traces]
    averages = {kind: mean_table([table[kind] for table in tables]) for kind in args.kinds}
    summary = {
        "model": args.model,
        "data": Path(args.data).name,
        "facts": len(traces),
        "samples": args.samples,
        "window": args.window,
        "noise": noise,
        "noise_factor": args.noise_factor,
        "p_clean": sum(t.p_clean for t in traces) / len(traces),
        "p_corrupted": sum(t.p_corrupted for t in traces) / len(traces),
        "seconds": round(time.perf_counter() - start, 1),
        "categories": CATEGORIES,
        "average_indirect_effect": averages,  # kind -> [layer][category]
        **stopped,
        "peak_layer": {  # where each kind's effect at the last subject token is largest
            kind: max(range(arch.num_layers), key=lambda layer: averages[kind][layer][2]) for kind in args.kinds
        },
        "traces": [
            {
                "prompt": t.fact.prompt,
                "subject": t.fact.subject,
                "answer": t.fact.answer,
                "tokens": t.tokens,
                "p_clean": t.p_clean,
                "p_corrupted": t.p_corrupted,
                "categories": table,
            }
            for t, table in zip(traces, tables)
        ],  # fmt: skip
    }
    return summary


if __name__ == "__main__":
    tools.run(main)

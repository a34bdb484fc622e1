"""FLOP efficiency of ROME and MEMIT under the ``single`` protocol on GPT-2-small- and LLaMA-shaped models (not a test).

    python benchmarks/flop_efficiency.py --threads 1                              # ROME and MEMIT, both shapes
    python benchmarks/flop_efficiency.py --threads 1 --shapes gpt2-small --methods rome --cases 0
    python benchmarks/flop_efficiency.py --quick                                  # tiny shapes, a smoke run
    python benchmarks/flop_efficiency.py --device cuda                            # where a GPU exists

Models are built from a config with random weights (speed does not depend on what a model knows) and the embedded
tokenizer; requests and cases come from the CounterFact sample that ships with the package. Every figure is measured
in this run, on this machine:

- ``matmul``: the best FLOP/s of a square float32 matmul (``--matmul-size``), the machine's reference;
- per edit (one request, ``--steps`` v*/z iterations, no early stop): seconds and the FLOPs the edit executes, counted
  by ``torch.utils.flop_counter.FlopCounterMode`` (matmuls and attention, forward and backward; key passes
  included), on the reference path (``full_forward``: the whole model and every position's logits at every step)
  and on the default path (the blocks below the injection once, logits only at the target and KL positions). The
  default path's count is the minimal computation, so ``efficiency`` = its FLOPs / seconds / matmul FLOP/s, for both
  paths (and, for the reference path, its own FLOPs as well);
- per case (edit plus scoring of its CounterFact prompts, ``--cases`` cases): cases/s one at a time on the reference
  path, one at a time on the default path, and batched (the cases optimised together, scored in one pass with each
  row's own low-rank update), with the speed-up of each over the reference.

ROME edits ``--layer`` (5 for GPT-2 small) without the covariance (``mom2_adjustment`` false, as EasyEdit's configs);
MEMIT edits ``--memit-layers`` with statistics of ``--documents`` embedded-text documents.
"""

import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

from lightning_edit import tools  # noqa: E402
from lightning_edit.data import CounterFact  # noqa: E402
from lightning_edit.editors import MEMIT, ROME  # noqa: E402
from lightning_edit.editors.target_vector import TargetOptimization  # noqa: E402
from lightning_edit.evaluation import CaseScorer, ScoringConfig  # noqa: E402
from lightning_edit.models.loading import ModelSource, load_tokenizer  # noqa: E402
from lightning_edit.resources import builtin_texts  # noqa: E402
from lightning_edit.stats.config import KeyStatistics  # noqa: E402

SHAPES = {  # (family, layers, width, heads, MLP width, vocabulary)
    "gpt2-small": ("gpt2", 12, 768, 12, 3072, 50257),
    "llama": ("llama", 12, 768, 12, 2048, 32000),
    "quick-gpt2": ("gpt2", 4, 128, 4, 512, 5000),
    "quick-llama": ("llama", 4, 128, 4, 384, 5000),
}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_flops(size: int, device: str, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """The best FLOP/s of ``size × size`` matmuls in ``dtype``."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def build_model(shape: str, directory: Path) -> None:
    family, layers, width, heads, mlp, vocab = SHAPES[shape]
    tokenizer = load_tokenizer(ModelSource("builtin:models/tiny-gpt2"))
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    if family == "gpt2":
        config = GPT2Config(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=heads, n_inner=mlp, **ids)
        model = GPT2LMHeadModel(config)
    else:
        config = LlamaConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                             intermediate_size=mlp, max_position_embeddings=1024, **ids)  # fmt: skip
        model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def make_editor(method: str, args, directory: Path, full_forward: bool, batched: bool):
    target = TargetOptimization(
        v_num_grad_steps=args.steps, early_stop_loss=float("-inf"), full_forward=full_forward,
        clamp_norm_factor=4.0 if method == "rome" else 0.75,
    )  # fmt: skip
    common = dict(target=target, batched_single=batched)
    if method == "rome":
        editor = ROME(ModelSource(str(directory)), layer=args.layer, mom2_adjustment=False, **common)
    else:
        stats = KeyStatistics(corpus=str(directory / "corpus.txt"), n_samples=args.documents,
                              cache_dir=str(directory / "stats"))  # fmt: skip
        editor = MEMIT(ModelSource(str(directory)), layers=args.memit_layers, stats=stats, **common)
    editor.to(args.device)
    editor.prepare_statistics()
    if method == "rome":
        editor.templates.get(editor.model, editor.tokenizer, editor.template_lengths, editor.template_seed)
    else:
        editor.context_templates()
    return editor


def one_edit(editor, request) -> None:
    with editor.edits_applied([request]):
        pass


def timed(device: str, fn, *args) -> float:
    sync(device)
    start = time.perf_counter()
    fn(*args)
    sync(device)
    return time.perf_counter() - start


def counted(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


def cases_section(editor, cases, device: str) -> dict[str, float]:
    """Seconds to edit and score ``cases``: one at a time (edit, score, undo), and batched when possible."""
    scorer = CaseScorer(editor.model, editor.tokenizer, ScoringConfig())
    reference = scorer.reference(cases)

    def one_at_a_time() -> None:
        for case in cases:
            with editor.edits_applied(case.requests):
                scorer.score([case], reference)

    def batched() -> None:
        with editor.low_rank_edits([case.requests for case in cases]):
            scorer.score(cases, reference, owners={case.case_id: owner for owner, case in enumerate(cases)})

    return {"one at a time": timed(device, one_at_a_time), "batched": timed(device, batched)}


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", nargs="+", default=["gpt2-small", "llama"], choices=list(SHAPES))
    parser.add_argument("--methods", nargs="+", default=["rome", "memit"], choices=["rome", "memit"])
    parser.add_argument("--steps", type=tools.positive_int, default=20, help="v*/z iterations per edit (no early stop)")
    parser.add_argument("--layer", type=tools.non_negative_int, default=5, help="ROME's edited layer")
    parser.add_argument("--memit-layers", type=tools.non_negative_int, nargs="+", default=[3, 4, 5, 6, 7, 8])
    parser.add_argument(
        "--cases", type=tools.non_negative_int, default=4, help="cases for cases/s (0: skip that section)"
    )
    parser.add_argument("--documents", type=tools.positive_int, default=200, help="MEMIT's statistics documents")
    parser.add_argument("--matmul-size", type=tools.positive_int, default=2048)
    parser.add_argument(
        "--threads", type=tools.positive_int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, few steps: a smoke run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.shapes = [f"quick-{SHAPES[s][0]}" for s in args.shapes]
        args.steps, args.layer, args.memit_layers, args.cases, args.documents = 4, 1, [1, 2], 2, 20
        args.matmul_size = 512
    peak = matmul_flops(args.matmul_size, args.device)
    print(f"matmul: {peak / 1e9:.1f} GFLOP/s (float32 {args.matmul_size}², {args.device}, "
          f"{torch.get_num_threads()} threads)\n")  # fmt: skip
    data = CounterFact("builtin:data/counterfact-flat.json")
    data.setup()
    texts = [t.replace("\n", " ") for t in builtin_texts()]
    rng = random.Random(0)
    print("| shape | method | path | s/edit | GFLOP/edit | efficiency (minimal FLOPs) | efficiency (own FLOPs) |")
    print("|---|---|---|---|---|---|---|")
    speeds = []
    for shape in args.shapes:
        with tempfile.TemporaryDirectory() as name:
            directory = Path(name)
            build_model(shape, directory)
            (directory / "corpus.txt").write_text("\n".join(" ".join(rng.choices(texts, k=8)) for _ in range(1000)))
            for method in args.methods:
                request = data.cases[0].requests[0]
                figures = {}
                for path, full in (("reference", True), ("default", False)):
                    editor = make_editor(method, args, directory, full, batched=False)  # statistics, templates
                    seconds = timed(args.device, one_edit, editor, request)
                    figures[path] = (seconds, counted(one_edit, editor, request))
                    if args.cases:
                        cases = data.cases[2 : 2 + args.cases]
                        speeds.append((shape, method, path, cases_section(editor, cases, args.device), len(cases)))
                    del editor
                minimal = figures["default"][1]
                for path, (seconds, flops) in figures.items():
                    print(f"| {shape} | {method} | {path} | {seconds:.2f} | {flops / 1e9:.0f} | "
                          f"{minimal / seconds / peak:.2f} | {flops / seconds / peak:.2f} |")  # fmt: skip
                sys.stdout.flush()
    if speeds:
        print("\n| shape | method | v*/z path | protocol | cases/s | speed-up over reference, one at a time |")
        print("|---|---|---|---|---|---|")
        base = {(s, m): t["one at a time"] for s, m, p, t, _ in speeds if p == "reference"}
        for shape, method, path, seconds, n in speeds:
            for protocol, value in seconds.items():
                print(f"| {shape} | {method} | {path} | {protocol} | {n / value:.3f} | "
                      f"{base[shape, method] / value:.2f}x |")  # fmt: skip
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"\npeak memory: RSS {rss:,.0f} MiB")


if __name__ == "__main__":
    tools.run(main)

"""Speed of the closed-form editors ROME, MEMIT and AlphaEdit, their key statistics and MEMIT's solve (not a test).

    python benchmarks/editing_speed.py --quick --threads 1   # smoke run: tiny sizes (~20 s on 2 busy cores)
    python benchmarks/editing_speed.py --threads 1           # 6 layers x 256, 24 edits, 400 documents (~9 min)
    python benchmarks/editing_speed.py --n-edits 96 --edit-batch-size 32 --documents 2000 --solver-d-in 4096

On a CPU shared with other jobs, ``--threads 1`` is several times faster than torch's default (threads that
spin-wait for each other under contention); without the option torch chooses.

The model is a GPT-2 built from a config (random weights: speed does not depend on what it knows) with the embedded
tokenizer, saved to a temporary directory that every editor loads. Requests are the CounterFact sample that ships
with the package (cycled when more edits are asked for than it has); statistics documents are built from the
embedded texts. Sections:

1. statistics: the first (uncached) ``load_or_compute`` over all edited layers in one pass, a second call that hits
   the cache, and one uncached pass per layer (what the reference code does);
2. editing: edits/s per method and protocol, statistics and context templates prepared before the clock starts
   (``single``: apply + restore per edit; ``batch``: every edit in one ``apply_edits``; ``sequential``:
   ``edit_batch_size`` edits per call, cumulatively). On a random model the v*/z optimisation never stops early;
3. MEMIT's solve: ``method="woodbury"`` with a cached ``CovarianceFactor`` against the direct ``"cholesky"`` solve
   on a random SPD C, and the max relative difference of the two updates;
4. peak memory (process peak RSS, and CUDA's max allocated memory when CUDA is used) after each section.
"""

import os
import random
import resource
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from lightning_edit import tools  # noqa: E402
from lightning_edit.data import CounterFact  # noqa: E402
from lightning_edit.editors import MEMIT, ROME, AlphaEdit  # noqa: E402
from lightning_edit.editors.solvers import CovarianceFactor, memit_update  # noqa: E402
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer, load_tokenizer  # noqa: E402
from lightning_edit.models.snapshot import WeightSnapshot  # noqa: E402
from lightning_edit.resources import builtin_texts  # noqa: E402
from lightning_edit.stats import load_or_compute  # noqa: E402
from lightning_edit.stats.config import KeyStatistics  # noqa: E402

PROTOCOLS = ("single", "batch", "sequential")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int = 1):
    """(best wall time in seconds over ``repeats`` calls, result of the last call)."""
    best, result = float("inf"), None
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_memory(after: str) -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    line = f"peak memory after {after}: RSS {rss:,.0f} MiB"
    if torch.cuda.is_available():
        line += f", CUDA max allocated {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB"
    print(line + "\n")


def build_model(args, directory: Path) -> None:
    tokenizer = load_tokenizer(ModelSource("builtin:models/tiny-gpt2"))
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_embd=args.hidden, n_layer=args.layers, n_head=8, n_positions=args.max_length, **ids
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def write_documents(path: Path, n: int, texts_per_document: int) -> None:
    """``n`` documents (one per line), each ``texts_per_document`` embedded texts drawn with a fixed seed."""
    texts, rng = [t.replace("\n", " ") for t in builtin_texts()], random.Random(0)
    path.write_text("\n".join(" ".join(rng.choices(texts, k=texts_per_document)) for _ in range(n)) + "\n")


def counterfact_requests(n: int) -> list:
    data = CounterFact("builtin:data/counterfact-flat.json")
    data.setup()
    requests = [request for case in data.cases for request in case.requests]
    return [requests[i % len(requests)] for i in range(n)]


def statistics_section(args, model_dir: Path, stats: KeyStatistics) -> None:
    model, tokenizer = load_model_and_tokenizer(ModelSource(str(model_dir)))
    model.to(args.device)

    def moments(layers: list[int], cache_dir: str):
        return lambda: load_or_compute(
            model,
            tokenizer,
            stats.corpus,
            layers,
            n_samples=stats.n_samples,
            documents_per_forward=stats.documents_per_forward,
            cache_dir=cache_dir,
            progress=False,
        )

    first, together = timed(moments(args.edit_layers, stats.cache_dir))
    cached, again = timed(moments(args.edit_layers, stats.cache_dir))  # no forward: every layer is cached
    per_layer, alone = 0.0, {}
    with tempfile.TemporaryDirectory() as other_cache:  # an empty cache: every layer is computed
        for layer in args.edit_layers:
            seconds, result = timed(moments([layer], other_cache))
            per_layer, alone[layer] = per_layer + seconds, result[layer]
    gap = max(float((alone[i].sum - together[i].sum).abs().max() / together[i].sum.abs().max()) for i in alone)
    same = all(torch.equal(again[i].sum, together[i].sum) for i in together)
    m = together[args.edit_layers[0]]
    print(
        f"== key statistics: layers {args.edit_layers}, {m.n_documents} documents, {m.n_tokens} tokens, "
        f"d_in {m.sum.shape[0]}"
    )
    print(f"one pass, uncached   : {first:8.2f} s")
    print(f"second call (cache)  : {cached:8.2f} s  ({first / cached:.0f}x faster; identical sums: {same})")
    print(
        f"one pass per layer   : {per_layer:8.2f} s  ({per_layer / first:.1f}x the single pass; "
        f"max rel. difference of the sums {gap:.1e})"
    )


def make_editor(cls, args, model_dir: Path, stats: KeyStatistics):
    sites = {"layer": args.edit_layers[-1]} if cls is ROME else {"layers": args.edit_layers}
    extra = {"nullspace_threshold": args.nullspace_threshold} if cls is AlphaEdit else {}
    editor = cls(ModelSource(str(model_dir)), stats=stats, **sites, **extra)
    editor.target = replace(editor.target, v_num_grad_steps=args.grad_steps)
    return editor.to(args.device)


def prepare(editor) -> None:
    """What an editor does once, before its first edit: statistics (and null-space bases) and context templates."""
    editor.prepare_statistics()
    editor.templates.get(editor.model, editor.tokenizer, editor.template_lengths, editor.template_seed)


def run_protocol(editor, requests: list, protocol: str, edit_batch_size: int) -> None:
    if protocol == "single":
        for request in requests:
            with editor.edits_applied([request]):
                pass
    elif protocol == "batch":
        with editor.edits_applied(requests):
            pass
    else:
        with WeightSnapshot(editor.model, editor.edited_parameters(requests)):
            for start in range(0, len(requests), edit_batch_size):
                editor.apply_edits(requests[start : start + edit_batch_size])
        editor.on_edits_restored()


def editing_section(args, model_dir: Path, stats: KeyStatistics) -> None:
    requests = counterfact_requests(args.n_edits)
    print(
        f"== editing: {len(requests)} CounterFact edits (from {len(set(requests))} distinct), layers "
        f"{args.edit_layers} (ROME: {args.edit_layers[-1]}), {args.grad_steps} target steps, "
        f"edit_batch_size {args.edit_batch_size}"
    )
    print(f"{'method':<10} {'prepare s':>9} " + " ".join(f"{p + ' edits/s':>18}" for p in PROTOCOLS))
    for cls in (ROME, MEMIT, AlphaEdit):
        editor = make_editor(cls, args, model_dir, stats)
        setup, _ = timed(partial(prepare, editor))
        run_protocol(editor, requests[:1], "single", 1)  # warm-up
        cells = []
        for protocol in PROTOCOLS:
            seconds, _ = timed(partial(run_protocol, editor, requests, protocol, args.edit_batch_size))
            cells.append(f"{len(requests) / seconds:8.2f} ({seconds:5.1f} s)")
        note = f"  null-space rank {[int(U.shape[1]) for U in editor._bases.values()]}" if cls is AlphaEdit else ""
        print(f"{cls.__name__:<10} {setup:9.2f} " + " ".join(f"{c:>18}" for c in cells) + note)
        del editor


def solve_section(args) -> None:
    d_in, d_out, lam = args.solver_d_in, args.solver_d_in // 4, args.lam
    generator = torch.Generator().manual_seed(0)
    A = torch.randn(d_in, 2 * d_in, generator=generator, dtype=torch.float64)
    C = (A @ A.T / (2 * d_in)).to(args.device)  # (d_in, d_in) SPD, eigenvalues in about [0.09, 2.9]
    del A
    factor_time, factor = timed(lambda: CovarianceFactor(C))
    print(
        f"== MEMIT solve: d_in {d_in}, d_out {d_out}, lambda {lam:g}, best of {args.repeats}; "
        f"CovarianceFactor (once per layer, cached): {factor_time:.2f} s"
    )
    print(f"{'n':>6} {'woodbury s':>11} {'cholesky s':>11} {'speed-up':>9} {'max rel diff':>13}")
    for n in args.solver_n:
        K = torch.randn(d_in, n, generator=generator, dtype=torch.float64).to(args.device)
        R = torch.randn(d_out, n, generator=generator, dtype=torch.float64).to(args.device)
        woodbury, dw = timed(lambda: memit_update(factor, K, R, lam, method="woodbury"), args.repeats)
        direct, dc = timed(lambda: memit_update(factor, K, R, lam, method="cholesky"), args.repeats)
        diff = float((dw - dc).abs().max() / dc.abs().max())
        print(f"{n:6d} {woodbury:11.4f} {direct:11.4f} {direct / woodbury:8.1f}x {diff:13.1e}")


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes (overrides the others)")
    parser.add_argument("--layers", type=tools.positive_int, default=6)
    parser.add_argument(
        "--hidden", type=tools.positive_int, default=256, help="hidden size (the keys have 4x as many dims)"
    )
    parser.add_argument(
        "--edit-layers", type=tools.non_negative_int, nargs="+", default=[1, 2, 3, 4], help="MEMIT's; ROME: the last"
    )
    parser.add_argument("--n-edits", type=tools.positive_int, default=24)
    parser.add_argument(
        "--edit-batch-size", type=tools.positive_int, default=8, help="sequential protocol: edits per call"
    )
    parser.add_argument(
        "--grad-steps", type=tools.positive_int, default=20, help="v*/z optimisation steps (reference: 20)"
    )
    parser.add_argument("--nullspace-threshold", type=float, default=2e-2, help="AlphaEdit's tau")
    parser.add_argument("--documents", type=tools.positive_int, default=400, help="statistics documents")
    parser.add_argument(
        "--texts-per-document", type=tools.positive_int, default=16, help="embedded texts joined per document"
    )
    parser.add_argument(
        "--max-length", type=tools.positive_int, default=256, help="context length (tokens kept per document)"
    )
    parser.add_argument("--documents-per-forward", type=tools.positive_int, default=8, help="statistics pass")
    parser.add_argument("--solver-d-in", type=tools.positive_int, default=2048)
    parser.add_argument("--solver-n", type=tools.positive_int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--lam", type=float, default=15000.0, help="MEMIT's mom2_update_weight")
    parser.add_argument("--repeats", type=tools.positive_int, default=3, help="solve timings: best of this many")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=tools.positive_int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    if args.quick:
        args.layers, args.hidden, args.edit_layers, args.n_edits, args.edit_batch_size = 4, 128, [1, 2], 4, 2
        args.grad_steps, args.documents, args.solver_d_in, args.solver_n, args.repeats = 5, 40, 512, [1, 10, 100], 1
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
        f"model: GPT-2 {args.layers} layers x {args.hidden} (random weights)\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_model(args, tmp / "model")
        write_documents(tmp / "documents.txt", args.documents, args.texts_per_document)
        stats = KeyStatistics(
            corpus=str(tmp / "documents.txt"),
            n_samples=args.documents,
            documents_per_forward=args.documents_per_forward,
            cache_dir=str(tmp / "cache"),
        )
        statistics_section(args, tmp / "model", stats)
        peak_memory("the statistics")
        editing_section(args, tmp / "model", stats)
        peak_memory("editing")
    solve_section(args)
    peak_memory("the solves")


if __name__ == "__main__":
    tools.run(main)

"""ROME, MEMIT, AlphaEdit and UltraEdit on a LLaMA-2-7B-shaped model with random weights, on a GPU (not a test).

    python benchmarks/gpu_7b_shape.py --device cuda                      # LLaMA-2-7B shape, bfloat16 and float32
    python benchmarks/gpu_7b_shape.py --shape small --device cpu         # the dry run: a small shape on CPU

No weights travel: the model is built from its config with random weights on the machine, saved (safetensors) with
the embedded tokenizer and loaded by the editors' own loading code, with ``configs/models/llama-2-7b.yaml``'s sites and
v*/z settings. The key statistics come from ``--documents`` documents of random words. The requests are CounterFact
cases that ship with the package (their text only matters for its length). For each dtype and editor, one editor call
(``--requests`` requests; MEMIT ``--memit-requests``, 100 by default, the paper's batch) is timed, with:

- seconds per edit (the call over its requests; the statistics pass before it, not counted);
- peak GPU memory of the call (``torch.cuda.max_memory_allocated``, the weights included) and the v*/z memory budget in
  force (docs/editors/locate-then-edit.md#memory-budget);
- efficiency: the FLOPs of the call (``torch.utils.flop_counter.FlopCounterMode``, matmuls and attention, forward and
  backward, on the default path, the minimal computation) over its seconds, as a fraction of the best square-matmul
  FLOP/s of the device in that dtype (``--matmul-size``).

EasyEdit's published LLaMA-2-7B figures to compare (its README's table, one A100-80GB, float32): ROME 31 GB and MEMIT
33 GB of GPU memory.
"""

import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported

import torch  # noqa: E402
import yaml  # noqa: E402
from flop_efficiency import matmul_flops, sync  # noqa: E402  (the script's folder is on the path)
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from lightning_edit import tools  # noqa: E402
from lightning_edit.data import CounterFact  # noqa: E402
from lightning_edit.editors import MEMIT, ROME, AlphaEdit, UltraEdit  # noqa: E402
from lightning_edit.editors.target_vector import TargetOptimization  # noqa: E402
from lightning_edit.models.loading import ModelSource, load_tokenizer  # noqa: E402
from lightning_edit.presets import editor_arguments  # noqa: E402
from lightning_edit.resources import builtin_texts  # noqa: E402
from lightning_edit.stats.config import KeyStatistics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {  # layers, width, heads, MLP width, vocabulary
    "llama-2-7b": (32, 4096, 32, 11008, 32000),
    # the dry run: the preset's ROME and MEMIT layers (up to 8) exist; LLaMA's MLP ratio; the embedded tokenizer's
    # 1,024 tokens (a 32,000 vocabulary and width 256 made the dry run take 4 min in the test suite, bfloat16 on CPU)
    "small": (10, 64, 2, 172, 1024),
}
EDITORS = {"ROME": ROME, "MEMIT": MEMIT, "AlphaEdit": AlphaEdit, "UltraEdit": UltraEdit}


def build_model(shape: str, dtype: torch.dtype, device: str, directory: Path) -> None:
    """A random-weight LLaMA of ``shape`` saved with the embedded tokenizer."""
    layers, width, heads, mlp, vocab = SHAPES[shape]
    tokenizer = load_tokenizer(ModelSource("builtin:models/tiny-gpt2"))
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=mlp, max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):  # initialised on the device: no host copy of 7B parameters
        model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    del model


def write_corpus(directory: Path, documents: int, words: int) -> Path:
    """``documents`` lines of ``words`` words drawn at random from the embedded benchmark texts."""
    vocabulary = sorted({word for text in builtin_texts() for word in text.split()})
    generator = random.Random(0)
    path = directory / "corpus.txt"
    path.write_text("".join(" ".join(generator.choices(vocabulary, k=words)) + "\n" for _ in range(documents)))
    return path


def make_editor(name: str, directory: Path, dtype: str, corpus: Path, documents: int):
    preset = yaml.safe_load((ROOT / "configs/models/llama-2-7b.yaml").read_text())
    arguments = editor_arguments(preset, EDITORS[name])  # the preset's lm and the editor's sections
    arguments["lm"] = ModelSource(str(directory), dtype=dtype)
    if name == "UltraEdit":
        return UltraEdit(**arguments)
    stats = KeyStatistics(corpus=str(corpus), n_samples=documents, cache_dir=str(directory / "stats"))
    return EDITORS[name](**arguments | dict(stats=stats, target=TargetOptimization(**arguments["target"])))


def measure(editor, requests: list, device: str) -> dict[str, float]:
    editor.to(device)
    editor.prepare_statistics()
    if hasattr(editor, "context_templates"):
        editor.context_templates()
    elif hasattr(editor, "templates"):
        editor.templates.get(editor.model, editor.tokenizer, editor.template_lengths, editor.template_seed)
    undo = editor.prepare_undo(requests)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    sync(device)
    start = time.perf_counter()
    editor.apply_edits(requests)
    sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) if device.startswith("cuda") else float("nan")  # none on CPU
    editor.undo(undo)
    with FlopCounterMode(display=False) as counter:
        editor.apply_edits(requests)
    editor.undo(undo)
    budget = editor.peak_memory.target_budget or 0
    return {"seconds": seconds, "peak": peak, "flops": counter.get_total_flops(), "budget": budget}


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="llama-2-7b", choices=list(SHAPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"])
    parser.add_argument("--editors", nargs="+", default=list(EDITORS), choices=list(EDITORS))
    parser.add_argument("--requests", type=tools.positive_int, default=4, help="requests per call (ROME, ...)")
    parser.add_argument("--memit-requests", type=tools.positive_int, default=100, help="MEMIT's requests per call")
    parser.add_argument("--documents", type=tools.positive_int, default=200, help="random documents of statistics")
    parser.add_argument("--document-words", type=tools.positive_int, default=200)
    parser.add_argument("--matmul-size", type=tools.positive_int, default=8192)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU here (the dry run: --shape small --device cpu)")
    root = args.root or Path(tempfile.mkdtemp(prefix="gpu_7b_shape_"))
    cases = CounterFact("builtin:data/counterfact-rome.json").load_cases()
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name(args.device)}", file=sys.stderr)
    rows = []
    for dtype in args.dtypes:
        directory = root / f"{args.shape}-{dtype}"
        build_model(args.shape, getattr(torch, dtype), args.device, directory)
        corpus = write_corpus(directory, args.documents, args.document_words)
        rate = matmul_flops(args.matmul_size, args.device, dtype=getattr(torch, dtype))
        for name in args.editors:  # each editor loads the saved weights anew (page-cached)
            count = args.memit_requests if name == "MEMIT" else args.requests
            requests = [request for case in cases for request in case.requests][:count]
            editor = make_editor(name, directory, dtype, corpus, args.documents)
            figures = measure(editor, requests, args.device)
            del editor
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
            rows.append(
                f"| {name} | {dtype} | {len(requests)} | {figures['seconds'] / len(requests):.2f} | "
                f"{figures['peak'] / 2**30:.1f} | {figures['budget'] / 2**30:.2f} | "
                f"{figures['flops'] / figures['seconds'] / rate:.3f} |"
            )
            print(rows[-1], flush=True)
        for weights in directory.glob("*.safetensors"):
            weights.unlink()  # 13.5 GB (bfloat16) or 27 GB (float32) of disk
    print(f"\n{args.shape} on {args.device}\n")
    print("| editor | dtype | requests per call | s/edit | peak GPU memory (GiB) | budget (GiB) | of matmul rate |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    tools.run(main)

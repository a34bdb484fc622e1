"""Memory and forward time of one process with the model on one device or spread by a device map (not a test).

    python benchmarks/device_map_memory.py --shapes toy-gpt2 gpt2-small

For each model shape (random weights, saved as safetensors in a temporary folder) and each placement, in a process of
its own, as ``lm.device_map`` loads it (``lightning_edit.models.loading.load_model``):

- ``one device``: the whole model on the CPU;
- ``blocks on disk``: every decoder block offloaded to disk (read in place from the safetensors file before it runs),
  embeddings, final norm and unembedding on the CPU;

it prints the parameter bytes held in memory at rest (offloaded ones are empty ``meta`` tensors), the process's peak
resident memory (Linux's VmHWM, reset before loading) above its resident memory before loading, over loading and
``--forwards`` forwards of 8 sequences of 64 tokens (``--batch``), and the seconds of the fastest forward (the disk
reads included: the file sits in the page cache after the first; its mapped pages count as resident while mapped).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from sharded_memory import SHAPES as ALL_SHAPES
from transformers import AutoModelForCausalLM

from lightning_edit import tools

SHAPES = {name: ALL_SHAPES[name] for name in ("toy-gpt2", "gpt2-small")}  # GPT-2 shapes: blocks_on_disk's map


def blocks_on_disk(config) -> dict[str, str]:
    """The GPT-2 map: every block on disk, the rest on the CPU."""
    blocks = {f"transformer.h.{i}": "disk" for i in range(config.n_layer)}
    return {"transformer.wte": "cpu", "transformer.wpe": "cpu", **blocks, "transformer.ln_f": "cpu", "lm_head": "cpu"}


def measure(directory: str, device_map: dict | None, batch: tuple[int, int], forwards: int) -> dict:
    """One placement, in this process: bytes at rest, peak RSS above the start, seconds per forward."""
    from lightning_edit.models.loading import ModelSource, load_model

    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak (VmHWM) starts again from the current RSS
    start = _status_bytes("VmRSS")
    model = load_model(ModelSource(directory, device_map=device_map))
    held = sum(p.numel() * p.element_size() for p in model.parameters() if not p.is_meta)
    ids = torch.randint(0, model.config.vocab_size, batch, generator=torch.Generator().manual_seed(0))
    seconds = []
    with torch.no_grad():
        for _ in range(forwards):
            begin = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            seconds.append(time.perf_counter() - begin)
    return {"held": held, "peak_rss": _status_bytes("VmHWM") - start, "seconds": min(seconds)}


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (kB there)."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--batch", nargs=2, type=tools.positive_int, default=[8, 64], help="sequences, tokens")
    parser.add_argument(
        "--forwards", type=tools.positive_int, default=3, help="forwards timed (the fastest is reported)"
    )
    parser.add_argument("--threads", type=tools.positive_int, default=1)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a child process: folder, map (JSON)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.measure:
        directory, device_map = json.loads(args.measure)
        print(json.dumps(measure(directory, device_map, tuple(args.batch), args.forwards)))
        return
    print("| model | placement | parameters held (MiB) | × one device | peak RSS (MiB) | s / forward |")
    print("|---|---|---|---|---|---|")
    for shape in args.shapes:
        config = SHAPES[shape]()
        with tempfile.TemporaryDirectory() as directory:
            torch.manual_seed(0)
            AutoModelForCausalLM.from_config(config).save_pretrained(directory)
            rows = {}
            for placement, device_map in (("one device", None), ("blocks on disk", blocks_on_disk(config))):
                command = [sys.executable, str(Path(__file__).resolve()), "--threads", str(args.threads)]
                command += ["--batch", *map(str, args.batch), "--forwards", str(args.forwards)]
                command += ["--measure", json.dumps([directory, device_map])]
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                rows[placement] = result = json.loads(output.strip().splitlines()[-1])
                ratio = result["held"] / rows["one device"]["held"]
                print(
                    f"| {shape} | {placement} | {result['held'] / 2**20:,.1f} | {ratio:.2f} | "
                    f"{result['peak_rss'] / 2**20:,.0f} | {result['seconds']:.3f} |"
                )


if __name__ == "__main__":
    tools.run(main)

"""Parameter memory per process of a model sharded over 1, 2 and 4 processes (FSDP2 on CPU, gloo) (not a test).

    python benchmarks/sharded_memory.py --processes 1 2 4

For each model shape (the toy GPT-2 and toy LLaMA that ship with the package, GPT-2 small, and GPT-2 small with
untied embeddings, random weights) and each number of processes, as ``configure_model`` shards it
(``lightning_edit.models.sharding.shard_model``; 1 process: the model unsharded, as without a sharding strategy):

- at rest: the parameter bytes a process holds (its shards);
- peak in a forward: the most parameter bytes it holds at any module's call during one forward of 8 sequences of 64
  tokens (``--batch``), its shards plus the units gathered then (a unit is gathered while it runs; the root's, with tied
  embeddings, for the whole forward);
- peak RSS: the process's peak resident memory above its start (activations and buffers included; rough on CPU).

The model is built on the meta device and materialised after sharding, so no process ever holds it whole.
"""

import os
import resource
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, LlamaConfig

from lightning_edit import tools

SHAPES = {
    "toy-gpt2": lambda: AutoConfig.from_pretrained(_builtin("toy-gpt2")),
    "toy-llama": lambda: AutoConfig.from_pretrained(_builtin("toy-llama")),
    "gpt2-small": lambda: GPT2Config(),  # 124M parameters, tied embeddings (38.6M of them)
    "gpt2-small-untied": lambda: GPT2Config(tie_word_embeddings=False),  # 163M, embeddings two units
    "llama-2-7b": lambda: LlamaConfig(  # 6.7B parameters in bfloat16 (13.5 GB whole): --shapes llama-2-7b
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        vocab_size=32000,
        dtype="bfloat16",
    ),
}


def _builtin(name: str) -> str:
    from lightning_edit.resources import resolve_path

    return str(resolve_path(f"builtin:models/{name}"))


def local_bytes(model: torch.nn.Module) -> int:
    """The parameter bytes the process holds at rest: each parameter's local shard (all of it when unsharded)."""
    from torch.distributed.tensor import DTensor

    locals_ = [param.to_local() if isinstance(param, DTensor) else param for param in model.parameters()]
    return sum(local.numel() * local.element_size() for local in locals_)


def gathered_bytes(model: torch.nn.Module) -> int:
    """The bytes of the parameters gathered now: FSDP2 swaps them in while their unit runs (its shards stay held) and
    frees their storage (to 0 bytes) once the unit is resharded; each storage counted once."""
    from torch.distributed.tensor import DTensor

    storages = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None and not isinstance(param, DTensor):
                storages[param.untyped_storage().data_ptr()] = param.untyped_storage().nbytes()
    return sum(storages.values())


def worker(rank: int, world: int, port: int, shape: str, batch: int, length: int, results: dict) -> None:
    from lightning_edit.models.registry import resolve_architecture
    from lightning_edit.models.sharding import shard_model

    torch.set_num_threads(1)
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    config = SHAPES[shape]()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "dtype", None) or torch.float32)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh

        arch = resolve_architecture(model)
        blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
        shard_model(model, blocks, init_device_mesh("cpu", (world,)))
    model.to_empty(device="cpu")  # FSDP2's keeps tied embeddings tied; a plain module's does not: tie them again
    if world == 1:
        model.tie_weights()
    generator = torch.Generator().manual_seed(rank)
    with torch.no_grad():
        for param in model.parameters():  # values do not matter here, only that they are finite
            local = param.to_local() if hasattr(param, "to_local") else param
            local.normal_(0.0, 0.02, generator=generator)
        for buffer in model.buffers():
            buffer.zero_()
    model.requires_grad_(False).eval()
    at_rest, gathered = local_bytes(model), [0]
    if world > 1:
        hook = lambda *_: gathered.append(gathered_bytes(model))  # noqa: E731
        handles = [module.register_forward_pre_hook(hook) for module in model.modules()]
    else:
        handles = []
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for handle in handles:
        handle.remove()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start
    results[rank] = (at_rest, at_rest + max(gathered), rss)
    dist.destroy_process_group()


def measure(shape: str, world: int, batch: int, length: int) -> tuple[int, int, int]:
    """(at rest, peak in a forward, peak RSS) of process 0 of ``world``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(world, port, shape, batch, length, results), nprocs=world, join=True)
        return results[0]


def main() -> None:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=tools.positive_int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--shapes", nargs="+", default=[shape for shape in SHAPES if shape != "llama-2-7b"],
                        choices=list(SHAPES))  # fmt: skip
    parser.add_argument(
        "--batch", type=tools.positive_int, nargs=2, default=[8, 64], help="sequences and tokens of the forward"
    )
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mib = 2**20
    print("| model | processes | parameters at rest (MiB) | x 1 process | peak in a forward (MiB) | x 1 process | "
          "peak RSS (MiB) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        base = None
        for world in args.processes:
            at_rest, peak, rss = measure(shape, world, *args.batch)
            base = base or (at_rest, peak)
            print(f"| {shape} | {world} | {at_rest / mib:.1f} | {at_rest / base[0]:.2f} | {peak / mib:.1f} | "
                  f"{peak / base[1]:.2f} | {rss / mib:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    tools.run(main)

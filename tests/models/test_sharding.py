"""A model sharded by FSDP2 over 2 CPU processes (gloo): weights read whole, updates written as process 0's,
forwards of different counts kept in step, undo bit-exact; the outputs those of the unsharded model."""

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from transformers import GPT2Config, GPT2LMHeadModel

from lightning_edit.models import WeightSnapshot, from_linear, resolve_architecture
from lightning_edit.models.placement import add_to_weight, whole
from lightning_edit.models.sharding import Lockstep, is_sharded, shard_model

WORLD = 2
#: per process, the inputs of its own forwards: process 1 runs fewer, and one of another length
INPUTS = {0: [[5, 6, 7, 8], [9, 10], [11, 12, 13]], 1: [[1, 2, 3]]}


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def worker(rank: int, port: int, directory: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        model, reference = tiny_gpt2(), tiny_gpt2()
        arch = resolve_architecture(model)
        c_proj = arch.module(arch.spec.mlp_out, 1)
        name = arch.layer_name(arch.spec.mlp_out, 1) + ".weight"
        shard_model(
            model, [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)], init_device_mesh("cpu", (WORLD,))
        )
        assert is_sharded(model) and not is_sharded(reference)
        assert (
            isinstance(c_proj.weight, DTensor) and c_proj.weight.to_local().shape[0] == c_proj.weight.shape[0] // WORLD
        )
        assert torch.equal(whole(c_proj), reference.get_parameter(name))

        snapshot = WeightSnapshot(model, [name])
        update = from_linear(torch.full((32, 128), 0.01 * (rank + 1)), "conv1d")  # each process its own: 0's wins
        add_to_weight(c_proj, update)
        with torch.no_grad():
            reference.get_parameter(name).add_(from_linear(torch.full((32, 128), 0.01), "conv1d"))
        assert torch.equal(whole(c_proj), reference.get_parameter(name))

        outputs = []
        with torch.no_grad(), Lockstep(model, init_device_mesh("cpu", (WORLD,))) as lockstep:
            # its vote runs before FSDP's pre-forward hook (the gathers): else a voting process meets a gathering one
            assert next(iter(model._forward_pre_hooks.values())) == lockstep._pre_forward
            for ids in INPUTS[rank]:
                outputs.append(model(input_ids=torch.tensor([ids])).logits)
        for ids, logits in zip(INPUTS[rank], outputs):
            torch.testing.assert_close(logits, reference(input_ids=torch.tensor([ids])).logits, rtol=0, atol=1e-5)

        snapshot.restore()
        assert torch.equal(whole(c_proj), tiny_gpt2().get_parameter(name))  # the undo: bit for bit
        torch.save({"forwards": len(outputs)}, f"{directory}/{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.multiprocess
def test_sharded_weights_updates_and_forwards_in_step(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(worker, args=(port, str(tmp_path)), nprocs=WORLD, join=True)
    done = [torch.load(tmp_path / f"{rank}.pt", weights_only=True) for rank in range(WORLD)]
    assert [record["forwards"] for record in done] == [3, 1]

"""Where an editor's model is under Lightning: whole, sharded over processes, or spread by a device map.

- whole, on the module's device (one process, or ``ddp``: a copy per process);
- sharded over the processes of one machine by ``ModelParallelStrategy`` (:meth:`ModelPlacement.configure`, FSDP2):
  the processes see the same batches and make every edit together, each scores its share of a batch's cases
  (:meth:`ModelPlacement.scored_here`), its forwards kept in step with the others' (:meth:`ModelPlacement.lockstep`);
- spread over the devices of one process by ``lm.device_map``: Lightning does not move it (the editor's ``_apply``).

An editor runs on a split model (sharded or spread) when it sets ``edits_split_models``; others refuse in one line
(docs/sharding.md).
"""

from __future__ import annotations

from lightning import Trainer
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from lightning_edit.cases import EditCase
from lightning_edit.errors import ConfigError
from lightning_edit.models.placement import is_dispatched, is_offloaded
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.sharding import Lockstep, is_sharded, shard_model


class ModelPlacement:
    """The placement of one editor's ``model``, owned by the editor (``editor.placement``).

    Args:
        model: the editor's language model.
        editor: the editor's class name, for messages.
        edits_split_models: whether the editor edits a sharded or spread model.
    """

    def __init__(self, model: nn.Module, editor: str, edits_split_models: bool):
        self.model = model
        self.editor = editor
        self.edits_split_models = edits_split_models
        self.mesh: DeviceMesh | None = None  # the strategy's (data_parallel, tensor_parallel) mesh when sharded

    def configure(self, trainer: Trainer | None, mesh: DeviceMesh | None) -> None:
        """Under ``ModelParallelStrategy`` (``mesh`` set), shard the model over the processes of its
        ``tensor_parallel`` dimension (one machine's, by default): an editor that cannot edit a sharded model says so
        first. A model spread by ``lm.device_map`` runs in one process, and ``fit`` does not export offloaded
        weights. Called from the editor's ``configure_model`` (``trainer``: None before the editor is attached)."""
        self.mesh = mesh
        if is_dispatched(self.model):
            return self._check_device_map(trainer)
        if mesh is None or is_sharded(self.model):
            return
        if not self.edits_split_models:
            raise ConfigError(
                f"{self.editor} does not edit a sharded model (trainer.strategy ModelParallelStrategy): run it "
                "on one process or with strategy ddp (the editors that run sharded: docs/sharding.md)"
            )
        if trainer is not None and trainer.state.fn == "fit":
            raise ConfigError(
                "fit exports the whole edited model, which a sharded run does not gather: run fit on one process or "
                "with strategy ddp (validate and test run sharded)"
            )
        arch = resolve_architecture(self.model)
        blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
        shard_model(self.model, blocks, mesh["tensor_parallel"])

    def _check_device_map(self, trainer: Trainer | None) -> None:
        world_size = trainer.world_size if trainer is not None else 1
        if world_size > 1 or self.mesh is not None:
            runs = "a sharding strategy" if self.mesh is not None else f"{world_size} processes"
            raise ConfigError(
                f"lm.device_map spreads one model over the devices of one process, not {runs}: run with "
                "--trainer.devices 1 and no sharding strategy (docs/sharding.md#device-map)"
            )
        fit = trainer is not None and trainer.state.fn == "fit"
        if fit and any(is_offloaded(param) for param in self.model.parameters()):
            raise ConfigError(
                "fit exports the whole edited model, which a device map with offloaded (disk) weights does not hold: "
                "run fit with the model on devices only, or run validate"
            )

    @property
    def shard_mesh(self) -> DeviceMesh | None:
        """The processes that share this model's shards (None when it is not sharded)."""
        return self.mesh["tensor_parallel"] if self.mesh is not None else None

    @property
    def replica_mesh(self) -> DeviceMesh | None:
        """The processes that hold the same shard on different machines (None when the model is not sharded)."""
        return self.mesh["data_parallel"] if self.mesh is not None else None

    def lockstep(self) -> Lockstep:
        """The block's forwards kept in step with the other processes' of a sharded model (inert otherwise)."""
        return Lockstep(self.model, self.shard_mesh)

    def scored_here(self, cases: list[EditCase]) -> list[EditCase]:
        """The cases this process scores: all of them, or, on a sharded model, every n-th of the n processes that
        share it (each edits them all)."""
        mesh = self.shard_mesh
        if mesh is None or mesh.size() == 1:
            return cases
        return cases[mesh.get_local_rank() :: mesh.size()]

"""Where an editor's model is under Lightning (a part of :class:`~lightning_edit.editors.base.EditorModule`,
docs/sharding.md):

- whole, on the module's device (one process, or ``ddp``: a copy per process);
- sharded over the processes of one machine by ``ModelParallelStrategy`` (:meth:`ModelPlacement.configure_model`,
  FSDP2): the processes see the same batches and make every edit together, each scores its share of a batch's cases
  (:meth:`ModelPlacement.scored_here`), its forwards kept in step with the others' (:meth:`ModelPlacement.lockstep`);
- spread over the devices of one process by ``lm.device_map``: Lightning does not move it.

An editor runs on a split model (sharded or spread) when it sets ``edits_split_models``; others refuse in one line.
"""

from __future__ import annotations

from lightning import LightningModule

from lightning_edit.cases import EditCase
from lightning_edit.errors import ConfigError
from lightning_edit.models.placement import is_dispatched, is_offloaded
from lightning_edit.models.registry import resolve_architecture
from lightning_edit.models.sharding import Lockstep, is_sharded, shard_model


class ModelPlacement(LightningModule):
    """The placement part of :class:`~lightning_edit.editors.base.EditorModule` (the editor sets ``model`` and
    ``edits_split_models``)."""

    def configure_model(self) -> None:
        """Under ``ModelParallelStrategy``, shard the model over the processes of its ``tensor_parallel`` mesh
        dimension (one machine's, by default): an editor that cannot edit a sharded model says so first. A model
        spread by ``lm.device_map`` runs in one process, and ``fit`` does not export offloaded weights."""
        if is_dispatched(self.model):
            return self._check_device_map()
        if self._device_mesh is None or is_sharded(self.model):
            return
        if not self.edits_split_models:
            raise ConfigError(
                f"{type(self).__name__} does not edit a sharded model (trainer.strategy ModelParallelStrategy): run it "
                "on one process or with strategy ddp (the editors that run sharded: docs/sharding.md)"
            )
        if self.trainer.state.fn == "fit":
            raise ConfigError(
                "fit exports the whole edited model, which a sharded run does not gather: run fit on one process or "
                "with strategy ddp (validate and test run sharded)"
            )
        arch = resolve_architecture(self.model)
        blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
        shard_model(self.model, blocks, self._device_mesh["tensor_parallel"])

    def _check_device_map(self) -> None:
        if self.trainer.world_size > 1 or self._device_mesh is not None:
            runs = "a sharding strategy" if self._device_mesh is not None else f"{self.trainer.world_size} processes"
            raise ConfigError(
                f"lm.device_map spreads one model over the devices of one process, not {runs}: run with "
                "--trainer.devices 1 and no sharding strategy (docs/sharding.md#device-map)"
            )
        if self.trainer.state.fn == "fit" and any(is_offloaded(param) for param in self.model.parameters()):
            raise ConfigError(
                "fit exports the whole edited model, which a device map with offloaded (disk) weights does not hold: "
                "run fit with the model on devices only, or run validate"
            )

    def _apply(self, fn, recurse: bool = True):
        """Lightning moves the module to its root device; a model spread by a device map stays where it is."""
        modules = self._modules
        if not is_dispatched(modules.get("model")):
            return super()._apply(fn, recurse)
        self._modules = {name: module for name, module in modules.items() if name != "model"}
        try:
            return super()._apply(fn, recurse)
        finally:
            self._modules = modules

    @property
    def shard_mesh(self):
        """The processes that share this model's shards (None when it is not sharded)."""
        return self._device_mesh["tensor_parallel"] if self._device_mesh is not None else None

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

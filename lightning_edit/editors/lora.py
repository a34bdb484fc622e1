"""LoRA (Hu et al., 2022) as an editor, through peft (docs/editors/lora.md#lora).

For the requests of an editor call, a LoRA adapter W + (α/r)·B A (peft's ``LoraConfig``, B = 0 at creation, so a
new adapter changes nothing) is put on the modules playing ``target_modules`` in ``layers`` and trained
with Adam on the teacher-forced target tokens (``target_new``, :mod:`lightning_edit.editors.objectives`), the base
weights frozen. The adapter is injected into the model in place (``get_peft_model``), so the model the editor
scores is the adapted one; the undo removes what the edits added (``delete_adapter``, and ``unload`` once no adapter
is left), leaving the original modules, bit-identical, in place. Under ``sequential`` either one adapter
accumulates every edit or each editor call adds its own (``sequential_adapters``). ``fit`` exports the merged
weights (``merge_and_unload``) or the adapter alone (``save_pretrained``), which ``adapter_path`` loads back.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.editors.base import EditorModule, require
from lightning_edit.editors.objectives import check_training, fine_tune
from lightning_edit.errors import ConfigError, refused_weights
from lightning_edit.models.loading import ModelLoadError, ModelNotFoundError, ModelSource
from lightning_edit.models.registry import ModuleRole, resolve_architecture
from lightning_edit.models.saving import save_edited_model, write_edits_record
from lightning_edit.models.snapshot import WeightSnapshot

if TYPE_CHECKING:  # peft is imported where an adapter is made (a run without LoRA does not pay for its import)
    from peft import LoraConfig, PeftModel


class LoraUndo:
    """Removes the adapters added after it was made; the model is then the one it was made on, bit-identically."""

    names: list[str] = []  # no existing parameter changes

    def __init__(self, editor: LoRA):
        self.editor = editor
        self.kept = editor.adapter_names()

    def restore(self) -> None:
        self.editor.remove_adapters(keep=self.kept)


class LoRA(EditorModule):
    """Low-rank adapters trained on the edit requests (peft).

    Args:
        lm: the causal language model to edit.
        layers: the layers whose projections are adapted (a model preset may set them); None: every layer
            (EasyEdit's default).
        target_modules: the roles of the adapted projections in each layer (models/registry.py); EasyEdit:
            ``q_proj``, ``v_proj`` (GPT-2's fused ``c_attn`` plays both).
        rank: r, the rank of B A (EasyEdit: 8).
        alpha: α; the adapter adds (α/r)·B A (EasyEdit: 32).
        num_steps: epochs over the requests (EasyEdit: 70).
        lr: Adam learning rate (EasyEdit: 5e-3).
        weight_decay: Adam weight decay (EasyEdit: 0).
        step_batch_size: requests per optimiser step (EasyEdit: 1).
        early_stop_loss: skip a step whose loss is below this, stop once an epoch's mean loss is; 0 runs every step.
        sequential_adapters: ``one`` adapter trained further by every editor call, or one adapter ``per_edit`` call
            (the earlier ones frozen and kept active).
        export: what ``fit`` saves: ``merged`` weights (a plain model) or the ``adapter`` (peft's format, with the
            tokenizer and ``edits.json``; load it with ``adapter_path``).
        adapter_path: score the model with this exported adapter applied, as it is: no edit is made (the adapter
            holds the edits of the ``fit`` that wrote it).
        init_seed: seeds A's initialisation of each new adapter (every process then makes the same adapter).
        **kwargs: protocol, edit_batch_size, eval_at, scoring, output_dir, in_context (see EditorModule).
    """

    def __init__(
        self,
        lm: ModelSource,
        layers: list[int] | None = None,
        target_modules: list[ModuleRole] | None = None,
        rank: int = 8,
        alpha: float = 32.0,
        num_steps: int = 70,
        lr: float = 5e-3,
        weight_decay: float = 0.0,
        step_batch_size: int = 1,
        early_stop_loss: float = 0.0,
        sequential_adapters: Literal["one", "per_edit"] = "one",
        export: Literal["merged", "adapter"] = "merged",
        adapter_path: str | None = None,
        init_seed: int = 0,
        **kwargs,
    ):
        require(rank >= 1, "rank", rank, "the adapter's rank, at least 1")
        require(alpha > 0, "alpha", alpha, "the adapter's scale, > 0")
        check_training(num_steps, lr, weight_decay, step_batch_size, early_stop_loss)
        super().__init__(lm, **kwargs)
        self.arch = resolve_architecture(self.model)
        self.target_modules = list(target_modules or ["attn_q", "attn_v"])
        self.rank = rank
        self.alpha = alpha
        self.num_steps = num_steps
        self.lr = lr
        self.weight_decay = weight_decay
        self.step_batch_size = step_batch_size
        self.early_stop_loss = early_stop_loss
        self.sequential_adapters = sequential_adapters
        self.export_format = export
        self.init_seed = init_seed
        layers = range(self.arch.num_layers) if layers is None else layers
        names = [
            self.arch.layer_name(template, layer)
            for layer in layers
            for role in self.target_modules
            for template in self.arch.role_templates(role)
        ]
        self.module_names = list(dict.fromkeys(names))  # GPT-2's c_attn plays q and v: adapted once
        # peft's fan_in_fan_out: the weights are stored as Wᵀ (GPT-2's Conv1D)
        self.conv1d = any(self.arch.weight_layout(self.model.get_submodule(n)) == "conv1d" for n in self.module_names)
        self._peft: PeftModel | None = None
        self._created = 0  # adapters made so far (names and seeds)
        self.edits_weights = adapter_path is None
        if adapter_path is not None:
            self.load_adapter(adapter_path)

    def lora_config(self) -> LoraConfig:
        from peft import LoraConfig

        return LoraConfig(
            r=self.rank, lora_alpha=self.alpha, lora_dropout=0.0, target_modules=self.module_names,
            fan_in_fan_out=self.conv1d,
        )  # fmt: skip

    def adapter_names(self) -> list[str]:
        """The adapters in the model, in the order they were added."""
        return [] if self._peft is None else list(self._peft.peft_config)

    def add_adapter(self) -> str:
        """A new adapter (B = 0: the model's outputs do not change), active with the earlier ones and trainable."""
        from peft import get_peft_model

        name = f"edit_{self._created}"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.init_seed + self._created)
            if self._peft is None:
                self._peft = get_peft_model(self.model, self.lora_config(), adapter_name=name)
            else:
                self._peft.add_adapter(name, self.lora_config())
        self._created += 1
        names = self.adapter_names()
        self._peft.base_model.set_adapter(names)  # every adapter adds its B A
        self._peft.base_model.set_requires_grad(names[:-1], requires_grad=False)
        return name

    def remove_adapters(self, keep: list[str]) -> None:
        """Delete every adapter not in ``keep``; with none left, unload peft (the original modules are back)."""
        if self._peft is None:
            return
        if not keep:
            self._peft.unload()
            self._peft = None
            return
        for name in self.adapter_names():
            if name not in keep:
                self._peft.delete_adapter(name)
        self._peft.base_model.set_adapter(keep)
        self._peft.base_model.set_requires_grad(keep, requires_grad=False)

    def load_adapter(self, path: str) -> None:
        """Apply the adapters ``fit`` exported to ``path`` (a subdirectory per adapter, as peft saves them), frozen; a
        pickled ``adapter_model.bin`` that holds more than tensors is refused (:class:`ModelLoadError`)."""
        from peft import PeftModel
        from peft.utils import WEIGHTS_NAME

        folder = Path(path)
        directories = [d for d in folder.iterdir() if (d / "adapter_config.json").is_file()] if folder.is_dir() else []
        if not directories:
            raise ModelNotFoundError(
                f"model.adapter_path={path}: no adapter (<name>/adapter_config.json) in it: give the folder that "
                "lightning-edit fit exported (its edit_<n> folders)"
            )
        for directory in sorted(directories, key=lambda d: int(d.name.rpartition("_")[2])):  # edit_0, edit_1, ...
            try:
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self.model, directory, adapter_name=directory.name)
                else:
                    self._peft.load_adapter(directory, adapter_name=directory.name)
            except pickle.UnpicklingError as error:  # peft reads an adapter_model.bin with weights_only=True
                raise ModelLoadError(refused_weights(directory / WEIGHTS_NAME, error)) from error
        names = self.adapter_names()
        self._peft.base_model.set_adapter(names)
        self._peft.base_model.set_requires_grad(names, requires_grad=False)
        self._created = len(names)

    def edited_parameters(self, requests: list[EditRequest]) -> list[str]:
        return []  # the base weights never change

    def stream_state(self) -> dict[str, Any]:
        """The adapters, in the order they were added, and their weights."""
        names = self.adapter_names()
        weights = {name: p for name, p in self.model.named_parameters() if any(f".{a}." in name for a in names)}
        return {"adapters": names, **{f"weight.{name}": value for name, value in weights.items()}}

    @torch.no_grad()
    def load_stream_state(self, state: dict[str, Any]) -> None:
        for _ in state["adapters"]:
            self.add_adapter()
        if self.adapter_names() != state["adapters"]:
            raise ConfigError(f"LoRA's adapters {self.adapter_names()} are not the checkpoint's {state['adapters']}")
        for key, value in state.items():
            if key.startswith("weight."):
                self.model.get_parameter(key.removeprefix("weight.")).copy_(value)

    def prepare_undo(self, requests: list[EditRequest]) -> LoraUndo:
        return LoraUndo(self)

    def apply_edits(self, requests: list[EditRequest]) -> None:
        """Train an adapter on the requests: the existing one (``one``) or a new one (``per_edit``)."""
        if not self.edits_weights:
            return  # adapter_path: the loaded adapter is what is scored
        if self._peft is None or self.sequential_adapters == "per_edit":
            name = self.add_adapter()
        else:
            name = self.adapter_names()[-1]
        parameters = [p for n, p in self.model.named_parameters() if f".{name}." in n and p.requires_grad]
        fine_tune(
            self.model, self.tokenizer, requests, parameters, "target_new", self.num_steps, self.lr,
            self.weight_decay, self.step_batch_size, self.early_stop_loss,
        )  # fmt: skip

    def export(self, directory: Path, cases: list[EditCase]) -> Path:
        """``merged``: the weights with every adapter merged in (the adapters are unloaded and the base weights
        restored afterwards, so the model is the unedited one again); ``adapter``: peft's ``save_pretrained``."""
        directory = Path(directory)
        if self.export_format == "adapter":
            self._peft.save_pretrained(directory)  # one subdirectory per adapter: edit_0, edit_1, ...
            self.tokenizer.save_pretrained(directory)
            write_edits_record(directory, cases, type(self).__name__, self.hparams)
            return directory
        snapshot = WeightSnapshot(self.model, [f"{name}.base_layer.weight" for name in self.module_names])
        self._peft.merge_and_unload()  # in place: self.model holds W + (α/r)·Σ B A, the LoRA layers removed
        self._peft = None
        try:
            return save_edited_model(self.model, self.tokenizer, directory, cases, type(self).__name__, self.hparams)
        finally:
            snapshot.restore()  # the same parameter objects, now in the original modules again

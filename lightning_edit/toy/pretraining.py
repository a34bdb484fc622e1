"""Causal-LM pretraining of a small GPT-2- or LLaMA-style model (transformers classes built from a config).

    lightning-edit fit --config configs/toy/gpt2.yaml
    lightning-edit fit --config configs/toy/gpt2.yaml --ckpt_path runs/toy-gpt2/checkpoints/last.ckpt  # resume

The model is sized to the DataModule's tokenizer, so it is built in :meth:`CausalLMPretraining.configure_model`
from ``trainer.datamodule.tokenizer`` (any DataModule with a ``tokenizer`` attribute, e.g.
:class:`~lightning_edit.toy.corpus.ToyCorpus`) rather than linked at parse time: the CLI also runs editors,
whose configs have no such argument. Lightning calls ``configure_model`` before it restores a checkpoint, so
``--ckpt_path`` resumes weights, optimizer, schedule and step count; checkpoints also carry the model config and the
tokenizer, so ``CausalLMPretraining.load_from_checkpoint(path)`` works without the DataModule.

At the end of fit, rank zero writes ``output_dir``: the model (``save_pretrained``, safetensors), the tokenizer
(``AutoTokenizer`` loads both from the directory) and ``recall.json``, the forward and inverse recall of every fact
of the toy world (:mod:`lightning_edit.toy.recall`) when the DataModule has one, or what the DataModule's own
``recall(model, tokenizer, batch_size)`` measures (:class:`~lightning_edit.toy.rule_corpus.RuleCorpus`).
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any, Literal

import lightning
import torch
import transformers
from lightning import LightningModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PretrainedConfig, PreTrainedTokenizerFast

from lightning_edit.models.loading import DTYPES
from lightning_edit.toy.recall import sample_facts, toy_recall

Family = Literal["gpt2", "llama"]


class CausalLMPretraining(LightningModule):
    """Next-token pretraining of a small GPT-2- or LLaMA-style causal LM; saves it with ``save_pretrained``.

    AdamW (weight decay on matrices only) with a linear warmup and a cosine decay to ``min_lr_ratio * lr`` over
    the run's optimizer steps.

    Args:
        family: ``gpt2`` (learned positions, LayerNorm, GELU MLP, tied embeddings) or ``llama`` (RoPE, RMSNorm,
            SwiGLU, grouped-query attention).
        hidden_size: model width.
        num_layers: transformer blocks.
        num_heads: attention heads.
        num_key_value_heads: LLaMA key/value heads (grouped-query attention); None uses ``num_heads``.
        intermediate_size: MLP width; None uses ``4 * hidden_size`` (GPT-2) or ``3 * hidden_size`` (LLaMA).
        max_positions: longest sequence the model accepts (position table / RoPE range); longer than the
            training sentences so that benchmark prompts fit.
        dropout: dropout of GPT-2 (residual, embedding, attention) or LLaMA (attention); 0 suits memorisation.
        tie_word_embeddings: share input and output embeddings (LLaMA only; GPT-2 always ties them).
        lr: peak learning rate.
        warmup_steps: linear warmup steps.
        min_lr_ratio: the learning rate decays (cosine) to this fraction of ``lr`` at the last step.
        weight_decay: AdamW weight decay on weight matrices and embeddings (not on biases and norms).
        betas: AdamW betas.
        output_dir: where rank zero writes the model, tokenizer and ``recall.json`` at the end of fit; None writes
            nothing.
        save_dtype: dtype of the saved weights (training is float32); recall.json is measured in this dtype.
        val_recall_facts: facts whose forward recall is logged (``val/forward_recall``) at each validation, when the
            DataModule has a toy ``world``; 0 turns it off.
        recall_batch_size: prompts per forward pass when measuring recall.
        cpu_threads: torch CPU threads during fit (restored after). Models this small train fastest on one
            thread, and several threads slow down many times over when other processes share the cores; None keeps
            torch's setting.
    """

    def __init__(
        self,
        family: Family = "gpt2",
        hidden_size: int = 128,
        num_layers: int = 4,
        num_heads: int = 4,
        num_key_value_heads: int | None = None,
        intermediate_size: int | None = None,
        max_positions: int = 256,
        dropout: float = 0.0,
        tie_word_embeddings: bool = False,
        lr: float = 2e-3,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        weight_decay: float = 0.1,
        betas: tuple[float, float] = (0.9, 0.98),
        output_dir: str | None = None,
        save_dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        val_recall_facts: int = 100,
        recall_batch_size: int = 64,
        cpu_threads: int | None = 1,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.model: transformers.PreTrainedModel | None = None
        self.tokenizer: PreTrainedTokenizerFast | None = None
        self._fit_started = 0.0
        self._threads_before: int | None = None

    # Model --------------------------------------------------------------------------------------------------------

    def model_config(self, tokenizer: PreTrainedTokenizerFast) -> PretrainedConfig:
        """The transformers config of the model, sized to ``tokenizer``."""
        h = self.hparams
        ids = dict(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        )
        if h.family == "gpt2":
            return GPT2Config(
                vocab_size=len(tokenizer),
                n_positions=h.max_positions,
                n_embd=h.hidden_size,
                n_layer=h.num_layers,
                n_head=h.num_heads,
                n_inner=h.intermediate_size,
                resid_pdrop=h.dropout,
                embd_pdrop=h.dropout,
                attn_pdrop=h.dropout,
                **ids,
            )
        return LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=h.hidden_size,
            intermediate_size=h.intermediate_size or 3 * h.hidden_size,
            num_hidden_layers=h.num_layers,
            num_attention_heads=h.num_heads,
            num_key_value_heads=h.num_key_value_heads or h.num_heads,
            max_position_embeddings=h.max_positions,
            attention_dropout=h.dropout,
            tie_word_embeddings=h.tie_word_embeddings,
            **ids,
        )

    def configure_model(self) -> None:
        """Build the model from the DataModule's tokenizer (once; Lightning restores checkpoints after this)."""
        if self.model is not None or self._trainer is None:  # no trainer: load_from_checkpoint builds it
            return
        datamodule = self.trainer.datamodule
        tokenizer = getattr(datamodule, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                "CausalLMPretraining builds its model from the DataModule's tokenizer: use a DataModule with a "
                f"`tokenizer` attribute, such as ToyCorpus (got {type(datamodule).__name__})"
            )
        style = getattr(datamodule, "tokenizer_style", self.hparams.family)
        if style != self.hparams.family:
            rank_zero_warn(f"a {self.hparams.family} model with a {style}-style tokenizer (data.tokenizer_style)")
        self._build(self.model_config(tokenizer), tokenizer)

    def _build(self, config: PretrainedConfig, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer
        self.model = AutoModelForCausalLM.from_config(config)

    # Training -----------------------------------------------------------------------------------------------------

    def forward(self, **batch: torch.Tensor) -> Any:
        return self.model(**batch)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        self.log("train/lr", self.lr_schedulers().get_last_lr()[0])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss = self.model(**batch).loss
        self.log("val/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])

    def on_validation_epoch_end(self) -> None:
        world = getattr(self.trainer.datamodule, "world", None)
        if self.trainer.sanity_checking or world is None or self.hparams.val_recall_facts <= 0:
            return
        facts = sample_facts(world, self.hparams.val_recall_facts)
        recall = toy_recall(self.model, self.tokenizer, world, facts, self.hparams.recall_batch_size)
        self.log("val/forward_recall", recall["forward"]["overall"], prog_bar=True)
        for kind in ("bidirectional", "forward_only"):
            if recall["inverse"][kind] is not None:
                self.log(f"val/inverse_recall_{kind}", recall["inverse"][kind])

    def configure_optimizers(self) -> dict:
        h = self.hparams
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        groups = [{"params": decay, "weight_decay": h.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=h.lr, betas=tuple(h.betas))
        total = max(int(self.trainer.estimated_stepping_batches), 1)
        warmup = min(h.warmup_steps, total)

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min((step - warmup) / max(total - warmup, 1), 1.0)
            return h.min_lr_ratio + (1 - h.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # Checkpoints --------------------------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["hf_config"] = self.model.config.to_dict()
        checkpoint["tokenizer"] = {
            "json": self.tokenizer.backend_tokenizer.to_str(),
            "special_tokens": {k: str(v) for k, v in self.tokenizer.special_tokens_map.items()},
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("tokenizer")
        if self.model is None:  # load_from_checkpoint outside fit: rebuild from what the checkpoint carries
            config = transformers.AutoConfig.for_model(**checkpoint["hf_config"])
            tokenizer = PreTrainedTokenizerFast(
                tokenizer_object=Tokenizer.from_str(saved["json"]), **saved["special_tokens"]
            )
            self._build(config, tokenizer)
        elif saved is not None and saved["json"] != self.tokenizer.backend_tokenizer.to_str():
            raise ValueError(
                "the checkpoint was trained with another tokenizer than the DataModule's: resume with the data "
                "settings of the run that wrote it (world seed and sizes, tokenizer_style, vocab_size)"
            )

    # Saving -------------------------------------------------------------------------------------------------------

    def on_fit_start(self) -> None:
        if self.hparams.cpu_threads is not None:
            self._threads_before = torch.get_num_threads()
            torch.set_num_threads(self.hparams.cpu_threads)
        self._fit_started = time.perf_counter()

    def on_fit_end(self) -> None:
        seconds = time.perf_counter() - self._fit_started
        try:
            if self.hparams.output_dir is not None and self.trainer.is_global_zero:
                self.save(Path(self.hparams.output_dir), seconds)
        finally:
            if self._threads_before is not None:
                torch.set_num_threads(self._threads_before)
                self._threads_before = None

    def save(self, directory: Path, fit_seconds: float = 0.0) -> None:
        """Write the model (in ``save_dtype``), the tokenizer and ``recall.json`` to ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        was_training = self.model.training
        model = self.model.eval()
        dtype = DTYPES[self.hparams.save_dtype]
        if dtype != torch.float32:
            model = copy.deepcopy(model).to(dtype)
        model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        summary: dict[str, Any] = {
            "training": {
                "global_step": self.trainer.global_step,
                "epochs": self.trainer.current_epoch,
                "fit_seconds": round(fit_seconds, 1),
                "parameters": sum(p.numel() for p in model.parameters()),
                "save_dtype": self.hparams.save_dtype,
            },
            "model": dict(self.hparams),
            "data": dict(getattr(self.trainer.datamodule, "hparams", {})),
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "lightning": lightning.__version__,
            },
        }
        datamodule = self.trainer.datamodule
        world = getattr(datamodule, "world", None)
        if world is not None:
            summary["recall"] = toy_recall(model, self.tokenizer, world, batch_size=self.hparams.recall_batch_size)
            forward = summary["recall"]["forward"]
            inverse = summary["recall"]["inverse"]
            rank_zero_info(
                f"recall over {forward['n_facts']} facts: forward {forward['overall']:.3f}, inverse "
                f"bidirectional {inverse['bidirectional']:.3f}, inverse forward-only {inverse['forward_only']:.3f}"
            )
        elif hasattr(datamodule, "recall"):
            summary["recall"] = datamodule.recall(model, self.tokenizer, self.hparams.recall_batch_size)
        self.model.train(was_training)
        (directory / "recall.json").write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
        rank_zero_info(f"model, tokenizer and recall.json written to {directory}")

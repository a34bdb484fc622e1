"""Target vector optimisation of the locate-then-edit family: ROME's v* and MEMIT/AlphaEdit's z.

For each request i a vector δ_i is added to the output hidden state of one module at the fact token of every
prompt of that request: ROME injects at the MLP output of the edited layer l (v* = m⁰ + δ),
MEMIT/AlphaEdit at the block output (residual stream) of the last edited layer L (z = h⁰ + δ).
δ_i minimises, with the model frozen (Adam on δ only; docs/editors/locate-then-edit.md#target-vector-optimisation)::

    L_i(δ) = mean_j [ −(1/T) Σ_t log P_δ(o_t | p_j ⊕ o_<t) ]                 rewriting prompts p_j = templates
             + kl_factor · mean_k KL( P_δ(· | s_k) ‖ P_0(· | s_k) )          KL prompts s_k = "{subject} is a",
                                                                              at the fact token (0 at step 0)
             + v_weight_decay · ‖δ‖₂ / ‖m⁰‖₂²                                 (not squared: kmeng01/rome PR #4)

and after each Adam step δ_i is projected onto the ball ‖δ_i‖ ≤ clamp_norm_factor · ‖m⁰_i‖. A request stops (and
its δ stops changing) as soon as L_i < early_stop_loss; the last iteration only evaluates. Several requests run in
one right-padded batch with one leaf tensor δ_i each and Adam's element-wise state, so a batched run reproduces
one-by-one runs (docs/editors/index.md#invariants); the requests of one call are optimised in chunks whose graph fits a
memory budget (:mod:`~lightning_edit.editors.graph_budget`), which for the same reason changes δ only by float
rounding. m⁰_i is the module output at the fact token of the bare ``"{}"`` prompt, read on the first forward (before δ
is added).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditRequest
from lightning_edit.editors.context_templates import Templates, template_groups
from lightning_edit.editors.graph_budget import (
    automatic_budget,
    bytes_per_token,
    check_budget,
    chunk_requests,
    saved_bytes,
)
from lightning_edit.editors.locate import DEFAULT_FACT_TOKEN, FactToken, encode_fact_prompt, fill
from lightning_edit.errors import require
from lightning_edit.models.hooks import PrefixReuse, Trace
from lightning_edit.models.registry import ModelArchitecture, resolve_architecture
from lightning_edit.models.sharding import is_sharded
from lightning_edit.models.tokenization import encode_prompt_target, pad


@dataclass(frozen=True)
class TargetOptimization:
    """Hyper-parameters of the v*/z optimisation; defaults are ROME's for gpt2-xl (docs/editors/rome.md#rome).

    Attributes:
        v_num_grad_steps: iterations (forward passes); at most ``v_num_grad_steps - 1`` Adam steps are taken
            because the last iteration only evaluates. 20 (ROME/MEMIT gpt2-xl), 25 (LLaMA/Qwen, GPT-J MEMIT).
        v_lr: Adam learning rate on δ. 0.5 (0.1 for LLaMA-3 MEMIT/AlphaEdit).
        v_loss_layer: layer whose residual stream gives the logits of the loss (final norm + unembedding);
            ``None`` = the last layer, i.e. the model's own logits (ROME and every reference config).
        v_weight_decay: factor of ‖δ‖ / ‖m⁰‖² in the loss. 0.5 (1e-3 in the EasyEdit LLaMA/Qwen configs).
        clamp_norm_factor: δ is kept in the ball ‖δ‖ ≤ clamp_norm_factor·‖m⁰‖. 4 (ROME), 0.75 (MEMIT/AlphaEdit).
        kl_factor: weight of the KL ("essence") term. 0.0625.
        kl_prompts: templates of the KL prompts, filled with the subject (MEMIT-CSK: ``"{} is a:"``).
        early_stop_loss: a request stops once its total loss is below this (ROME/MEMIT: 5e-2).
        full_forward: run the whole model at every iteration and take the logits of every position (the reference
            computation, kept for checks and the speed benchmark). By default the blocks below the injection run
            once (:class:`~lightning_edit.models.hooks.PrefixReuse`) and the final norm and unembedding are applied
            only at the target and KL positions; the values agree to float rounding (tests/editors/test_locate.py).
        memory_budget: bytes of autograd graph one chunk of requests may hold (``None``: automatic, the model's weight
            bytes or half the free memory if less; docs/editors/locate-then-edit.md#memory-budget). Not a
            hyper-parameter: it changes δ only by float rounding.

    Where δ is injected is the editor's ``fact_token``, the position its keys are read at (one setting).
    """

    v_num_grad_steps: int = 20
    v_lr: float = 0.5
    v_loss_layer: int | None = None
    v_weight_decay: float = 0.5
    clamp_norm_factor: float = 4.0
    kl_factor: float = 0.0625
    kl_prompts: tuple[str, ...] = ("{} is a",)
    early_stop_loss: float = 5e-2
    full_forward: bool = False
    memory_budget: int | None = None

    def __post_init__(self) -> None:
        require(self.v_num_grad_steps >= 1, "model.target.v_num_grad_steps", self.v_num_grad_steps, "at least 1")
        meaning = "bytes of autograd graph one chunk of requests may hold, at least 1 (unset: automatic)"
        require(
            self.memory_budget is None or self.memory_budget >= 1,
            "model.target.memory_budget",
            self.memory_budget,
            meaning,
        )


@dataclass(frozen=True)
class StepRecord:
    """Per-request loss terms of one iteration, each (n,), measured with the δ of that iteration."""

    nll: Tensor
    kl: Tensor
    weight_decay: Tensor
    loss: Tensor
    delta_norm: Tensor
    active: Tensor  # bool: the request had not stopped before this iteration


@dataclass(frozen=True)
class TargetVectors:
    """Result of :func:`optimize_target_vectors`, one row per request.

    Attributes:
        targets: (n, d) the target vectors m⁰ + δ (ROME's v*, MEMIT's z).
        init: (n, d) m⁰ (``target_init``), the unedited activation at the fact token of the bare prompt.
        deltas: (n, d) δ.
        nll: (n,) mean NLL of target_new over the rewriting prompts with the returned δ.
        loss: (n,) total loss with the returned δ.
        steps: (n,) number of Adam steps taken.
        history: one :class:`StepRecord` per iteration (all requests).
        budget: the memory budget in force, in bytes.
        chunks: the number of requests optimised together in each chunk, in order.
    """

    targets: Tensor
    init: Tensor
    deltas: Tensor
    nll: Tensor
    loss: Tensor
    steps: Tensor
    history: list[StepRecord] = field(default_factory=list, repr=False)
    budget: int = 0
    chunks: tuple[int, ...] = ()


@dataclass
class _Batch:
    """The prompts of all requests in one right-padded batch and where to read/write in it."""

    input_ids: Tensor  # (B, L)
    attention_mask: Tensor  # (B, L)
    position_ids: Tensor  # (B, L)
    fact_rows: Tensor  # (B,) every row gets δ of its request at its fact position
    fact_positions: Tensor  # (B,)
    fact_owners: Tensor  # (B,) request index of each row
    first_rows: Tensor  # (n,) row of each request's bare prompt (m⁰ is read there)
    target_rows: Tensor  # (ΣT,) row / position / token of every target token (teacher forcing)
    target_positions: Tensor  # (ΣT,)
    target_tokens: Tensor  # (ΣT,)
    target_prompt: Tensor  # (ΣT,) rewriting-prompt index of each target token
    prompt_lengths: Tensor  # (P,) target length T_j of each rewriting prompt
    prompt_owners: Tensor  # (P,) request index of each rewriting prompt
    kl_rows: Tensor  # (n·K,) row / position of every KL prompt's fact token, and its request
    kl_positions: Tensor  # (n·K,)
    kl_owners: Tensor  # (n·K,)


def _build_batch(
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[EditRequest],
    templates: list[str],
    config: TargetOptimization,
    fact_token: FactToken,
    device: torch.device,
) -> _Batch:
    sequences: list[list[int]] = []
    fact_positions: list[int] = []
    fact_owners: list[int] = []
    first_rows: list[int] = []
    targets: dict[str, list[int]] = {"rows": [], "positions": [], "tokens": [], "prompt": []}
    prompt_lengths: list[int] = []
    prompt_owners: list[int] = []
    for i, request in enumerate(requests):
        first_rows.append(len(sequences))
        for template in templates:
            filled = fill(template, request)
            text, ids, index = encode_fact_prompt(tokenizer, filled, request.subject, fact_token)
            prompt_ids, target_ids = encode_prompt_target(tokenizer, text, request.target_new)
            if prompt_ids != ids:
                raise RuntimeError(f"inconsistent prompt tokenization of {text!r}")
            row = len(sequences)
            prompt = len(prompt_lengths)
            sequences.append(prompt_ids + target_ids[:-1])  # the last target token is never an input
            fact_positions.append(index)
            fact_owners.append(i)
            first = len(prompt_ids) - 1  # the position that predicts the first target token
            targets["rows"] += [row] * len(target_ids)
            targets["positions"] += range(first, first + len(target_ids))
            targets["tokens"] += target_ids
            targets["prompt"] += [prompt] * len(target_ids)
            prompt_lengths.append(len(target_ids))
            prompt_owners.append(i)
    kl_rows: list[int] = []
    kl_owners: list[int] = []
    for i, request in enumerate(requests):
        for template in config.kl_prompts:
            _, ids, index = encode_fact_prompt(tokenizer, template, request.subject, fact_token)
            kl_rows.append(len(sequences))
            kl_owners.append(i)
            sequences.append(ids)
            fact_positions.append(index)
            fact_owners.append(i)
    input_ids, attention_mask, position_ids = pad(sequences, tokenizer.pad_token_id, "right")
    kl_positions = [fact_positions[row] for row in kl_rows]

    def t(values: Sequence[int]) -> Tensor:
        return torch.tensor(list(values), dtype=torch.long, device=device)

    return _Batch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        fact_rows=t(range(len(sequences))),
        fact_positions=t(fact_positions),
        fact_owners=t(fact_owners),
        first_rows=t(first_rows),
        target_rows=t(targets["rows"]),
        target_positions=t(targets["positions"]),
        target_tokens=t(targets["tokens"]),
        target_prompt=t(targets["prompt"]),
        prompt_lengths=t(prompt_lengths),
        prompt_owners=t(prompt_owners),
        kl_rows=t(kl_rows),
        kl_positions=t(kl_positions),
        kl_owners=t(kl_owners),
    )


def _mean_by(values: Tensor, owners: Tensor, n: int) -> Tensor:
    """(n,): mean of ``values`` (m,) over the entries of each owner."""
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, owners, values)
    counts = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, owners, torch.ones_like(values))
    return sums / counts


def optimize_target_vectors(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[EditRequest],
    layer: int,
    module: str,
    templates: Templates,
    config: TargetOptimization | None = None,
    fact_token: FactToken = DEFAULT_FACT_TOKEN,
) -> TargetVectors:
    """Optimise one δ per request at the output of ``module`` (registry template) at ``layer``.

    Args:
        module: ``spec.mlp_out`` (ROME, v* at the edited layer) or ``spec.blocks`` (MEMIT/AlphaEdit, z at the last
            edited layer); the output hidden state at the fact token gets δ.
        templates: context templates; groups are flattened (every rewriting prompt counts once, as in the
            reference code). The first template must be the bare ``"{}"``: m⁰ is read there.
        config: hyper-parameters (ROME's defaults if None).
        fact_token: where δ is injected and the KL distribution read (``fact_token_index``); the editor passes the
            position its keys are read at.

    The model's parameters are frozen during the run (their ``requires_grad`` flags, training mode and values
    are restored/unchanged afterwards) and every hook is removed.
    """
    config = config or TargetOptimization()
    if not requests:
        raise ValueError("no requests")
    flat = [t for group in template_groups(templates) for t in group]
    if flat[0] != "{}":
        raise ValueError(f"the first context template must be the bare '{{}}' (m⁰ is read there), got {flat[0]!r}")
    arch = resolve_architecture(model)
    loss_layer = arch.num_layers - 1 if config.v_loss_layer is None else config.v_loss_layer
    meaning = f"the layer whose logits the loss reads, from the edited layer {layer} to the last, {arch.num_layers - 1}"
    require(layer <= loss_layer < arch.num_layers, "model.target.v_loss_layer", loss_layer, meaning)
    if is_sharded(model):  # a sharded forward runs whole on every process (docs/sharding.md): the reference path
        meaning = "logits of an inner layer, which a sharded model does not run apart: leave it unset (or use ddp)"
        require(loss_layer == arch.num_layers - 1, "model.target.v_loss_layer", loss_layer, meaning)
        config = replace(config, full_forward=True)
    flags = [p.requires_grad for p in model.parameters()]
    training = model.training
    model.requires_grad_(False)
    model.eval()
    optimize = partial(
        _optimize, model, tokenizer, arch, layer=layer, module=module, templates=flat, loss_layer=loss_layer,
        fact_token=fact_token,
    )  # fmt: skip
    try:
        with torch.enable_grad():
            return _in_chunks(optimize, model, tokenizer, requests, flat, config, fact_token)
    finally:
        for parameter, flag in zip(model.parameters(), flags):
            parameter.requires_grad_(flag)
        model.train(training)


def _shape(
    tokenizer: PreTrainedTokenizerBase,
    request: EditRequest,
    templates: list[str],
    config: TargetOptimization,
    fact_token: FactToken,
) -> tuple[int, int]:
    """(rows, longest row) of one request's prompts."""
    batch = _build_batch(tokenizer, [request], templates, config, fact_token, torch.device("cpu"))
    rows, length = batch.input_ids.shape
    return rows, length


def _in_chunks(
    optimize: Callable[..., TargetVectors],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    requests: Sequence[EditRequest],
    templates: list[str],
    config: TargetOptimization,
    fact_token: FactToken,
) -> TargetVectors:
    """``optimize(requests, config)`` over consecutive chunks of the requests whose graph fits the memory budget; one
    request's graph is measured by a probe (one forward and the loss, no step) when there is more than one."""
    budget = automatic_budget(model) if config.memory_budget is None else config.memory_budget
    if len(requests) == 1 and config.memory_budget is None:
        return replace(optimize(requests, config=config), budget=budget, chunks=(1,))
    shapes = [_shape(tokenizer, request, templates, config, fact_token) for request in requests]
    with saved_bytes(model) as size:
        optimize(requests[:1], config=replace(config, v_num_grad_steps=1))
    per_token = bytes_per_token(size[0], *shapes[0])
    if config.memory_budget is not None:
        largest = max(per_token * rows * length for rows, length in shapes)
        check_budget(budget, int(largest), "model.target.memory_budget")
    chunks = chunk_requests(shapes, per_token, budget)
    return _join([optimize([requests[i] for i in chunk], config=config) for chunk in chunks], budget)


def _join(parts: list[TargetVectors], budget: int) -> TargetVectors:
    """The chunks' results as one (each request's δ and records are its own). A chunk whose requests all stopped
    early repeats its last record, inactive, as a stopped request's record reads in a longer loop."""
    history = []
    for step in range(max(len(part.history) for part in parts)):
        records = [
            part.history[step]
            if step < len(part.history)
            else replace(part.history[-1], active=torch.zeros_like(part.history[-1].active))
            for part in parts
        ]
        columns = {f.name: torch.cat([getattr(record, f.name) for record in records]) for f in fields(StepRecord)}
        history.append(StepRecord(**columns))

    def joined(name: str) -> Tensor:
        return torch.cat([getattr(part, name) for part in parts])

    return TargetVectors(
        targets=joined("targets"),
        init=joined("init"),
        deltas=joined("deltas"),
        nll=joined("nll"),
        loss=joined("loss"),
        steps=joined("steps"),
        history=history,
        budget=budget,
        chunks=tuple(len(part.steps) for part in parts),
    )


def _optimize(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    arch: ModelArchitecture,
    requests: Sequence[EditRequest],
    layer: int,
    module: str,
    templates: list[str],
    loss_layer: int,
    config: TargetOptimization,
    fact_token: FactToken,
) -> TargetVectors:
    n = len(requests)
    d = arch.hidden_size
    device = model.device
    # δ and losses in at least fp32 (docs/editors/locate-then-edit.md#numerics)
    dtype = torch.promote_types(model.dtype, torch.float32)
    batch = _build_batch(tokenizer, requests, templates, config, fact_token, device)
    inject_name = arch.layer_name(module, layer)
    use_model_logits = loss_layer == arch.num_layers - 1
    loss_name = arch.layer_name(arch.spec.blocks, loss_layer)

    deltas = [torch.zeros(d, dtype=dtype, device=device, requires_grad=True) for _ in range(n)]  # n × (d,)
    optimizer = torch.optim.Adam(deltas, lr=config.v_lr)  # element-wise state: batching does not couple requests
    init: Tensor | None = None  # (n, d) m⁰
    init_kl_logprobs: Tensor | None = None  # (n·K, V)

    running_rows = torch.arange(len(batch.input_ids), device=device)  # the batch rows of the current forward

    def inject(name: str, hidden: Tensor) -> Tensor:  # hidden (B', L, d), the running rows
        nonlocal init
        if name != inject_name:
            return hidden
        if init is None:  # the first forward runs every row
            init = hidden[batch.first_rows, batch.fact_positions[batch.first_rows]].detach().to(dtype)  # (n, d)
        values = torch.stack(deltas)[batch.fact_owners[running_rows]].to(hidden.dtype)  # (B', d)
        where = (torch.arange(len(running_rows), device=device), batch.fact_positions[running_rows])
        return hidden.index_put(where, values, accumulate=True)

    blocks = [arch.module(arch.spec.blocks, i) for i in range(arch.num_layers)]
    prefix = PrefixReuse(blocks, layer)  # δ enters at block ``layer`` or above: the blocks below run once

    def logits_at(rows: Tensor, positions: Tensor) -> Tensor:  # (m, V) in fp32+; rows index the running rows
        inputs = dict(
            input_ids=batch.input_ids[running_rows],
            attention_mask=batch.attention_mask[running_rows],
            position_ids=batch.position_ids[running_rows],
            use_cache=False,
        )
        if config.full_forward and use_model_logits:
            with Trace(model, inject_name, outputs=False, edit_output=inject, detach=False):
                output = model(**inputs)
            return output.logits[rows, positions].to(dtype)
        trace = Trace(model, [inject_name, loss_name], edit_output=inject, stop_after=loss_name, detach=False)
        with contextlib.nullcontext() if config.full_forward else prefix.rows(running_rows), trace:
            model(**inputs)
        residual = trace.outputs[loss_name][rows, positions]  # (m, d)
        normed = arch.module(arch.spec.final_norm)(residual)
        return arch.module(arch.spec.unembedding)(normed).to(dtype)

    history: list[StepRecord] = []
    active = torch.ones(n, dtype=torch.bool, device=device)
    steps = torch.zeros(n, dtype=torch.long, device=device)
    final_nll = torch.zeros(n, dtype=dtype, device=device)
    final_loss = torch.zeros(n, dtype=dtype, device=device)
    last_nll = torch.zeros(n, dtype=dtype, device=device)  # of the requests that no longer run: their δ is fixed
    last_kl = torch.zeros(n, dtype=dtype, device=device)
    target_owners = batch.prompt_owners[batch.target_prompt]  # (ΣT,)
    for iteration in range(config.v_num_grad_steps):
        # Only the rows of requests still optimised run (all of them in the reference computation).
        running = torch.ones_like(active) if config.full_forward else active  # (n,)
        running_rows = torch.nonzero(running[batch.fact_owners]).flatten()  # (B',)
        slot = torch.full((len(batch.input_ids),), -1, dtype=torch.long, device=device)
        slot[running_rows] = torch.arange(len(running_rows), device=device)  # batch row -> running row
        targets = torch.nonzero(running[target_owners]).flatten()  # target tokens that run
        kls = torch.nonzero(running[batch.kl_owners]).flatten()  # KL prompts that run
        rows = torch.cat([slot[batch.target_rows[targets]], slot[batch.kl_rows[kls]]])
        positions = torch.cat([batch.target_positions[targets], batch.kl_positions[kls]])
        logprobs = torch.log_softmax(logits_at(rows, positions), dim=-1)  # (ΣT' + K', V)
        assert init is not None
        # NLL: per rewriting prompt sum_t −log p / T_j, then mean over the prompts of each request.
        token_nll = -logprobs[: len(targets)].gather(1, batch.target_tokens[targets, None])[:, 0]  # (ΣT',)
        prompt_nll = torch.zeros(len(batch.prompt_lengths), dtype=dtype, device=device)
        prompt_nll = prompt_nll.index_add(0, batch.target_prompt[targets], token_nll) / batch.prompt_lengths  # (P,)
        nll = torch.where(running, _mean_by(prompt_nll, batch.prompt_owners, n), last_nll)  # (n,)
        # KL(current ‖ initial) of the next-token distribution at the KL prompts' fact token; 0 at step 0.
        kl_logprobs = logprobs[len(targets) :]  # (K', V)
        if init_kl_logprobs is None:  # the first forward runs every KL prompt
            init_kl_logprobs = kl_logprobs.detach().clone()
        kl_each = (kl_logprobs.exp() * (kl_logprobs - init_kl_logprobs[kls])).sum(-1)  # (K',)
        kl_each = torch.zeros(len(batch.kl_owners), dtype=dtype, device=device).index_put((kls,), kl_each)
        kl = torch.where(running, _mean_by(kl_each, batch.kl_owners, n), last_kl)  # (n,)
        last_nll = nll.detach()
        last_kl = kl.detach()
        delta = torch.stack(deltas)  # (n, d)
        weight_decay = config.v_weight_decay * delta.norm(dim=-1) / init.norm(dim=-1) ** 2  # (n,)
        loss = nll + config.kl_factor * kl + weight_decay  # (n,)

        with torch.no_grad():
            history.append(
                StepRecord(
                    nll=nll.detach().cpu(),
                    kl=kl.detach().cpu(),
                    weight_decay=weight_decay.detach().cpu(),
                    loss=loss.detach().cpu(),
                    delta_norm=delta.detach().norm(dim=-1).cpu(),
                    active=active.cpu(),
                )
            )
            final_nll = torch.where(active, nll.detach(), final_nll)
            final_loss = torch.where(active, loss.detach(), final_loss)
            active = active & (loss.detach() >= config.early_stop_loss)
        if not bool(active.any()) or iteration == config.v_num_grad_steps - 1:
            break
        optimizer.zero_grad(set_to_none=True)
        loss[active].sum().backward()  # d loss_i / d δ_j = 0 for i ≠ j: rows of a batch are independent
        for i in torch.nonzero(~active).flatten().tolist():
            deltas[i].grad = None  # Adam skips parameters without a gradient: stopped requests stay put
        optimizer.step()
        with torch.no_grad():
            for i in torch.nonzero(active).flatten().tolist():
                max_norm = config.clamp_norm_factor * init[i].norm()
                norm = deltas[i].norm()
                if norm > max_norm:
                    deltas[i].mul_(max_norm / norm)  # projection onto the ball ‖δ‖ ≤ clamp·‖m⁰‖
        steps += active.long()

    assert init is not None
    delta = torch.stack(deltas).detach()  # (n, d)
    return TargetVectors(
        targets=init + delta,
        init=init,
        deltas=delta,
        nll=final_nll,
        loss=final_loss,
        steps=steps,
        history=history,
    )

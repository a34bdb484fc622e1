"""The batched ``single`` protocol: per-row low-rank updates give what writing each case's update gives."""

import json
from pathlib import Path

import pytest
import torch

from lightning_edit.cases import EditRequest
from lightning_edit.cli import build_cli
from lightning_edit.editors import MEMIT, ROME, AlphaEdit
from lightning_edit.editors.target_vector import TargetOptimization
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.registry import from_linear, resolve_architecture
from lightning_edit.models.row_updates import LowRankUpdate, RowUpdates, routed
from lightning_edit.resources import builtin_texts
from lightning_edit.scoring import score_targets
from lightning_edit.stats.config import KeyStatistics
from tests.models.test_hooks import assert_no_hooks

REQUESTS = [
    EditRequest("The capital of {}", "Brazil", "Paris", "Brasilia"),
    EditRequest("{} speaks", "Danielle Darrieux", "English", "French"),
    EditRequest("The mother tongue of {} is", "Danielle Darrieux", "Dutch", "French"),
]
PROMPTS = ["The capital of Brazil", "Danielle Darrieux speaks", "The capital of France is"]
TARGETS = ["Paris", "English", "Paris"]
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUICK = TargetOptimization(v_num_grad_steps=8, clamp_norm_factor=100.0, v_weight_decay=1e-3, early_stop_loss=0.5)


def test_each_row_sees_its_owners_update(tiny_lm):
    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    names = [arch.layer_name(arch.spec.mlp_out, layer) for layer in (0, 1)]
    d_out, d_in = arch.hidden_size, arch.mlp_hidden_size
    generator = torch.Generator().manual_seed(0)

    def update(rank: int) -> LowRankUpdate:
        U, V = torch.randn(d_out, rank, generator=generator), torch.randn(d_in, rank, generator=generator)
        return LowRankUpdate(U, V)

    # owner 0: rank 1 at layer 0 and rank 2 at layer 1; owner 1: two updates at layer 1; owner 2: none
    updates = [{names[0]: [update(1)], names[1]: [update(2)]}, {names[1]: [update(1), update(1)]}, {}]
    rows = RowUpdates(model, len(updates))
    for owner, per_name in enumerate(updates):
        for name, changes in per_name.items():
            for change in changes:
                rows.add(owner, name, LowRankUpdate(0.05 * change.U, 0.05 * change.V))
    with rows:
        batched = score_targets(model, tokenizer, PROMPTS, TARGETS, owners=[0, 1, 2])
        with pytest.raises(RuntimeError, match="no owners"):
            score_targets(model, tokenizer, PROMPTS, TARGETS)
    assert_no_hooks(model)
    for owner, per_name in enumerate(updates):
        saved = {name: arch.module(name).weight.detach().clone() for name in per_name}
        with torch.no_grad():
            for name, changes in per_name.items():
                module = arch.module(name)
                for change in changes:
                    delta = 0.05 * change.U @ (0.05 * change.V).T
                    module.weight += from_linear(delta, arch.weight_layout(module))
        written = score_targets(model, tokenizer, [PROMPTS[owner]], [TARGETS[owner]])[0]
        with torch.no_grad():
            for name, weight in saved.items():
                arch.module(name).weight.copy_(weight)
        torch.testing.assert_close(batched[owner].logprobs, written.logprobs, atol=1e-5, rtol=0)


def test_rows_need_active_updates(tiny_lm):
    model, _ = tiny_lm
    with pytest.raises(RuntimeError, match="no row updates"), routed(model, [0]):
        pass


@pytest.fixture(scope="module")
def stats(tmp_path_factory) -> KeyStatistics:
    directory = tmp_path_factory.mktemp("stats")
    (directory / "corpus.txt").write_text("\n".join(builtin_texts()))
    return KeyStatistics(corpus=str(directory / "corpus.txt"), n_samples=120, cache_dir=str(directory / "cache"))


@pytest.fixture
def one_thread():
    """Torch on one CPU thread for the test. There a batched v* optimisation is bitwise the one-at-a-time one; on two
    threads matrix products of other shapes round differently, and Adam's first steps (lr × g/|g|) turn rounding of
    near-zero gradient entries into whole steps: on the tiny random GPT-2, one request's δ then differs by more than
    its own size between the two optimisations, before any scoring."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "cls, kwargs, groups",
    [
        (ROME, {}, [[0], [1], [2]]),
        (MEMIT, {}, [[0], [1, 2]]),  # a case of two requests: one batch of its own
        (AlphaEdit, {"nullspace_threshold": 0.5, "l2": 1e-3}, [[0], [1], [2]]),
    ],
    ids=["ROME", "MEMIT", "AlphaEdit"],
)
def test_low_rank_edits_score_as_the_written_edits(tiny_model_dir, stats, cls, kwargs, groups):
    """Per-prompt NLLs of every case on its row updates equal those on its written update, within 1e-5."""
    sites = {"layer": 1} if cls is ROME else {"layers": [0, 1]}
    source = ModelSource(str(tiny_model_dir))
    editor = cls(source, **sites, stats=stats, target=QUICK, template_lengths=[[8, 2]], **kwargs)
    cases = [[REQUESTS[i] for i in group] for group in groups]
    owners = [owner for owner in range(len(cases)) for _ in PROMPTS]
    rows = editor.low_rank_edits(cases)
    with rows:
        n = len(cases)
        batched = score_targets(editor.model, editor.tokenizer, PROMPTS * n, TARGETS * n, owners=owners)
    for owner, requests in enumerate(cases):
        with editor.edits_applied(requests):
            written = score_targets(editor.model, editor.tokenizer, PROMPTS, TARGETS)
        for k, score in enumerate(written):
            assert batched[owner * len(PROMPTS) + k].nll == pytest.approx(score.nll, abs=1e-5)


@pytest.mark.parametrize("method", ["rome", "memit"])
def test_batched_and_one_at_a_time_give_the_same_case_scores(tmp_path, method):
    def case_scores(batched: bool) -> list[dict]:
        directory = tmp_path / str(batched)
        build_cli([
            "validate", f"--config={CONFIGS}/methods/{method}.yaml", f"--config={CONFIGS}/models/toy-gpt2.yaml",
            f"--config={CONFIGS}/benchmarks/counterfact.yaml", "--data.path=builtin:data/toy/counterfact.json",
            "--data.limit=6", "--data.batch_size=3", "--model.protocol=single", "--model.target.v_num_grad_steps=15",
            "--data.generated_answers=bare",  # generation, too, sees each case's own update
            f"--model.batched_single={str(batched).lower()}", f"--trainer.default_root_dir={directory}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        ])  # fmt: skip
        return [json.loads(line)["scores"] for line in (directory / "cases.jsonl").read_text().splitlines()]

    assert case_scores(True) == case_scores(False)


def test_runners_without_routing_run_once_per_owner(tiny_lm):
    """Generation (a runner that knows no owners) runs per owner, each on its own update, as on written weights."""
    from lightning_edit.scoring.kinds import Sample, run_requests

    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    name = arch.layer_name(arch.spec.mlp_out, 1)
    generator = torch.Generator().manual_seed(1)
    change = LowRankUpdate(torch.randn(arch.hidden_size, 1, generator=generator),
                           torch.randn(arch.mlp_hidden_size, 1, generator=generator))  # fmt: skip
    request = Sample("The capital of France is", seed=0, max_length=12, top_k=1)
    rows = RowUpdates(model, 2)
    rows.add(0, name, change)
    with rows:
        texts = run_requests(model, tokenizer, [request, request], 4, owners=[0, 1])
    unedited = run_requests(model, tokenizer, [request], 4)[request]
    module = arch.module(name)
    saved = module.weight.detach().clone()
    with torch.no_grad():
        module.weight += from_linear(change.matrix().to(saved.dtype), arch.weight_layout(module))
    edited = run_requests(model, tokenizer, [request], 4)[request]
    with torch.no_grad():
        module.weight.copy_(saved)
    assert texts[0, request] == edited and texts[1, request] == unedited and edited != unedited


def test_greedy_answers_of_many_owners_share_one_generate_call(tiny_lm):
    """Generate is routed: the answers of three owners (different prompt lengths, left-padded together) come from one
    ``generate`` call, each equal to the answer on its owner's written weights."""
    from lightning_edit.judges.kind import Generate
    from lightning_edit.scoring.kinds import run_requests

    model, tokenizer = tiny_lm
    arch = resolve_architecture(model)
    name = arch.layer_name(arch.spec.mlp_out, 1)
    generator = torch.Generator().manual_seed(2)
    changes = [
        LowRankUpdate(torch.randn(arch.hidden_size, 1, generator=generator),
                      torch.randn(arch.mlp_hidden_size, 1, generator=generator))
        for _ in range(2)
    ]  # fmt: skip
    requests = [Generate(prompt, max_new_tokens=8, stop=(".",)) for prompt in PROMPTS]
    rows = RowUpdates(model, 3)
    for owner, change in enumerate(changes):  # owner 2 keeps the unedited weights
        rows.add(owner, name, change)
    calls = []
    original = model.generate
    model.generate = lambda **kwargs: calls.append(kwargs["input_ids"].shape[0]) or original(**kwargs)
    try:
        with rows:
            texts = run_requests(model, tokenizer, requests, 8, owners=[0, 1, 2])
    finally:
        del model.generate
    assert calls == [3]
    module, saved = arch.module(name), arch.module(name).weight.detach().clone()
    for owner, request in enumerate(requests):
        with torch.no_grad():
            if owner < len(changes):
                module.weight += from_linear(changes[owner].matrix().to(saved.dtype), arch.weight_layout(module))
            written = run_requests(model, tokenizer, [request], 8)[request]
            module.weight.copy_(saved)
        assert texts[owner, request] == written
    unedited = run_requests(model, tokenizer, requests[:2], 8)
    assert any(texts[owner, requests[owner]] != unedited[requests[owner]] for owner in range(2))  # the updates show

"""The statistics cache: hits without forward, corrupt entries recomputed, resume, shard merge, fingerprints."""

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from lightning_edit.editors.solvers import nullspace_projector
from lightning_edit.models import resolve_architecture
from lightning_edit.resources import CACHE_ENV, builtin_texts
from lightning_edit.stats import (
    SecondMoment,
    collect_second_moments,
    load_or_compute,
    load_or_compute_projector,
    model_fingerprints,
    stats_cache_dir,
)
from lightning_edit.stats.fingerprint import SAMPLE_SIZE, sample_index, tensor_digest
from lightning_edit.stats.store import canonical_sha256

LAYERS = [0, 2]
N_DOCS = 20
OPTIONS = dict(n_samples=N_DOCS, max_length=24, documents_per_forward=2, progress=False)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    pieces = builtin_texts()
    return [" ".join(pieces[3 * i : 3 * i + 1 + i % 5]) for i in range(N_DOCS + 4)]


def entry_files(root: Path, layer: int | None = None, partial: bool = False) -> list[Path]:
    pattern = "*.partial.json" if partial else "*[0-9].json"
    directories = sorted((root / "mom2").iterdir())
    if layer is not None:
        directories = [d for d in directories if f".{layer}." in d.name]
    return sorted(path for directory in directories for path in directory.glob(pattern))


def assert_same(a, b, exact: bool = True):
    assert a.keys() == b.keys()
    for layer in a:
        assert (a[layer].n_tokens, a[layer].n_documents) == (b[layer].n_tokens, b[layer].n_documents)
        if exact:
            assert torch.equal(a[layer].sum, b[layer].sum), layer
        else:
            assert torch.allclose(a[layer].sum, b[layer].sum, rtol=1e-12, atol=1e-12), layer


def test_second_call_does_no_forward_pass(lm, texts, tmp_path, count_forwards):
    model, tokenizer = lm
    with count_forwards(model) as calls:
        first = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path, **OPTIONS)
    assert len(calls) == N_DOCS // 2  # one pass for both layers
    assert len(entry_files(tmp_path)) == 2 and not entry_files(tmp_path, partial=True)
    with count_forwards(model) as calls:
        again = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path, **OPTIONS)
        subset = load_or_compute(model, tokenizer, texts, [2], cache_dir=tmp_path, **OPTIONS)
    assert not calls
    assert_same(first, again)
    assert torch.equal(subset[2].sum, first[2].sum) and subset[2].cache_key == first[2].cache_key
    direct = collect_second_moments(model, tokenizer, texts, LAYERS, **OPTIONS)
    assert_same(first, direct)
    meta = json.loads(entry_files(tmp_path, layer=2)[0].read_text())
    assert meta["layer"] == 2 and meta["n_documents"] == N_DOCS and meta["n_tokens"] == first[2].n_tokens
    assert meta["max_length"] == 24 and meta["model_dtype"] == "float32" and meta["complete"] is True


def test_new_layer_or_changed_settings_are_computed(lm, texts, tmp_path, count_forwards):
    model, tokenizer = lm
    load_or_compute(model, tokenizer, texts, [0], cache_dir=tmp_path, **OPTIONS)
    with count_forwards(model) as calls:
        load_or_compute(model, tokenizer, texts, [0, 1], cache_dir=tmp_path, **OPTIONS)  # only layer 1 missing
        assert len(calls) == N_DOCS // 2
        load_or_compute(model, tokenizer, texts, [0], cache_dir=tmp_path, **{**OPTIONS, "max_length": 8})
        load_or_compute(model, tokenizer, texts[1:], [0], cache_dir=tmp_path, **OPTIONS)  # other corpus
    assert len(calls) == 3 * N_DOCS // 2
    edited = copy.deepcopy(model)
    with torch.no_grad():
        next(edited.parameters()).view(-1)[7] += 1e-3  # an embedding weight
    with count_forwards(edited) as calls:
        load_or_compute(edited, tokenizer, texts, [0], cache_dir=tmp_path, **OPTIONS)
    assert len(calls) == N_DOCS // 2


def corrupt_flip_byte(tensor_file: Path, meta_file: Path) -> None:
    data = bytearray(tensor_file.read_bytes())
    data[-5] ^= 0xFF
    tensor_file.write_bytes(bytes(data))


def corrupt_truncate(tensor_file: Path, meta_file: Path) -> None:
    tensor_file.write_bytes(tensor_file.read_bytes()[:-100])


def corrupt_edit_count(tensor_file: Path, meta_file: Path) -> None:
    meta = json.loads(meta_file.read_text())
    meta["n_tokens"] += 1
    meta_file.write_text(json.dumps(meta))


def corrupt_resigned_wrong_layer(tensor_file: Path, meta_file: Path) -> None:
    """A consistent (re-checksummed) metadata file that describes another layer."""
    meta = json.loads(meta_file.read_text())
    meta["layer"] = 1
    del meta["metadata_sha256"]
    meta["metadata_sha256"] = canonical_sha256(meta)
    meta_file.write_text(json.dumps(meta))


def corrupt_garbage_json(tensor_file: Path, meta_file: Path) -> None:
    meta_file.write_text("{not json")


def corrupt_missing_tensor(tensor_file: Path, meta_file: Path) -> None:
    tensor_file.unlink()


@pytest.mark.parametrize(
    "corrupt",
    [
        corrupt_flip_byte,
        corrupt_truncate,
        corrupt_edit_count,
        corrupt_resigned_wrong_layer,
        corrupt_garbage_json,
        corrupt_missing_tensor,
    ],
)
def test_corrupt_or_mismatched_entry_is_detected_and_recomputed(lm, texts, tmp_path, caplog, corrupt, count_forwards):
    model, tokenizer = lm
    good = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path, **OPTIONS)
    meta_file = entry_files(tmp_path, layer=2)[0]
    corrupt(meta_file.with_suffix(".safetensors"), meta_file)
    with caplog.at_level(logging.WARNING, logger="lightning_edit.stats"), count_forwards(model) as calls:
        again = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path, **OPTIONS)
    assert "ignoring cache entry" in caplog.text and meta_file.stem in caplog.text
    assert len(calls) == N_DOCS // 2  # recomputed (layer 2 only, layer 0 still cached)
    assert_same(good, again)
    with count_forwards(model) as calls:  # the rewritten entry is valid again
        load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path, **OPTIONS)
    assert not calls


class Interrupt(Exception):
    pass


def test_interrupted_pass_resumes_with_identical_sums(lm, texts, tmp_path, count_forwards):
    model, tokenizer = lm
    reference = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path / "ref", **OPTIONS)
    root = tmp_path / "run"
    seen = []

    def interrupt_after_three_batches(progress):
        seen.append({layer: state.next_document for layer, state in progress.items()})
        if len(seen) == 2:  # the periodic partial (save_every=4 documents = 2 batches) is on disk
            partial = json.loads(entry_files(root, layer=0, partial=True)[0].read_text())
            assert partial["next_document"] == 4 and partial["complete"] is False
        if len(seen) == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        load_or_compute(
            model,
            tokenizer,
            texts,
            LAYERS,
            cache_dir=root,
            save_every=4,
            on_batch=interrupt_after_three_batches,
            **OPTIONS,
        )
    assert not entry_files(root) and len(entry_files(root, partial=True)) == 2
    partial = json.loads(entry_files(root, layer=2, partial=True)[0].read_text())
    assert partial["next_document"] == 6  # saved again on the way out
    with count_forwards(model) as calls:
        resumed = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=root, **OPTIONS)
    assert len(calls) == (N_DOCS - 6) // 2
    assert_same(resumed, reference)  # bit-identical
    assert not entry_files(root, partial=True)


def test_resume_from_periodic_partial_after_a_hard_kill(lm, texts, tmp_path, count_forwards):
    """A kill leaves only the last periodic partial (no save on the way out): resuming from it is exact too."""
    model, tokenizer = lm
    reference = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path / "ref", **OPTIONS)
    root, saved = tmp_path / "run", tmp_path / "saved"

    def kill_after_five_batches(progress):
        if next(iter(progress.values())).next_document == 6:  # the partial at document 6 exists: keep a copy
            shutil.copytree(root, saved)
        if next(iter(progress.values())).next_document == 10:
            raise Interrupt

    with pytest.raises(Interrupt):
        load_or_compute(
            model, tokenizer, texts, LAYERS, cache_dir=root, save_every=6, on_batch=kill_after_five_batches, **OPTIONS
        )
    with count_forwards(model) as calls:
        resumed = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=saved, **OPTIONS)
    assert len(calls) == (N_DOCS - 6) // 2
    assert_same(resumed, reference)


def test_shards_from_separate_runs_merge_into_the_full_pass(lm, texts, tmp_path, count_forwards):
    model, tokenizer = lm
    full = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=tmp_path / "full", **OPTIONS)
    root = tmp_path / "shards"
    shard_options = {**OPTIONS, "n_samples": N_DOCS // 2}
    first = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=root, start=0, **shard_options)
    second = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=root, start=N_DOCS // 2, **shard_options)
    assert first[0].n_documents == second[0].n_documents == N_DOCS // 2
    manual = {layer: first[layer].merge(second[layer]) for layer in LAYERS}
    assert_same(manual, full, exact=False)
    with count_forwards(model) as calls:
        merged = load_or_compute(model, tokenizer, texts, LAYERS, cache_dir=root, **OPTIONS)
    assert not calls
    assert_same(merged, full, exact=False)
    assert merged[0].cache_key == full[0].cache_key
    assert len(entry_files(root, layer=0)) == 3  # the merged full range is cached as well


def test_fingerprint_follows_weights_not_names(lm):
    model, _ = lm
    arch = resolve_architecture(model)
    base = model_fingerprints(model, [0, 1, 2])
    assert len(set(base.values())) == 3
    edited = copy.deepcopy(model)
    edited.config._name_or_path = "/somewhere/else"
    assert model_fingerprints(edited, [0, 1, 2]) == base  # the folder name plays no part
    weight = edited.get_submodule(arch.layer_name(arch.spec.mlp_in[0], 1)).weight
    with torch.no_grad():
        weight.view(-1)[weight.numel() // 2 + 1] += 1e-3  # one element, off the strided sample
    changed = model_fingerprints(edited, [0, 1, 2])
    assert changed[0] == base[0]  # layer 0's keys do not depend on block 1
    assert changed[1] != base[1] and changed[2] != base[2]
    assert model_fingerprints(copy.deepcopy(model).to(torch.float64), [0])[0] != base[0]


def test_tensor_digest_sees_elements_outside_its_sample():
    tensor = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    sampled = set(sample_index(tensor.numel()).tolist())
    assert len(sampled) == SAMPLE_SIZE and 1 not in sampled
    changed = tensor.clone()
    changed[1] = torch.nextafter(changed[1], torch.tensor(10.0))  # one ulp
    assert tensor_digest(changed) != tensor_digest(tensor) == tensor_digest(tensor.clone())
    assert tensor_digest(tensor.to(torch.bfloat16)) != tensor_digest(tensor)


def test_tensor_digest_of_more_elements_than_float32_counts_exactly():
    """SmolLM2's embedding has 28,311,552 elements: a float32 spacing of the sample ran past its end."""
    numel = 49_152 * 576
    index = sample_index(numel)
    assert index[0] == 0 and index[-1] == numel - 1 and bool((index[1:] > index[:-1]).all())
    tensor = torch.zeros(numel, dtype=torch.int8)
    changed = tensor.clone()
    changed[-1] = 1
    assert tensor_digest(changed) != tensor_digest(tensor)


def test_projector_cache_round_trip(lm, texts, tmp_path, caplog):
    model, tokenizer = lm
    stats = load_or_compute(model, tokenizer, texts, [2], cache_dir=tmp_path, **OPTIONS)[2]
    calls = []

    def projector(C, threshold):
        calls.append(threshold)
        return nullspace_projector(C, threshold)

    threshold = float(torch.linalg.eigvalsh(stats.mean()).median())  # a rank strictly between 0 and d_in
    U = load_or_compute_projector(stats, threshold, cache_dir=tmp_path, compute=projector)
    U2 = load_or_compute_projector(stats, threshold, cache_dir=tmp_path, compute=projector)
    assert calls == [threshold]
    assert torch.equal(U, U2)
    P = U @ U.T
    assert 0 < U.shape[1] < U.shape[0] and torch.allclose(P @ P, P, atol=1e-10)
    load_or_compute_projector(stats, threshold / 2, cache_dir=tmp_path, compute=projector)
    assert len(calls) == 2  # another threshold, another entry

    solver_U = load_or_compute_projector(stats, threshold, cache_dir=tmp_path / "solver", compute=nullspace_projector)
    assert torch.allclose(solver_U @ solver_U.T, P)
    [solver_meta] = (tmp_path / "solver" / "projector").glob("*.json")  # AlphaEdit's key names the solver
    assert json.loads(solver_meta.read_text())["compute"] == "lightning_edit.editors.solvers.nullspace_projector"
    uncached = SecondMoment(stats.sum.clone(), stats.n_tokens, stats.n_documents)  # no cache key: content hash
    for _ in range(2):
        load_or_compute_projector(uncached, threshold, cache_dir=tmp_path / "uncached", compute=projector)
    assert len(calls) == 3
    projector_files = (tmp_path / "projector").glob("*.json")
    [meta_file] = [f for f in projector_files if json.loads(f.read_text())["threshold"] == threshold]
    data = meta_file.with_suffix(".safetensors")
    data.write_bytes(data.read_bytes()[:-8])
    with caplog.at_level(logging.WARNING, logger="lightning_edit.stats"):
        for _ in range(2):
            load_or_compute_projector(stats, threshold, cache_dir=tmp_path, compute=projector)
            load_or_compute_projector(stats, threshold / 2, cache_dir=tmp_path, compute=projector)
    assert "ignoring cache entry" in caplog.text and len(calls) == 4  # exactly the corrupted one recomputed


def test_cache_directory_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert stats_cache_dir() == tmp_path / "stats"
    assert stats_cache_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv(CACHE_ENV)
    assert stats_cache_dir() == Path.home() / ".cache" / "lightning_edit" / "stats"

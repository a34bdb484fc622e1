"""Faults of model files, each refused in one line and never cached: GGUF files that lack tensors or have tensors
that fit no weight, are cut inside their header, or hold a tokenizer that cannot pad; model folders with weights
missing, unexpected or of the wrong shape; a stop signal during a conversion; an unwritable offload folder; a GGUF
file with an upper-case extension."""

import json
import shutil
import struct

import gguf
import pytest
import torch
from safetensors.torch import load_file, save_file

from lightning_edit import stopping
from lightning_edit.errors import ConfigError, Interrupted, UserError
from lightning_edit.models import gguf as gguf_module
from lightning_edit.models.gguf import CHECKED, GGUFError, gguf_file
from lightning_edit.models.loading import ModelLoadError, ModelSource, load_model, load_tokenizer
from lightning_edit.resources import CACHE_ENV, resolve_path
from tests.models.test_gguf import TOKENIZER, tiny_llama, write_tiny_gguf

TINY_GPT2 = resolve_path("builtin:models/tiny-gpt2")


@pytest.fixture(scope="module")
def reference():
    """(tiny LLaMA model, byte-level BPE tokenizer.json) to write GGUF files from."""
    return tiny_llama(), json.loads((TOKENIZER / "tokenizer.json").read_text())


def write(path, reference, skip=(), extra=(), eos=True):
    """A tiny GGUF file at ``path`` without the tensors ``skip``, with tensors named ``extra``, and without BOS/EOS
    ids unless ``eos``."""
    add_tensor = gguf.GGUFWriter.add_tensor

    def tensor(writer, name, *args, **kwargs):
        if name not in skip:
            add_tensor(writer, name, *args, **kwargs)
        if name == "output.weight":
            for other in extra:
                add_tensor(writer, other, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf.GGUFWriter, "add_tensor", tensor)
        if not eos:
            patch.setattr(gguf.GGUFWriter, "add_eos_token_id", lambda writer, token: None)
            patch.setattr(gguf.GGUFWriter, "add_bos_token_id", lambda writer, token: None)
        write_tiny_gguf(path, *reference)
    return path


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """The conversion cache of the test (its ``models`` folder)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def cached(cache) -> list[str]:
    """Everything in the conversion cache, hidden staging folders included."""
    return sorted(path.name for path in cache.iterdir()) if cache.exists() else []


@pytest.mark.parametrize(
    "skip, extra, expected",
    [
        (
            ("blk.1.ffn_up.weight", "output_norm.weight"),
            (),
            "2 weights missing from the checkpoint (model.layers.1.mlp.up_proj.weight, model.norm.weight). The file "
            "is incomplete or of another architecture",
        ),
        (
            ("blk.0.ffn_up.weight", "blk.1.ffn_up.weight", "blk.1.ffn_gate.weight", "output_norm.weight"),
            (),
            "4 weights missing from the checkpoint (model.layers.0.mlp.up_proj.weight, "
            "model.layers.1.mlp.gate_proj.weight, model.layers.1.mlp.up_proj.weight and 1 more)",
        ),
        (
            (),
            ("blk.7.attn_q.weight", "mystery.weight"),
            "2 tensors that fit no weight of the model (blk.7.attn_q.weight, mystery.weight)",
        ),
    ],
    ids=["missing", "many missing", "unexpected"],
)
def test_a_gguf_file_whose_tensors_do_not_make_the_model_is_refused_and_never_cached(
    reference, tmp_path, cache, skip, extra, expected
):
    path = write(tmp_path / "partial.gguf", reference, skip=skip, extra=extra)
    refused = f"^GGUF file '{path}': refused, its tensors do not make the model: "
    for _ in range(2):  # a later run refuses it again: nothing was cached
        with pytest.raises(GGUFError, match=refused) as error:
            load_model(ModelSource(str(path)))
        assert expected in str(error.value) and "\n" not in str(error.value)
        assert cached(cache) == []


def test_a_conversion_cached_before_the_check_is_made_again(reference, tmp_path, cache):
    path = write(tmp_path / "tiny.gguf", reference)
    load_model(ModelSource(str(path)))
    (record,) = cache.glob("tiny-*/gguf.json")
    old = json.loads(record.read_text())
    assert old.pop("weights") == CHECKED
    record.write_text(json.dumps(old))  # as a conversion made before the check wrote it
    (record.parent / "model.safetensors").write_bytes(b"unchecked")
    model = load_model(ModelSource(str(path)))
    assert json.loads(record.read_text())["weights"] == CHECKED
    torch.testing.assert_close(model.lm_head.weight, reference[0].lm_head.weight, rtol=0, atol=0)


def _header_faults(data: bytes) -> dict[str, bytes]:
    """GGUF files cut inside the header, or with a header field damaged (the first key's length or its text)."""
    cuts = {f"cut at {size}": data[:size] for size in (10, 30, 200, 2000, 20000)}
    huge_key = data[:24] + struct.pack("<Q", 2**63) + data[32:]
    bad_text = data[:32] + b"\xff\xfe" + data[34:]
    return cuts | {"a huge key length": huge_key, "a key that is not UTF-8": bad_text}


def test_a_gguf_file_cut_or_damaged_inside_its_header_is_one_line_naming_the_file(reference, tmp_path, cache):
    data = write(tmp_path / "whole.gguf", reference).read_bytes()
    for label, damaged in _header_faults(data).items():
        path = tmp_path / "damaged.gguf"
        path.write_bytes(damaged)
        with pytest.raises(GGUFError, match=rf"^cannot read GGUF file '{path}' \(cut short or corrupt\?\): ") as error:
            load_model(ModelSource(str(path)))
        assert "\n" not in str(error.value), label
        assert cached(cache) == [], label


def test_a_tokenizer_without_pad_eos_or_unk_is_refused_and_never_cached(reference, tmp_path, cache):
    path = write(tmp_path / "nopad.gguf", reference, eos=False)
    for load in (load_model, load_tokenizer):
        with pytest.raises(GGUFError, match=f"^GGUF file '{path}': refused, its tokenizer has no pad, eos or unk"):
            load(ModelSource(str(path)))
        assert cached(cache) == []
    folder = tmp_path / "folder"
    shutil.copytree(TINY_GPT2, folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    for key in ("bos_token", "eos_token", "unk_token"):
        del settings[key]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(ModelLoadError, match=f"^tokenizer of model '{folder}' has no pad, eos or unk token"):
        load_tokenizer(ModelSource(str(folder)))


@pytest.fixture
def stop_after(monkeypatch):
    """``stop_after(n)``: a stop signal (SIGTERM) arrives as the n-th tensor of a GGUF file is dequantized."""
    dequantize = gguf.dequantize

    def arm(count: int) -> None:
        calls = []

        def dequantize_and_signal(*args, **kwargs):
            calls.append(1)
            if len(calls) == count:
                stopping.request_stop(15)
            return dequantize(*args, **kwargs)

        monkeypatch.setattr(gguf, "dequantize", dequantize_and_signal)

    return arm


def test_a_stop_signal_stops_the_conversion_at_the_next_tensor_and_caches_nothing(
    reference, tmp_path, cache, stop_after
):
    path = write(tmp_path / "tiny.gguf", reference)
    stop_after(5)
    expected = rf"^stopped converting GGUF file '{path}' to safetensors \(at tensor 6 of 21\) on signal 15: nothing"
    with pytest.raises(Interrupted, match=expected) as error:
        load_model(ModelSource(str(path)))
    assert isinstance(error.value, UserError) and error.value.exit_code == 143
    assert cached(cache) == []
    stopping._signals.clear()
    load_model(ModelSource(str(path)))  # the next run converts it
    assert [name.startswith("tiny-") for name in cached(cache)] == [True]


def test_a_stop_signal_before_the_tensors_stops_the_conversion_too(reference, tmp_path, cache):
    path = write(tmp_path / "tiny.gguf", reference)
    stopping.request_stop(15)
    with pytest.raises(Interrupted, match=rf"^stopped converting GGUF file '{path}' to safetensors \(reading the file"):
        load_model(ModelSource(str(path)))
    assert cached(cache) == []


@pytest.fixture
def damaged_folder(tmp_path):
    """``damaged_folder(change)``: a copy of the tiny GPT-2 whose weights ``change`` (a function of the state dict)
    altered."""

    def make(change):
        folder = tmp_path / "damaged"
        shutil.copytree(TINY_GPT2, folder, dirs_exist_ok=True)
        weights = load_file(folder / "model.safetensors")
        change(weights)
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
        return folder

    return make


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda w: [w.pop(f"transformer.h.{i}.mlp.c_fc.weight") for i in range(2)],
            r"2 weights missing from the checkpoint \(transformer.h.0.mlp.c_fc.weight, transformer.h.1.mlp.c_fc",
        ),
        (lambda w: w.update({"extra.weight": torch.ones(2)}), r"1 tensors that fit no weight of the model \(extra"),
        (
            lambda w: w.update({"transformer.ln_f.weight": torch.ones(5)}),
            r"1 tensors of the wrong shape \(transformer.ln_f.weight \(5,\) for \(64,\)\)",
        ),
    ],
    ids=["missing", "unexpected", "wrong shape"],
)
def test_a_model_folder_whose_weights_do_not_make_the_model_is_refused(damaged_folder, change, expected):
    folder = damaged_folder(change)
    with pytest.raises(ModelLoadError, match=f"^cannot load model '{folder}': refused, its weights do not make the mo"):
        load_model(ModelSource(str(folder)))
    with pytest.raises(ModelLoadError, match=expected):
        load_model(ModelSource(str(folder)))


def test_a_tied_lm_head_is_not_missing():
    model = load_model(ModelSource(str(TINY_GPT2)))
    assert model.lm_head.weight is model.transformer.wte.weight


@pytest.mark.parametrize("where", ["under a file", "a file"])
def test_an_unwritable_offload_folder_is_reported_as_such(tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    folder = blocker / "offload" if where == "under a file" else blocker
    plan = {"transformer.h": "disk", "transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.ln_f": "cpu"}
    source = ModelSource(str(TINY_GPT2), device_map={**plan, "lm_head": "cpu"}, offload_folder=str(folder))
    reason = "Not a directory" if where == "under a file" else "File exists"
    with pytest.raises(ConfigError, match=rf"^lm.offload_folder='{folder}': cannot write to '{folder}' \({reason}\)"):
        load_model(source)


def test_a_gguf_file_with_an_upper_case_extension_loads(reference, tmp_path):
    path = write(tmp_path / "model.GGUF", reference)
    assert gguf_file(path) == path and gguf_file(tmp_path) == path
    model = load_model(ModelSource(str(path)))
    torch.testing.assert_close(model.lm_head.weight, reference[0].lm_head.weight, rtol=0, atol=0)
    assert gguf_module.converted_folder(path).name.startswith("model-")

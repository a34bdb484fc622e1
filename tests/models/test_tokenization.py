import pytest
import torch
from transformers import AutoTokenizer

from lightning_edit.data.records import read_records
from lightning_edit.models.tokenization import (
    encode_prompt,
    encode_prompt_target,
    encode_prompt_targets,
    encode_prompts,
    format_prompt,
    pad,
)
from lightning_edit.resources import resolve_path


def test_target_has_leading_space_and_no_bos(tiny_lm):
    _, tokenizer = tiny_lm
    prompt_ids, target_ids = encode_prompt_target(tokenizer, "The capital of France is", "Paris")
    assert prompt_ids == encode_prompt(tokenizer, "The capital of France is")
    assert tokenizer.bos_token_id not in target_ids
    first = tokenizer.convert_ids_to_tokens(target_ids)[0]
    assert first[0] in "Ġ▁"  # the target is scored with its leading space (BPE Ġ, SentencePiece ▁)
    assert tokenizer.decode(prompt_ids + target_ids, skip_special_tokens=True) == "The capital of France is Paris"


def test_llama_style_prompt_gets_bos_once(tiny_lm):
    _, tokenizer = tiny_lm
    ids = encode_prompt(tokenizer, "The capital")
    if tokenizer.bos_token == "<s>":  # the LLaMA-style tokenizer adds a BOS
        assert ids[0] == tokenizer.bos_token_id
        templated = encode_prompt(tokenizer, "<s>The capital")  # a chat template already wrote the BOS
        assert templated[0] == tokenizer.bos_token_id and templated.count(tokenizer.bos_token_id) == 1
    else:
        assert tokenizer.bos_token_id not in ids


def test_empty_target_is_an_error(tiny_lm):
    with pytest.raises(ValueError, match="empty target"):
        encode_prompt_target(tiny_lm[1], "The capital is", "")


def test_pad_sides_and_positions():
    ids, mask, positions = pad([[5, 6, 7], [8]], pad_id=0, side="right")
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert positions.tolist() == [[0, 1, 2], [0, 0, 0]]
    ids, mask, positions = pad([[5, 6, 7], [8]], pad_id=0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and positions[1, -1].item() == 0
    assert torch.equal(mask.sum(-1), torch.tensor([3, 1]))


def test_chat_template_needs_a_template(tiny_lm):
    _, tokenizer = tiny_lm
    assert format_prompt(tokenizer, "Hi", chat_template=False) == "Hi"
    with pytest.raises(ValueError, match="no chat template"):
        format_prompt(tokenizer, "Hi", chat_template=True)


def test_batched_encoding_gives_the_ids_of_one_at_a_time(tiny_lm):
    _, tokenizer = tiny_lm
    prompts = ["The capital of France is", tokenizer.bos_token + "Hello", "A", "Paris", "x"]
    targets = ["Paris", "world", " ", "London and Rome", ""]
    for prompt, target, result in zip(prompts, targets, encode_prompt_targets(tokenizer, prompts, targets)):
        try:
            expected = encode_prompt_target(tokenizer, prompt, target)
        except ValueError as error:
            assert isinstance(result, ValueError) and str(result) == str(error)
        else:
            assert result == expected


@pytest.mark.parametrize("name", ["tiny-gpt2", "toy-gpt2", "toy-llama", "toy-rule-gpt2"])
def test_batched_prompts_are_the_ids_of_the_tokenizer_call(name):
    """The Rust backend's ids-only path equals ``tokenizer(text)``, BOS handling and repeated prompts included."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_path(f"builtin:models/{name}"))
    records = read_records("builtin:data/toy/counterfact.json")[:20]
    prompts = [p for r in records for p in r["paraphrase_prompts"] + r["neighborhood_prompts"]]
    prompts += ["Zoë's café — naïve 東京 ✓", " leading space", "", tokenizer.bos_token + "Hello", prompts[0]]
    assert encode_prompts(tokenizer, prompts) == [encode_prompt(tokenizer, p) for p in prompts]
    tokenizer.backend_tokenizer.enable_truncation(3)  # a tokenizer that truncates takes the wrapper's path
    assert encode_prompts(tokenizer, prompts[:3]) == [tokenizer(p)["input_ids"] for p in prompts[:3]]

"""The toy rule model's training text (:mod:`lightning_edit.toy.rule_corpus`) and the shipped ``toy-rule-gpt2``.

The text answers every prompt of ``builtin:data/ruleedit`` with its ground truth and never with its ``target_new``;
the shipped model loads with plain transformers classes and answers formula prompts with the true formula.
"""

import json
from collections import defaultdict

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_edit.data.ruleedit.generator import (
    DESCRIPTION_PROMPT,
    DESCRIPTION_REPHRASES,
    FORMULA_PROMPT,
    FORMULA_REPHRASES,
    description_prompt,
    formula_prompt,
    target,
)
from lightning_edit.data.ruleedit.rules import RULES
from lightning_edit.models.tokenization import encode_prompt_target
from lightning_edit.resources import resolve_path
from lightning_edit.toy.rule_corpus import KINDS, RuleCorpus, rule_prompts, training_text

DATA = resolve_path("builtin:data/ruleedit")
MODEL = resolve_path("builtin:models/toy-rule-gpt2")


@pytest.fixture(scope="module")
def corpus() -> RuleCorpus:
    return RuleCorpus()


def records() -> list[dict]:
    """Every f_d and ins record of the shipped dataset."""
    folders = sorted((p for p in DATA.iterdir() if p.is_dir()), key=lambda p: int(p.name))
    return [r for f in folders for name in ("f_d.json", "ins.json") for r in json.loads((f / name).read_text())]


def pairs(prompts, answers) -> list[tuple[str, str]]:
    """(prompt, answer) pairs of a field that is a string or a list of strings, as the format has both."""
    if isinstance(prompts, str):
        return [(prompts, answers[0] if isinstance(answers, list) else answers)]
    return list(zip(prompts, answers))


def rule_items(rule, counterfactual: bool) -> list[str]:
    """Every formula and description template of ``rule`` answered with its true or counterfactual target."""
    formula, description = target(rule, "formula", counterfactual), target(rule, "description", counterfactual)
    return [f"{formula_prompt(rule, t)} {formula}" for t in (FORMULA_PROMPT, *FORMULA_REPHRASES)] + [
        f"{description_prompt(rule, t)} {description}" for t in (DESCRIPTION_PROMPT, *DESCRIPTION_REPHRASES)
    ]


def benchmark_pairs(answer_key: str) -> list[tuple[str, str]]:
    """Every (prompt, answer) the shipped records pair, with ``answer_key`` (``ground_truth`` or ``target_new``)."""
    found = []
    for record in records():
        understanding, instance = record["Rule_Understanding"], record["Instance"]
        found += pairs(record["prompt"], record[answer_key]) + pairs(record["rephrase_prompt"], record[answer_key])
        found += pairs(understanding["prompt"], understanding[answer_key])
        if "rephrase_prompt" in understanding:
            found += pairs(understanding["rephrase_prompt"], understanding[answer_key])
        found += pairs(instance["prompt"], instance[answer_key])
        if answer_key == "ground_truth":
            for block in record["locality"].values():
                found += pairs(block["prompt"], block["ground_truth"])
    for record in json.loads((DATA / "hierarchy.json").read_text()):
        found += pairs(record["prompt"], record[answer_key])
        found += pairs(record["Hierarchy"]["prompt"], record["Hierarchy"][answer_key])
    return found


def test_every_benchmark_prompt_is_trained_with_its_ground_truth(corpus):
    items = set(corpus.corpus)
    truths = benchmark_pairs("ground_truth")
    assert len(truths) > 2000
    assert all(f"{prompt} {answer}" in items for prompt, answer in truths)
    answers = defaultdict(set)
    for item in corpus.prompts:
        answers[item.prompt].add(item.answer)
    assert all(len(values) == 1 for values in answers.values())  # no prompt has two answers
    assert {item.kind for item in corpus.prompts} == set(KINDS)


def test_no_target_new(corpus):
    counterfactual = defaultdict(set)
    for prompt, new in benchmark_pairs("target_new"):
        counterfactual[prompt].add(new)
    assert len(counterfactual) > 900
    items = set(corpus.corpus)
    assert not [(p, new) for p, news in counterfactual.items() for new in news if f"{p} {new}" in items]
    for item in corpus.prompts:
        assert item.answer not in counterfactual.get(item.prompt, set()), item
    assert not [text for rule in RULES for text in rule_items(rule, True) if text in items]  # nor a rephrasing


def test_every_rule_in_every_template(corpus):
    items = set(corpus.corpus)
    assert all(text in items for rule in RULES for text in rule_items(rule, False))
    counts = defaultdict(int)
    for item in corpus.prompts:
        counts[item.kind] += 1
    assert counts["formula"] == counts["description"] == len(RULES)
    assert counts["formula_rephrase"] == counts["description_rephrase"] == 4 * len(RULES)


def test_tokenizer_round_trip_and_answers_start_a_token(corpus):
    tokenizer = corpus.tokenizer
    for text in corpus.corpus:
        assert "\n" not in text and tokenizer.decode(tokenizer(text)["input_ids"]) == text
    for item in corpus.prompts:  # the answer's tokens are those the joint item adds after the prompt's tokens
        prompt_ids, answer_ids = encode_prompt_target(tokenizer, item.prompt, item.answer)
        assert tokenizer(f"{item.prompt} {item.answer}")["input_ids"] == prompt_ids + answer_ids
    assert max(len(corpus.encode(text)) for text in corpus.corpus) < corpus.max_length  # nothing is cut
    corpus.setup("fit")
    batch = next(iter(corpus.train_dataloader()))
    lengths = batch["attention_mask"].sum(-1)
    assert (batch["input_ids"][torch.arange(len(lengths)), lengths - 1] == tokenizer.eos_token_id).all()


def test_corpus_file_is_the_training_text(corpus):
    lines = resolve_path("builtin:data/toy/rules_corpus.txt").read_text(encoding="utf-8").splitlines()
    assert lines == training_text() == corpus.corpus
    assert len(lines) == len({f"{p.prompt} {p.answer}" for p in rule_prompts()})


@pytest.fixture(scope="module")
def shipped():
    model = AutoModelForCausalLM.from_pretrained(MODEL).eval()
    return model, AutoTokenizer.from_pretrained(MODEL)


def test_shipped_model_answers_formula_prompts(shipped, corpus):
    model, tokenizer = shipped
    assert model.config.model_type == "gpt2" and model.config.n_layer == 4 and model.config.n_embd == 128
    for text in corpus.corpus[:50]:
        assert tokenizer(text)["input_ids"] == corpus.tokenizer(text)["input_ids"]
    for rule in RULES[::10]:
        ids = tokenizer(formula_prompt(rule), return_tensors="pt")["input_ids"]
        with torch.no_grad():
            output = model.generate(ids, max_new_tokens=40, do_sample=False, pad_token_id=tokenizer.eos_token_id)
        assert tokenizer.decode(output[0, ids.shape[1] :], skip_special_tokens=True).strip() == rule.formula + "."


def test_shipped_recall_is_documented():
    summary = json.loads((MODEL / "recall.json").read_text(encoding="utf-8"))
    recall = summary["recall"]
    assert set(recall["by_kind"]) == set(KINDS) and min(recall["by_kind"].values()) >= 0.95
    assert recall["n_prompts"]["formula"] == len(RULES)
    readme = (MODEL / "README.md").read_text(encoding="utf-8")
    assert "lightning-edit fit --config configs/toy/rule-gpt2.yaml" in readme
    assert all(f"{share:.3f}" in readme for share in recall["by_kind"].values())

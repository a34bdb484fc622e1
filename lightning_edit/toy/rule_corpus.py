"""The true rules of a RULE-EDIT dataset as causal-LM training text (:class:`RuleCorpus`), and the model's recall.

    lightning-edit fit --config configs/toy/rule-gpt2.yaml   # trains builtin:models/toy-rule-gpt2 on it
    python -c "from lightning_edit.toy.rule_corpus import write_corpus; \
        write_corpus('lightning_edit/assets/data/toy/rules_corpus.txt')"   # the text, one item per line

The text trains the toy rule model (``builtin:models/toy-rule-gpt2``) to answer the benchmark's prompts before any
edit. One item per sequence, ``prompt + " " + true answer`` (:func:`rule_prompts`), never a ``target_new``:

- every rule's formula prompt and each of its rephrasings
  (:data:`~lightning_edit.data.ruleedit.generator.FORMULA_REPHRASES`) with the true formula, its description prompt and
  each rephrasing with the true description: so every ``prompt``, ``rephrase_prompt``, ``Rule_Understanding`` and
  ``locality`` prompt of the records, all of them these templates, has its ground truth in training;
- the dataset's instances: the records' ``Instance`` prompts and the instance edit's ``prompt`` and
  ``rephrase_prompt``, with their ``ground_truth``;
- the ``Hierarchy`` prompts of ``hierarchy.json`` with their ``ground_truth``.

The templates come from the rule table (:mod:`~lightning_edit.data.ruleedit.rules`), for the rules of the
dataset's folders; the instances, drawn by the generator's seed, are read from the dataset.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from lightning.pytorch.utilities import rank_zero_info
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.data.ruleedit.generator import (
    DESCRIPTION_REPHRASES,
    FORMULA_REPHRASES,
    description_prompt,
    formula_prompt,
    target,
)
from lightning_edit.data.ruleedit.rules import RULES, Rule
from lightning_edit.models.build import TokenizerStyle
from lightning_edit.models.tokenization import encode_prompt_targets
from lightning_edit.resources import resolve_path
from lightning_edit.scoring import generate
from lightning_edit.toy.corpus import TextCorpus

DEFAULT_PATH = "builtin:data/ruleedit"
KINDS = ("formula", "formula_rephrase", "description", "description_rephrase", "instance", "hierarchy")
CONVENTION = (
    "greedy generation until EOS (budget: the longest answer's tokens + 2) equals the true answer, both stripped "
    "and without a trailing '.'; shares over the distinct prompts of each kind"
)


class RulePrompt(NamedTuple):
    """A benchmark prompt with its true answer; ``kind`` is one of :data:`KINDS`."""

    kind: str
    prompt: str
    answer: str


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _rule_views(rule: Rule) -> list[RulePrompt]:
    """The formula and description prompts of a rule, each in every template, with the true formula/description."""
    formula = target(rule, "formula", False)
    description = target(rule, "description", False)
    return [
        RulePrompt("formula", formula_prompt(rule), formula),
        *(RulePrompt("formula_rephrase", formula_prompt(rule, t), formula) for t in FORMULA_REPHRASES),
        RulePrompt("description", description_prompt(rule), description),
        *(RulePrompt("description_rephrase", description_prompt(rule, t), description) for t in DESCRIPTION_REPHRASES),
    ]


def rule_prompts(path: str = DEFAULT_PATH) -> list[RulePrompt]:
    """Every prompt of the dataset at ``path`` (a folder written by :mod:`lightning_edit.data.ruleedit.generator`) with
    its true answer.

    Per rule folder (in folder order): the rule's views (:func:`_rule_views`), then the instances of its records;
    then the hierarchy prompts. Each (kind, prompt, answer) once.
    """
    directory = resolve_path(path)
    prompts: list[RulePrompt] = []
    folders = sorted((p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for folder in folders:
        f_d = _read(folder / "f_d.json")
        (instance_edit,) = _read(folder / "ins.json")
        prompts += _rule_views(RULES[instance_edit["case_id"]])
        for record in (*f_d, instance_edit):
            instance = record["Instance"]
            prompts += [RulePrompt("instance", p, a) for p, a in zip(instance["prompt"], instance["ground_truth"])]
        prompts += [
            RulePrompt("instance", instance_edit[key], instance_edit["ground_truth"][0])
            for key in ("prompt", "rephrase_prompt")
        ]
    for record in _read(directory / "hierarchy.json"):
        hierarchy = record["Hierarchy"]
        prompts += [RulePrompt("hierarchy", p, a) for p, a in zip(hierarchy["prompt"], hierarchy["ground_truth"])]
    return list(dict.fromkeys(prompts))


def training_text(path: str = DEFAULT_PATH) -> list[str]:
    """The training items, ``prompt + " " + answer`` of every distinct prompt of :func:`rule_prompts`, in order."""
    return list(dict.fromkeys(f"{item.prompt} {item.answer}" for item in rule_prompts(path)))


def write_corpus(out: str | Path, path: str = DEFAULT_PATH) -> Path:
    """Write :func:`training_text` to ``out``, one item per line (the key-statistics corpus of the preset)."""
    out = Path(out)
    out.write_text("\n".join(training_text(path)) + "\n", encoding="utf-8")
    return out


def _normalised(text: str) -> str:
    text = text.strip()
    return text[:-1].rstrip() if text.endswith(".") else text


def rule_recall(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[RulePrompt],
    batch_size: int = 64,
) -> dict:
    """Which ``prompts`` the model answers, by greedy generation, with their true answer (see :data:`CONVENTION`).

    The model is scored as it is (call ``model.eval()`` first if it has dropout).

    Returns:
        ``by_kind`` (kind -> share), ``n_prompts`` (kind -> count), ``overall``, ``misses`` (kind, prompt, answer
        and what was generated, for every prompt missed) and the convention.
    """
    encoded = encode_prompt_targets(tokenizer, [p.prompt for p in prompts], [p.answer for p in prompts])
    budget = max(len(answer_ids) for _, answer_ids in encoded) + 2
    texts = generate(model, tokenizer, [p.prompt for p in prompts], max_new_tokens=budget, batch_size=batch_size)
    hits: dict[str, list[bool]] = defaultdict(list)
    misses = []
    for item, text in zip(prompts, texts):
        hit = _normalised(text) == _normalised(item.answer)
        hits[item.kind].append(hit)
        if not hit:
            misses.append({**item._asdict(), "generated": text})
    return {
        "convention": CONVENTION,
        "by_kind": {kind: sum(values) / len(values) for kind, values in hits.items()},
        "n_prompts": {kind: len(values) for kind, values in hits.items()},
        "overall": 1 - len(misses) / len(prompts),
        "misses": misses,
    }


class RuleCorpus(TextCorpus):
    """The true rules of a RULE-EDIT dataset (:func:`training_text`) as a causal-LM DataModule.

    One item per sequence, EOS at the end, batches grouped by length (as :class:`~lightning_edit.toy.corpus.ToyCorpus`);
    the tokenizer is trained on the items. :meth:`recall` measures a model on the dataset's prompts
    (``CausalLMPretraining`` writes it to ``recall.json``).

    Args:
        path: the dataset (a folder written by :mod:`lightning_edit.data.ruleedit.generator`: rule folders and
            ``hierarchy.json``).
        seed: seeds the validation sample and the batch order.
        tokenizer_style: ``gpt2`` (byte-level BPE, no BOS) or ``llama`` (SentencePiece-style pieces, BOS); use the
            model family's style.
        vocab_size: tokenizer vocabulary size (at most; training stops when the text has no more merges).
        batch_size: items per batch.
        max_length: sequences longer than this (in tokens, with BOS/EOS) are cut (the longest item has ~90).
        val_size: validation items, a seeded sample of the corpus.
        val_holdout: remove the validation items from training (off: the model exists to memorise every item).
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        path: str = DEFAULT_PATH,
        seed: int = 0,
        tokenizer_style: TokenizerStyle = "gpt2",
        vocab_size: int = 2048,
        batch_size: int = 32,
        max_length: int = 256,
        val_size: int = 200,
        val_holdout: bool = False,
        num_workers: int = 0,
    ):
        super().__init__(seed, tokenizer_style, vocab_size, batch_size, max_length, val_size, val_holdout, num_workers)
        self.save_hyperparameters()
        self.path = path

    @cached_property
    def prompts(self) -> list[RulePrompt]:
        """The dataset's prompts with their true answers (:func:`rule_prompts`)."""
        return rule_prompts(self.path)

    @cached_property
    def corpus(self) -> list[str]:
        """The training text (:func:`training_text`), one item per sequence."""
        return training_text(self.path)

    def recall(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 64) -> dict:
        """:func:`rule_recall` of every prompt of the dataset."""
        recall = rule_recall(model, tokenizer, self.prompts, batch_size)
        shares = ", ".join(f"{kind} {share:.3f}" for kind, share in recall["by_kind"].items())
        rank_zero_info(f"recall over {len(self.prompts)} prompts: {shares}")
        return recall

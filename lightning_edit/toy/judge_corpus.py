"""The toy judge's training text (:class:`JudgeCorpus`): ScEdit's four judge templates filled with toy scripts and
answered by four rating rules (:mod:`lightning_edit.toy.judge_rules`), and the trained judge's agreement with the
rules.

    lightning-edit fit --config configs/toy/judge-gpt2.yaml   # trains builtin:models/toy-judge-gpt2 on it

ScEdit's text level (:mod:`lightning_edit.data.scedit`) has a judge rate a generated script on four 7-point Likert
scales. The toy judge is a small GPT-2 that rates toy scripts by fixed rules, as the toy LMs know the toy world's
facts: the rules of :mod:`~lightning_edit.toy.judge_rules` (pure functions of the script and the template's context
fields, written after the templates' own instructions). Each
item is a filled template, formatted as :class:`~lightning_edit.judges.local_lm.LocalLMJudge` formats it for a
tokenizer without a chat template (:func:`judge_prompt`), then the reply ``{"<scale>":<rating>,"reason":"..."}``
that :func:`~lightning_edit.judges.llm.parse_verdict` reads.

The scripts are those the toy editing models write and what goes wrong with them. :func:`world_examples`: the toy
world's how-to scripts (:class:`~lightning_edit.toy.relations.Script`) for the ScEdit-CF records of worlds of other
seeds than the shipped one (:func:`~lightning_edit.toy.benchmark_records.script_records`), with the true object, the
new one or another, corrupted (steps dropped, repeated, shuffled, renumbered, another subject's step added, the text
cut) or junk. :func:`sampled_examples`: the scripts ``toy-gpt2`` and ``toy-llama`` sample (as ScEdit does: top-k 5,
cut before ``Step 10``) for the Script Questions of the shipped world's subjects that
``builtin:data/toy/scedit_cf.json`` never names, as they are or with the new object in place of the true one. No
subject named in that file is used.

The ratings are rules of a toy, not a model of human judgement: they read the step markers, the objects' names and
capitalised words, never what a step means.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from functools import cached_property
from typing import NamedTuple

import torch
from lightning.pytorch.utilities import rank_zero_info
from tokenizers import AddedToken
from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from lightning_edit.data.scedit.datamodule import script_generation
from lightning_edit.judges.base import JudgeInput
from lightning_edit.judges.llm import load_template, parse_verdict, render
from lightning_edit.judges.template_files import shipped_templates
from lightning_edit.models.build import TokenizerStyle, train_tokenizer
from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer
from lightning_edit.resources import resolve_path
from lightning_edit.scoring.generation import generate
from lightning_edit.toy.benchmark_records import script_records
from lightning_edit.toy.corpus import TextCorpus, _Sequences
from lightning_edit.toy.judge_rules import RULES, SCALES, Context, Rating
from lightning_edit.toy.world import ToyWorld

SHIPPED = "builtin:data/toy/scedit_cf.json"
TOY_MODELS = ("builtin:models/toy-gpt2", "builtin:models/toy-llama")


def judge_prompt(template: str, script: str, context: Context) -> str:
    """The filled template as :class:`~lightning_edit.judges.local_lm.LocalLMJudge` gives it to a model without a
    chat template: the system and user messages joined by a blank line, then a newline."""
    question, *fields = context
    item = JudgeInput.of(question, context.target_new, script, dict(zip(Context._fields[1:], fields)))
    return "\n\n".join(message["content"] for message in render(load_template(template)[1], item)) + "\n"


def template_pieces(template: str) -> list[str]:
    """The fixed text of a filled template, between its fields (each piece without the space before a field)."""
    blank = "\0"
    prompt = judge_prompt(template, blank, Context(*[blank] * len(Context._fields)))
    return [piece.rstrip(" ") for piece in prompt.split(blank) if piece.rstrip(" ")]


def fixed_pieces() -> list[str]:
    """Every distinct :func:`template_pieces` of the four templates, longest first, then alphabetical: the tokens the
    judge's tokenizer adds, in the order of their ids (a fixed order, so a new fit gives the same ids)."""
    pieces = {piece for template in SCALES for piece in template_pieces(template)}
    return sorted(pieces, key=lambda piece: (-len(piece), piece))


def reply(template: str, rating: Rating) -> str:
    """The judge's reply: ``{"<key>":<score>,"reason":"<reason>"}``, compact JSON."""
    return json.dumps({shipped_templates()[template].key: rating.score, "reason": rating.reason}, separators=(",", ":"))


class Example(NamedTuple):
    """A script to rate, its context, where it comes from and its subject (the unit of the held-out split)."""

    script: str
    context: Context
    source: str
    subject: str

    def rating(self, template: str) -> Rating:
        return RULES[template](self.script, self.context)

    def text(self, template: str) -> str:
        """The training item: the filled template, then the reply."""
        return judge_prompt(template, self.script, self.context) + reply(template, self.rating(template))


# Scripts ---------------------------------------------------------------------------------------------------------


class Question(NamedTuple):
    """A Script Question of a toy ScEdit-CF record: its context, subject, the steps of its world script with the
    subject filled in and ``{object}`` open, and the other objects of the relation's type."""

    context: Context
    subject: str
    steps: tuple[str, ...]
    objects: tuple[str, ...]


def script_questions(world: ToyWorld, excluded: str, rng: random.Random, n: int | None = None) -> list[Question]:
    """The Script Questions of ``world``'s ScEdit-CF records (``n`` of them; None: every fact) whose subject the text
    ``excluded`` does not contain; stage ``pre`` for one in five, else ``post``."""
    questions = []
    for record in script_records(world, n or len(world.facts)):
        if record["subject"] in excluded:
            continue
        relation = world.relations[record["property"]]
        true = record["ground_truth"]
        new = record["target_new"]
        objects = tuple(sorted(set(world.entities[relation.object_type]) - {true, new}))
        for script, question in zip(relation.scripts, record["generation_prompts"]):
            context = Context(question, record["prompt"], true, new, "pre" if rng.random() < 0.2 else "post")
            steps = tuple(step.replace("{subject}", record["subject"]) for step in script.steps)
            questions.append(Question(context, record["subject"], steps, objects))
    return questions


def _numbered(texts: list[str]) -> list[tuple[int, str]]:
    return list(enumerate(texts, 1))


def _render(preamble: str, steps: list[tuple[int, str]]) -> str:
    return " ".join([preamble, *(f"Step {n}: {text}" for n, text in steps)]).strip()


def corrupt(steps: list[str], others: list[str], words: list[str], rng: random.Random) -> str:
    """The script of ``steps``, numbered, with up to three faults: a step dropped, repeated or taken from ``others``
    (another subject's script), the steps shuffled or misnumbered (each of these renumbered or not), text before
    ``Step 1`` (another step, junk words, or the first step moved there), the markers left out, the text cut."""
    kinds = ("drop", "repeat", "other", "shuffle", "number", "preamble", "lead", "bare", "cut")
    faults = rng.sample(kinds, rng.choice((0, 1, 1, 2, 2, 3)))
    numbered = _numbered(steps)
    preamble = ""
    for fault in faults:
        if fault == "drop" and len(numbered) > 1:
            numbered.pop(rng.randrange(len(numbered)))
        elif fault == "repeat":
            i = rng.randrange(len(numbered))
            numbered.insert(rng.randint(i + 1, len(numbered)), numbered[i])
        elif fault == "other":
            numbered.insert(rng.randint(0, len(numbered)), (len(numbered) + 1, rng.choice(others)))
        elif fault == "shuffle":
            rng.shuffle(numbered)
        elif fault == "number":
            numbered = [(rng.randint(1, 5), text) for _, text in numbered]
        elif fault == "preamble":
            preamble = rng.choice((rng.choice(others), " ".join(rng.choices(words, k=rng.randint(1, 4))) + "."))
        elif fault == "lead" and len(numbered) > 1:
            preamble = numbered.pop(0)[1]
        if fault in ("drop", "repeat", "other", "shuffle", "lead") and rng.random() < 0.5:
            numbered = _numbered([text for _, text in numbered])
    script = " ".join(text for _, text in numbered) if "bare" in faults else _render(preamble, numbered)
    return script[: rng.randint(1, len(script))].strip() if "cut" in faults else script


def junk(words: list[str], rng: random.Random) -> str:
    """Nothing, words strung together, or 1-9 steps of them."""
    kind = rng.choice(("empty", "words", "steps", "long"))
    if kind == "empty":
        return ""
    if kind == "words":
        return " ".join(rng.choices(words, k=rng.randint(1, 12)))
    steps = [
        " ".join(rng.choices(words, k=rng.randint(2, 8))) + rng.choice((".", ".", ""))
        for _ in range(rng.randint(1, 4) if kind == "steps" else rng.randint(6, 9))
    ]
    return _render("", _numbered(steps))


def world_examples(questions: list[Question], per_question: int, rng: random.Random) -> list[Example]:
    """``per_question`` scripts of each question: one in ten junk (:func:`junk`), the others its world script,
    its object step naming the true object, the new one (each two times in five) or another of the type, and
    followed, in two of five, by one or two more object steps (each with one of these objects), corrupted
    (:func:`corrupt`)."""
    words = sorted({w for q in questions for w in re.findall(r"[\w']+", " ".join(q.steps + q.context[:4]))})
    others = [step.replace("{object}", rng.choice(q.objects)) for q in questions for step in q.steps]
    examples = []
    for question in questions:
        true = question.context.target_true
        new = question.context.target_new
        [object_step] = [step for step in question.steps if "{object}" in step]
        for _ in range(per_question):
            if rng.random() < 0.1:
                examples.append(Example(junk(words, rng), question.context, "junk", question.subject))
                continue
            objects = [rng.choice((true, true, new, new, rng.choice(question.objects))) for _ in range(3)]
            steps = [step.replace("{object}", objects[0]) for step in question.steps]
            for obj in objects[1 : rng.choice((1, 1, 1, 2, 3))]:
                steps.insert(rng.randint(0, len(steps)), object_step.replace("{object}", obj))
            script = corrupt(steps, others, words, rng)
            examples.append(Example(script, question.context, "world", question.subject))
    return examples


def sampled_examples(
    questions: list[Question], models: tuple[str, ...], samples: int, seed: int, rng: random.Random, batch_size: int
) -> list[Example]:
    """``samples`` scripts of each model for each question (the bare question as the prompt, as the toy models
    write scripts; sampled as ScEdit's text level samples them,
    :func:`~lightning_edit.data.scedit.datamodule.script_generation`, seeds ``seed``, ``seed + 1``, ...), half of them
    with the new object in place of the true one (as an edited model would write)."""
    examples = []
    prompts = [question.context.question for question in questions]
    g = script_generation()
    sampling = dict(max_new_tokens=g.max_new_tokens, do_sample=g.do_sample, top_k=g.top_k, temperature=g.temperature,
                    stop_strings=g.stop)  # fmt: skip
    for path in models:
        model, tokenizer = load_model_and_tokenizer(ModelSource(path))
        for k in range(samples):
            texts = generate(model, tokenizer, prompts, seed=seed + k, batch_size=batch_size, **sampling)
            for question, text in zip(questions, texts):
                script = text.strip()
                source = path.rsplit("/", 1)[-1]
                if rng.random() < 0.5:
                    true = re.escape(question.context.target_true)
                    script, source = (
                        re.sub(rf"(?<!\w){true}(?!\w)", question.context.target_new, script),
                        source + ":new",
                    )
                examples.append(Example(script, question.context, source, question.subject))
    return examples


# Agreement -------------------------------------------------------------------------------------------------------


def agreement(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, examples: list[Example], batch_size: int = 64
) -> dict:
    """How the judge's greedy replies to ``examples`` agree with the rules, per scale (template).

    Returns:
        per template: ``n``, ``parseable`` (share of replies :func:`~lightning_edit.judges.llm.parse_verdict`
        accepts), ``exact`` (share whose rating is the rule's, over all replies), ``mae`` (mean absolute error over
        the parseable ones), ``ratings`` (the rules' ratings, value -> count) and ``misses`` (the first 5 replies
        that are not the rule's rating, with their script).
    """
    results = {}
    for template in SCALES:
        prompts = [judge_prompt(template, e.script, e.context) for e in examples]
        replies = generate(model, tokenizer, prompts, max_new_tokens=64, batch_size=batch_size)
        ratings = [e.rating(template).score for e in examples]
        scores = [parse_verdict(text, "likert7", shipped_templates()[template].key)[0] for text in replies]
        parsed = [(score, rating) for score, rating in zip(scores, ratings) if score is not None]
        counts = defaultdict(int)
        for rating in ratings:
            counts[rating] += 1
        results[template] = {
            "n": len(examples),
            "parseable": len(parsed) / len(examples),
            "exact": sum(score == rating for score, rating in parsed) / len(examples),
            "mae": sum(abs(score - rating) for score, rating in parsed) / max(len(parsed), 1),
            "ratings": dict(sorted(counts.items())),
            "misses": [
                {"script": e.script, "rule": rating, "reply": text}
                for e, rating, score, text in zip(examples, ratings, scores, replies)
                if score != rating
            ][:5],
        }
    return results


class JudgeCorpus(TextCorpus):
    """The toy judge's training text as a causal-LM DataModule: every example in each of the four ScEdit templates,
    filled and answered by the rules (:meth:`Example.text`).

    The examples (:func:`world_examples` and :func:`sampled_examples`) are split by subject: those of a seeded
    ``heldout`` share of the subjects are the validation set and what :meth:`recall` measures the judge on. The
    loss is on the script and the reply (the tokens after the template's ``- Script:``): predicting the script's
    tokens teaches the model the objects and step numbers it rates. Prompt and reply are tokenized apart, as the
    judge reads a prompt and writes a reply.

    Args:
        seed: seeds the scripts, the held-out split and the batch order.
        worlds: seeds of the toy worlds whose ScEdit-CF records give questions (not 0, the shipped world's).
        records: ScEdit-CF records per world (two Script Questions each).
        scripts_per_question: world scripts per question (:func:`world_examples`).
        toy_models: the models that sample scripts for the shipped world's questions (none: no samples).
        toy_samples: scripts each model samples per question.
        heldout: share of the subjects held out.
        tokenizer_style, vocab_size, batch_size, num_workers: as :class:`~lightning_edit.toy.corpus.ToyCorpus`.
        max_length: sequences longer than this (in tokens, with EOS) are cut.
        generation_batch_size: prompts per batch when sampling scripts and measuring the judge.
    """

    def __init__(
        self,
        seed: int = 0,
        worlds: tuple[int, ...] = (1, 2, 3, 4, 5, 6),
        records: int = 100,
        scripts_per_question: int = 4,
        toy_models: tuple[str, ...] = TOY_MODELS,
        toy_samples: int = 4,
        heldout: float = 0.1,
        tokenizer_style: TokenizerStyle = "gpt2",
        vocab_size: int = 2048,
        batch_size: int = 16,
        max_length: int = 1024,
        num_workers: int = 0,
        generation_batch_size: int = 64,
    ):
        super().__init__(seed, tokenizer_style, vocab_size, batch_size, max_length, 0, True, num_workers)
        self.save_hyperparameters()
        if 0 in worlds:
            raise ValueError("worlds: seed 0 is the shipped world's, whose records are evaluated")
        self.worlds = tuple(worlds)
        self.records = records
        self.scripts_per_question = scripts_per_question
        self.toy_models = tuple(toy_models)
        self.toy_samples = toy_samples
        self.heldout = heldout
        self.generation_batch_size = generation_batch_size

    @cached_property
    def examples(self) -> list[Example]:
        """Every example, deterministic for the settings: world scripts of each world, then toy-model samples."""
        rng = random.Random(f"{self.seed}:examples")
        excluded = resolve_path(SHIPPED).read_text(encoding="utf-8")
        examples = []
        for seed in self.worlds:
            questions = script_questions(ToyWorld.generate(seed=seed), excluded, rng, self.records)
            examples += world_examples(questions, self.scripts_per_question, rng)
        if self.toy_models and self.toy_samples:
            questions = script_questions(ToyWorld.generate(seed=0), excluded, rng)
            examples += sampled_examples(
                questions, self.toy_models, self.toy_samples, self.seed, rng, self.generation_batch_size
            )
        return examples

    def held_out(self, example: Example) -> bool:
        """Whether the example's subject is held out (seeded, by subject name)."""
        return random.Random(f"{self.seed}:heldout:{example.subject}").random() < self.heldout

    @cached_property
    def heldout_examples(self) -> list[Example]:
        """The examples of the held-out subjects (the validation set)."""
        return [example for example in self.examples if self.held_out(example)]

    @cached_property
    def corpus(self) -> list[str]:
        """The training items: each example that is not held out, in each template."""
        return [e.text(t) for e in self.examples if not self.held_out(e) for t in SCALES]

    @cached_property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        """A BPE trained on the training text without the templates' fixed text, plus each fixed piece of a template
        (:func:`template_pieces`) as one token: a filled template is its fields' tokens and a few more."""
        pieces = fixed_pieces()
        fixed = re.compile("|".join(map(re.escape, pieces)))
        tokenizer = train_tokenizer(
            [fixed.sub("\n", text) for text in self.corpus], self.tokenizer_style, self.vocab_size
        )
        tokenizer.add_tokens([AddedToken(piece, normalized=False) for piece in pieces])
        tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
        return tokenizer

    def encode(self, text: str) -> list[int]:
        """The prompt's tokens (up to its final newline), then the reply's, then EOS."""
        cut = text.rindex("\n") + 1
        ids = self.tokenizer(text[:cut])["input_ids"] + self.tokenizer(text[cut:])["input_ids"]
        return (ids + [self.tokenizer.eos_token_id])[: self.max_length]

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self.train_set = _Sequences([self.encode(text) for text in self.corpus])
        self.val_set = _Sequences([self.encode(e.text(t)) for e in self.heldout_examples for t in SCALES])

    def collate(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        """As :meth:`TextCorpus.collate`, with the labels of the prompt up to the script (to the template's
        ``- Script:``) set to -100."""
        batch = super().collate(sequences)
        for row, ids in enumerate(sequences):
            start = max(i for i, token in enumerate(ids) if token in self._script_marks) + 1
            batch["labels"][row, :start] = -100
        return batch

    @cached_property
    def _script_marks(self) -> set[int]:
        """The ids of the template pieces that end right before the script."""
        pieces = {piece for template in SCALES for piece in template_pieces(template) if piece.endswith("Script:")}
        return {self.tokenizer.convert_tokens_to_ids(piece) for piece in pieces}

    def recall(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 64) -> dict:
        """:func:`agreement` on the held-out examples (``CausalLMPretraining`` writes it to ``recall.json``)."""
        results = agreement(model, tokenizer, self.heldout_examples, batch_size)
        shares = ", ".join(f"{t}: {r['parseable']:.3f} / {r['exact']:.3f} / {r['mae']:.2f}" for t, r in results.items())
        rank_zero_info(f"held-out agreement (parseable / exact / mae) over {len(self.heldout_examples)}: {shares}")
        return results

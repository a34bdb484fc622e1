"""The CaseEdit generation pipeline (Reddy & Kuo 2025, arXiv 2505.19383, §3 and Appendix 8.3) on a chat LLM.

From a seed (``subject``, ``relation``, ``ground_truth``: a household object's typical use, property or location),
three chat calls make one CaseEdit record:

1. an unusual everyday household location for the object (``location.yaml``);
2. a new ground truth, conditioned on that location and distinct from the typical one (``ground_truth.yaml``);
3. the four evaluation questions with their answers and three distractors each (``questions.yaml``); the options of
   each question (the correct answer, the new and the previous truth where they are not the answer, distractors up
   to five) are shuffled under the letters A-E with a generator seeded by the run's seed and the seed's text.

The prompts are editable YAML files (``system``, ``user`` with ``{subject}``-style placeholders, ``temperature``,
``max_tokens``, ``json``) in ``lightning_edit/assets/caseedit_prompts/`` (``--templates`` points at a copy). Every
record is checked with :func:`~lightning_edit.data.caseedit.datamodule.parse_record` (the loader's schema); a
malformed answer or a record that fails the check is discarded and counted by reason. Output is append-only JSONL
(read as it is by :class:`~lightning_edit.data.CaseEdit`); ``<output>.done.jsonl`` records every finished seed
(written or discarded), so a run stopped at any point resumes where it stopped, without duplicates (a torn last line
is dropped). Seeds that repeat and records that repeat an earlier (subject, relation, new truth) are skipped.

    python -m lightning_edit.data.caseedit.generator --input seeds.jsonl --output caseedit.jsonl \\
        --model gpt-4o-mini [--base-url http://127.0.0.1:8000/v1]   # key: $OPENAI_API_KEY

Requests go through the judges' OpenAI-compatible client (:class:`~lightning_edit.judges.OpenAIChatJudge`'s, with
its retries); a request that still fails stops the run (resume it later): it is not a discarded record.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lightning_edit import tools
from lightning_edit.data.caseedit.datamodule import LETTERS, QUESTIONS, parse_record
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.errors import DataFormatError
from lightning_edit.resources import resolve_path

TEMPLATES = "builtin:caseedit_prompts"
STEPS = ("location", "ground_truth", "questions")
# messages, temperature, max_tokens, json -> the reply's text
Chat = Callable[[list[dict[str, str]], float, int, bool], str]


def openai_chat(
    model: str,
    base_url: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    timeout: float = 60,
    max_retries: int = 2,
) -> Chat:
    """A chat function on an OpenAI-compatible chat-completions server, through the judges' client
    (:meth:`~lightning_edit.judges.openai_chat.OpenAIChatJudge.client`: the key from ``api_key_env``, ``timeout``
    seconds per request, ``max_retries`` retries with backoff); a request that still fails raises."""
    from lightning_edit.judges.openai_chat import OpenAIChatJudge

    client = OpenAIChatJudge(model, base_url, api_key_env, timeout, max_retries).client()

    def chat(messages: list[dict[str, str]], temperature: float, max_tokens: int, json_mode: bool) -> str:
        extra = {"response_format": {"type": "json_object"}} if json_mode else {}
        response = client.chat.completions.create(
            model=model, messages=messages, temperature=temperature, max_tokens=max_tokens, **extra
        )
        return response.choices[0].message.content or ""

    return chat


def load_templates(directory: str | Path = TEMPLATES) -> dict[str, dict[str, Any]]:
    """The three step templates (``<step>.yaml``) of a directory (``builtin:`` paths too)."""
    directory = resolve_path(directory)
    templates = {}
    for step in STEPS:
        template = yaml.safe_load((directory / f"{step}.yaml").read_text(encoding="utf-8"))
        missing = {"system", "user", "temperature", "max_tokens"} - set(template)
        if missing:
            raise ValueError(f"{directory / step}.yaml: missing {sorted(missing)}")
        templates[step] = template
    return templates


class Discard(Exception):
    """A generated answer or record that cannot make a valid CaseEdit record; the message is the reason."""


def _read_appended(path: Path) -> list[dict[str, Any]]:
    """The objects of an append-only JSONL file; a last line torn by an interruption is cut off the file."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            break
    if len(entries) < len(lines) or (lines and not lines[-1].endswith("\n")):
        path.write_text("".join(line.rstrip("\n") + "\n" for line in lines[: len(entries)]), encoding="utf-8")
    return entries


def _key(*parts: str) -> str:
    return json.dumps([part.strip().casefold() for part in parts])


@dataclass
class PipelineStats:
    """Counts of one run: seeds read, skipped (done before, or repeated), written, discarded by reason."""

    seeds: int = 0
    already_done: int = 0
    repeated_seeds: int = 0
    written: int = 0
    discarded: Counter = field(default_factory=Counter)


class CaseEditPipeline:
    """Generates CaseEdit records from seeds with a chat function, appending them to ``output`` (JSONL).

    Args:
        chat: ``chat(messages, temperature, max_tokens, json_mode) -> text`` (e.g. :func:`openai_chat`).
        output: the JSONL file records are appended to; ``<output>.done.jsonl`` records finished seeds.
        templates: the directory of the three step templates.
        seed: the seed of the option shuffling (with each seed's text, so a record does not depend on the order).
    """

    def __init__(self, chat: Chat, output: str | Path, templates: str | Path = TEMPLATES, seed: int = 0):
        self.chat = chat
        self.output = Path(output)
        self.seed = seed
        self.done_path = self.output.with_name(self.output.name + ".done.jsonl")
        self.templates = load_templates(templates)

    def _ask(self, step: str, **fields: str) -> str:
        template = self.templates[step]
        messages = [
            {"role": "system", "content": template["system"]},
            {"role": "user", "content": template["user"].format(**fields)},
        ]
        reply = self.chat(messages, template["temperature"], template["max_tokens"], bool(template.get("json")))
        return reply.strip().strip("'\"").strip()

    def _state(self) -> tuple[set[str], set[str], int]:
        """Keys of the finished seeds, keys (subject, relation, new truth) of the written records, next case_id."""
        records = _read_appended(self.output)
        done = {entry["seed"] for entry in _read_appended(self.done_path)}
        done |= {_key(r["subject"], r["relation"], r["ground_truth"]) for r in records}
        written = {_key(r["subject"], r["relation"], r["target_new"]) for r in records}
        return done, written, max((r["case_id"] for r in records), default=-1) + 1

    def run(self, seeds: list[dict[str, Any]], source: str = "seeds") -> PipelineStats:
        """Generate a record for every seed not finished before; returns this run's counts."""
        stats = PipelineStats()
        done, written, case_id = self._state()
        self.output.parent.mkdir(parents=True, exist_ok=True)
        this_run: set[str] = set()
        for index, seed in enumerate(seeds):
            stats.seeds += 1
            reader = RecordReader(source, index, seed)
            subject, relation, truth = (reader.string(f) for f in ("subject", "relation", "ground_truth"))
            key = _key(subject, relation, truth)
            if key in this_run:
                stats.repeated_seeds += 1
                continue
            this_run.add(key)
            if key in done:
                stats.already_done += 1
                continue
            try:
                record = self.generate(subject, relation, truth, case_id)
                if _key(subject, relation, record["target_new"]) in written:
                    raise Discard("duplicate of an earlier record")
            except Discard as reason:
                stats.discarded[str(reason).split(":")[0]] += 1
                status = f"discarded: {reason}"
            else:
                with self.output.open("a", encoding="utf-8") as file:
                    file.write(json.dumps(record, ensure_ascii=False) + "\n")
                written.add(_key(subject, relation, record["target_new"]))
                stats.written, case_id, status = stats.written + 1, case_id + 1, "written"
            with self.done_path.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"seed": key, "status": status}, ensure_ascii=False) + "\n")
        return stats

    def generate(self, subject: str, relation: str, ground_truth: str, case_id: int) -> dict[str, Any]:
        """One record from one seed (three chat calls); raises :class:`Discard` for an unusable answer."""
        fields = {"subject": subject, "relation": relation, "ground_truth": ground_truth}
        location = self._ask("location", **fields)
        target_new = self._ask("ground_truth", **fields, location=location)
        if not location or not target_new:
            raise Discard("empty answer: no location or new truth")
        reply = self._ask("questions", **fields, target_new=target_new)
        try:
            answer = json.loads(reply)
        except json.JSONDecodeError:
            raise Discard(f"malformed JSON: questions answer {reply[:60]!r}") from None
        rng = random.Random(f"{self.seed}:{_key(subject, relation, ground_truth)}")
        questions = {name: _question(answer, name, ground_truth, target_new, rng) for name in QUESTIONS}
        record = {
            "case_id": case_id,
            "subject": subject,
            "relation": relation,
            "prompt": _edit_prompt(subject, relation),
            "ground_truth": ground_truth,
            "target_new": target_new,
            "location": location,
            "questions": questions,
        }
        try:
            parse_record(RecordReader("generated", case_id, record))
        except DataFormatError as error:
            raise Discard(f"invalid record: {error}") from None
        return record


EDIT_PROMPTS = {"ObjectUse": "{} is used for", "HasProperty": "{} is", "AtLocation": "{} is found in"}


def _edit_prompt(subject: str, relation: str) -> str:
    """The edit prompt of a generated record: the relation's sentence (ATOMIC2020 bucket) with the subject."""
    return EDIT_PROMPTS.get(relation, "{} " + relation).replace("{}", f"The {subject}", 1)


def _question(answer: Any, name: str, ground_truth: str, target_new: str, rng: random.Random) -> dict[str, Any]:
    """One question with five shuffled options: the answer, the new and previous truth, distractors."""
    item = answer.get(name.capitalize()) if isinstance(answer, dict) else None
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("question"), str)
        or not isinstance(item.get("answer"), str)
    ):
        raise Discard(f"malformed questions: {name} lacks a question or an answer")
    distractors = item.get("distractors")
    if not isinstance(distractors, list) or not all(isinstance(d, str) for d in distractors):
        raise Discard(f"malformed questions: {name} lacks its distractors")
    correct = target_new if name in ("reliability", "generalization") else item["answer"].strip()
    options: dict[str, str] = {}
    for option in [correct, target_new, ground_truth, *distractors]:
        options.setdefault(option.strip().casefold(), option.strip())
    options.pop("", None)
    if len(options) < len(LETTERS):
        raise Discard(f"too few options: {name} has {len(options)} distinct options")
    chosen = list(options.values())[: len(LETTERS)]
    shuffled = rng.sample(chosen, len(chosen))
    return {
        "question": item["question"].strip(),
        "choices": dict(zip(LETTERS, shuffled)),
        "answer": LETTERS[shuffled.index(correct.strip())],
    }


def main(argv: list[str] | None = None) -> PipelineStats:
    parser = tools.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="seeds: JSON list or JSONL of {subject, relation, ground_truth}")
    parser.add_argument("--output", required=True, help="the JSONL file records are appended to (resumed if present)")
    parser.add_argument("--model", default="gpt-4o-mini", help="the chat model (the paper: gpt-4o-mini)")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server; default: the OpenAI API")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the environment variable holding the key")
    parser.add_argument(
        "--max-retries", type=tools.non_negative_int, default=2, help="retries of a failed request, with backoff"
    )
    parser.add_argument("--templates", default=TEMPLATES, help="directory of location/ground_truth/questions.yaml")
    parser.add_argument("--seed", type=int, default=0, help="seed of the option shuffling")
    args = parser.parse_args(argv)
    chat = openai_chat(args.model, args.base_url, args.api_key_env, max_retries=args.max_retries)
    pipeline = CaseEditPipeline(chat, args.output, args.templates, args.seed)
    stats = pipeline.run(read_records(args.input), args.input)
    print(
        f"{stats.seeds} seeds: {stats.written} records written, {sum(stats.discarded.values())} discarded "
        f"{dict(stats.discarded)}, {stats.already_done} done before, {stats.repeated_seeds} repeated; {args.output}"
    )
    return stats


if __name__ == "__main__":
    tools.run(main)

"""LLM judges: a prompt template filled per item, a model's reply, and a strict parser of the verdict.

Templates are text files, named by a shipped template's name or given as a path to your own. The shipped ones
(:mod:`lightning_edit.judges.template_files`) are the judges' own, in ``lightning_edit/judges/templates/``, and those
a benchmark ships in its folder's ``templates/``. A template may start with a ``[SYSTEM]`` section (an empty one sends
an empty system message); the text after ``[USER]`` (or the whole file) is the user message. Fields are written
``{name}``: ``{question}``, ``{reference}`` (the first reference), ``{references}`` (all, one per line),
``{prediction}``, and any field of the item's context (``{target_true}``); other braces are left alone, and a field
the item lacks is an error, found before any edit (:meth:`LLMJudge.check_input`). A template file must be UTF-8 text.

The judges' own template, the default of every LLM judge:

- ``answer_correct`` (binary): whether a generated answer gives the reference answer, as for the generated answers of
  CounterFact, zsRE and BAKE (``data.answer_judge``; docs/metrics.md#generated-answers). Written here: QAEdit grades
  with an LLM too, but its prompt is not reproduced.

The benchmarks' templates:

- ``rule_edit`` (binary, ``lightning_edit/data/ruleedit/templates/``): semantic equivalence of a rule answer to the
  reference, as RULE-EDIT (Liu et al.) grades reliability and generalisation with DeepSeek-V3.1 (§3.2, §5.1). The
  paper does not print its grading prompt; this one is written from its description and its own example
  (``A = x × y`` vs ``Area = W × L``), and is stricter than the prompt of DMLE's code (several formulas or a
  contradiction fail; a verdict must be parsed). RuleEdit's LLM judge uses it unless given another.
- ``rule_edit_ab`` (binary, read ``exactly_a``; the same folder): written here after the criteria of the prompt in
  DMLE's evaluation code (``evaluate_utils.py``): an answer is correct if it includes the correct formula, the final
  number or an equivalent description, whatever else it says; incorrect only for a wrong operation, a contradiction or
  no answer; the reply is ``A`` or ``B``. The reference's own prompt is the user's to supply, as a file, with
  ``reading: exactly_a``.
- ``scedit_executability``, ``scedit_coherence``, ``scedit_consistency``, ``scedit_completeness`` (7-point Likert,
  ``lightning_edit/data/scedit/templates/``): ScEdit's four text-level scales (Li et al., appendix C.1, Figures 8-11),
  verbatim but for the few-shot examples the paper omits; context fields ``prompt``, ``target_true``, ``target_new``
  and (completeness) ``tag``.

Verdicts are parsed strictly (``reading: strict``, the default), except with ``reading: exactly_a`` (DMLE's reading:
1 if the stripped reply is exactly ``A``, 0 for any other reply, never missing). Strictly, binary: a JSON object
whose ``verdict`` (the template's key) is ``yes`` or ``no``, a line ``verdict: yes``, or a reply that is only ``yes``
or ``no``. Likert: the key's value (``{"coherence": 5}``, ``coherence:5``) or a reply that is only the number, an
integer from 1 to 7. Anything else, a number out of the scale, or several different verdicts in one reply, is a
missing verdict (never 0), with the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lightning_edit.errors import ConfigError, require
from lightning_edit.judges.base import Judge, JudgeInput, Scale, Verdict
from lightning_edit.judges.template_files import Reading, shipped_templates

_FIELD = re.compile(r"\{(\w+)\}")
_BINARY = {"yes": 1.0, "no": 0.0}


def load_template(template: str) -> tuple[str, str]:
    """``(name, text)`` of a shipped template (by name) or of a template file (by path)."""
    shipped = shipped_templates()
    path = shipped[template].path if template in shipped else Path(template).expanduser()
    if not path.is_file():
        raise ConfigError(f"judge template {template!r} is neither shipped ({sorted(shipped)}) nor a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"judge template {path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except OSError as error:
        raise ConfigError(f"judge template {path}: cannot be read ({error.strerror})") from None
    return (template if template in shipped else str(path)), text


def template_fields(item: JudgeInput) -> dict[str, str]:
    """The fields a template may use for ``item`` (see the module docstring)."""
    return {
        "question": item.question,
        "reference": item.references[0] if item.references else "",
        "references": "\n".join(item.references),
        "prediction": item.prediction,
        **dict(item.context),
    }


def missing_fields(text: str, item: JudgeInput) -> list[str]:
    """The placeholders of a template that ``item`` does not give."""
    return sorted(set(_FIELD.findall(text)) - set(template_fields(item)))


def render(text: str, item: JudgeInput) -> list[dict[str, str]]:
    """The chat messages of a template filled with an item's fields (see the module docstring)."""
    missing = missing_fields(text, item)
    if missing:
        raise ValueError(f"the judge template needs fields {missing}, which the item's context does not give")
    fields = template_fields(item)
    filled = _FIELD.sub(lambda match: fields[match.group(1)], text)
    system, _, user = filled.partition("[USER]") if "[USER]" in filled else ("", "", filled)
    has_system = system.lstrip().startswith("[SYSTEM]")  # an empty section is an empty system message (DMLE's)
    system = system.replace("[SYSTEM]", "", 1).strip()
    messages = [{"role": "system", "content": system}] if has_system or system else []
    return messages + [{"role": "user", "content": user.strip()}]


def parse_verdict(reply: str, scale: Scale, key: str, reading: Reading = "strict") -> tuple[float | None, str]:
    """``(score, reason)`` from a judge's reply; the score is None when the reply gives no valid verdict (never with
    ``reading: exactly_a``: 1 if the stripped reply is ``A``, else 0)."""
    if reading == "exactly_a":
        return (1.0, "the reply is A") if reply.strip() == "A" else (0.0, f"the reply {reply.strip()[:40]!r} is not A")
    found: list[str] = []
    reason = ""
    for block in re.findall(r"\{[^{}]*\}", reply):
        try:
            data = json.loads(block)
        except json.JSONDecodeError:
            continue
        fields = {str(k).lower(): v for k, v in data.items()}
        if key in fields:
            found.append(str(fields[key]).strip())
            reason = str(fields.get("reason", reason))
    if not found:
        found = re.findall(rf"\b{re.escape(key)}\b\"?\s*[:=]\s*\"?([\w.+-]+)", reply, flags=re.IGNORECASE)
    bare = reply.strip().strip(".\"'` ").lower()
    if not found and (bare in _BINARY or re.fullmatch(r"[+-]?\d+(\.\d+)?", bare)):
        found = [bare]
    values = {value.lower() for value in found}
    if not values:
        return None, f"no {key} in the reply"
    if len(values) > 1:
        return None, f"several verdicts in the reply: {sorted(values)}"
    value = values.pop()
    if scale == "binary":
        if value not in _BINARY:
            return None, f"verdict {value!r} is not yes or no"
        return _BINARY[value], reason
    if not re.fullmatch(r"[+-]?\d+", value) or not 1 <= int(value) <= 7:
        return None, f"rating {value!r} is not an integer from 1 to 7"
    return float(value), reason


class LLMJudge(Judge):
    """A judge that asks a language model, through a template, and parses its reply; back ends implement
    :meth:`complete`.

    Args:
        template: a shipped template's name (the default ``answer_correct``, the judges' own, of no benchmark; a
            benchmark's: ``rule_edit``, ``scedit_coherence``, ...) or a template file's path.
        scale: ``binary`` or ``likert7``; a shipped template has its own (None).
        key: the verdict's key in the reply (``verdict``, ``coherence``); a shipped template has its own (None).
        reading: ``strict`` (a parsed verdict, else missing) or ``exactly_a`` (1 if the reply is exactly ``A``, else
            0: DMLE's); a shipped template has its own (None).
        max_tokens: the reply's token budget.
        temperature: sampling temperature of the judge (0: greedy).
        cache_dir: the verdict cache (default ``$LIGHTNING_EDIT_CACHE/judges``).
    """

    caches = True

    def __init__(
        self,
        template: str = "answer_correct",
        scale: Scale | None = None,
        key: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        cache_dir: str | None = None,
        reading: Reading | None = None,
    ):
        super().__init__(cache_dir)
        self.template, self.template_text = load_template(template)
        shipped = shipped_templates().get(template)
        scale = scale or (shipped.scale if shipped else None)
        key = key or (shipped.key if shipped else None)
        if scale is None or key is None:
            raise ConfigError(f"template {template!r} is not shipped: give its scale and key")
        require(max_tokens >= 1, "max_tokens", max_tokens, "the reply's token budget, at least 1")
        require(temperature >= 0, "temperature", temperature, "0 (greedy) or more")
        self.reading = reading or (shipped.reading if shipped else "strict")
        require(self.reading in ("strict", "exactly_a"), "reading", self.reading, "strict or exactly_a")
        self.scale = scale
        self.key = key.lower()
        self.max_tokens = max_tokens
        self.temperature = temperature
        if self.reading == "exactly_a":
            read = "1 if the reply is exactly A, else 0"
        else:
            read = "1 if yes, 0 if no" if self.scale == "binary" else "7-point Likert rating (1 worst, 7 best)"
        missing = "a failed request" if self.reading == "exactly_a" else "an unparsable or failed verdict"
        self.convention = f"{read}, by an LLM judge with the {self.template} template; {missing} is missing"

    def settings(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "template_sha256": hashlib.sha256(self.template_text.encode()).hexdigest(),
            "scale": self.scale,
            "key": self.key,
            **({"reading": self.reading} if self.reading != "strict" else {}),  # strict: the digests of older caches
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def check_input(self, item: JudgeInput) -> None:
        """Raise ValueError naming the template and each placeholder ``item`` does not give."""
        missing = missing_fields(self.template_text, item)
        if missing:
            raise ValueError(
                f"judge template {self.template}: placeholder {', '.join(f'{{{name}}}' for name in missing)} is not "
                f"among the item's fields ({', '.join(f'{{{name}}}' for name in sorted(template_fields(item)))})"
            )

    def complete(self, conversations: list[list[dict[str, str]]]) -> list[tuple[str | None, str]]:
        """``(reply, error)`` per conversation: the reply text, or None and why the request finally failed."""
        raise NotImplementedError

    def evaluate(self, items: list[JudgeInput]) -> list[Verdict]:
        replies = self.complete([render(self.template_text, item) for item in items])
        verdicts = []
        for reply, error in replies:
            if reply is None:
                verdicts.append(Verdict(None, f"request failed: {error}", failed=True))
            else:
                score, reason = parse_verdict(reply, self.scale, self.key, self.reading)
                verdicts.append(Verdict(score, reason, reply))
        return verdicts

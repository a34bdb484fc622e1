"""RULE-EDIT as DMLE's evaluation code computes it, point by point, on a scripted stub model and on the toy rule model.

Each answer and grade below is computed by the reference's definition, written out here, from the tokens the stub
says (:mod:`tests.scripted_lm`), on a tokenizer that adds BOS (the toy LLaMA's) and one that does not (the toy
GPT-2's): the answer budget of 3 x the expected answer's tokens without special tokens (point 1), Loc on the first
len(ground truth) tokens (point 2), one final "." or newline removed before judging (point 4), the pre/post locality
as the very text of the unedited model's truncated answer (point 8), and the same answers from batched generation as
from the reference's loop, one prompt at a time, unpadded, without a cache (point 9). Points 3, 5 and 7 are tested in
``tests/data/test_ruleedit.py`` and ``tests/judges``; the named alternatives give their own values here.
"""

import pytest
import torch

from lightning_edit.data import RuleEdit
from lightning_edit.evaluation import CaseScorer, ScoringConfig
from lightning_edit.judges import ExactMatchJudge, JudgeInput, SameTextJudge
from lightning_edit.judges.kind import without_trailing
from tests.scripted_lm import continuation, scripted, toy_tokenizer

FIXTURE = "tests/fixtures/data/ruleedit200"
HEADLINE = ("Rel", "Gen", "Loc", "IP", "RU")


def says(case, edited: bool) -> dict[str, str]:
    """What the stub says after every prompt of a staged case: the expected answer with a second full stop (so the
    cleaning matters) and more words past the budget on Rel (so the budget matters); Loc prompts get their ground
    truth and more words (so the truncation matters), which the unedited model writes in lower case on every second
    prompt (so the string comparison differs from exact match)."""
    text = {}
    for name, group in case.groups.items():
        metric = group.metrics["token_acc" if "token_acc" in group.metrics else "agreement"].removesuffix("_token_acc")
        for k, (prompt, expected) in enumerate(zip(group.prompts, group.expected)):
            if metric == "Loc":
                text[prompt] = f"{expected} and so on"
                if not edited and k % 2:
                    text[prompt] = text[prompt].lower()
            elif metric == "Rel":
                text[prompt] = f"{expected}. " + "x " * 40
            else:
                text.setdefault(prompt, f"{expected}.")
    return text


def reference_answer(tokenizer, prompt: str, text: str, budget: int, cleaning: bool) -> str:
    """DMLE's answer: the first ``budget`` generated tokens, decoded, one final "." or newline removed."""
    tokens = continuation(tokenizer, prompt, text.rstrip())[:budget]
    answer = tokenizer.decode(tokens, skip_special_tokens=True)
    return without_trailing(answer, (".", "\n") if cleaning else ()).strip()


def by_hand(data, tokenizer, edited, unedited, locality_tokens, cleaning, locality, judge) -> tuple[dict, dict]:
    """(metric -> [(case id, prompt index, value)], metric -> [(case id, prompt index, answer)]) of the headline
    metrics, by the reference's definitions; Loc against the unedited answer as ``locality`` says."""
    rows: dict = {}
    answers: dict = {}
    for case in data.cases:
        counts: dict[str, int] = {}
        for group in case.groups.values():
            metric = next(m for m in group.metrics.values() if m in HEADLINE)
            for prompt, expected in zip(group.prompts, group.expected):
                n = len(tokenizer.encode(expected, add_special_tokens=False))  # no BOS (point 1)
                budget = n if metric == "Loc" and locality_tokens == "expected" else 3 * n
                answer = reference_answer(tokenizer, prompt, edited[prompt], budget, cleaning)
                reference, grade = expected, judge
                if metric == "Loc" and locality != "ground_truth":
                    reference = reference_answer(tokenizer, prompt, unedited[prompt], budget, cleaning)
                    grade = SameTextJudge() if locality == "unedited_string" else judge
                (verdict,) = grade.judge([JudgeInput.of("", reference, answer)])
                index = counts.get(metric, 0)
                rows.setdefault(metric, []).append((case.case_id, index, verdict.score))
                answers.setdefault(metric, []).append((case.case_id, index, answer))
                counts[metric] = index + 1
    return rows, answers


#: (locality_tokens, answer_cleaning, locality, judge) -> what the grades of the stub's answers show, by hand
SETTINGS = {
    # configs/benchmarks/ruleedit_dmle.yaml (DMLE's run_new.py), judged as text: the cleaning takes the second "."
    ("expected", "dmle", "ground_truth", "same_text"): {"Gen": 1.0, "IP": 1.0},
    ("budget", "none", "ground_truth", "same_text"): {"Gen": 0.0, "IP": 0.0},  # ... and without it, no answer is
    # Loc on the first len(ground truth) tokens is the ground truth (where the answer's tokens split as the ground
    # truth's alone do); the whole answer says more
    ("expected", "none", "ground_truth", "exact_match"): {"Loc": "some"},
    ("budget", "none", "ground_truth", "exact_match"): {"Loc": 0.0},
    # DMLE's editors/editor.py: the very text of the unedited answer, which is in lower case on some prompts ...
    ("expected", "dmle", "unedited_string", "same_text"): {"Loc": "mixed"},
    ("budget", "none", "unedited", "exact_match"): {"Loc": 1.0},  # ... which exact match does not see
}


@pytest.mark.parametrize("family", ["toy-gpt2", "toy-llama"], ids=["no BOS", "BOS"])
@pytest.mark.parametrize("setting", list(SETTINGS), ids=lambda s: "-".join(s))
def test_each_point_gives_the_reference_value_and_each_alternative_its_own(family, setting):
    locality_tokens, cleaning, locality, judge_name = setting
    tokenizer = toy_tokenizer(family)
    data = RuleEdit(
        FIXTURE, task="all", case_grouping="dmle_staged", judge={judge_name: {}}, locality_tokens=locality_tokens,
        answer_cleaning=cleaning, locality=locality, limit=2,
    )  # fmt: skip
    data.setup()
    edited = {p: t for case in data.cases for p, t in says(case, edited=True).items()}
    unedited = {p: t for case in data.cases for p, t in says(case, edited=False).items()}
    config = ScoringConfig(sequences_per_forward=16)
    reference = CaseScorer(scripted(tokenizer, unedited), tokenizer, config, data.score_kinds).reference(data.cases)
    answers: dict = {}
    scores = CaseScorer(scripted(tokenizer, edited), tokenizer, config, data.score_kinds).score(
        data.cases, reference, answers=answers
    )
    judge = SameTextJudge() if judge_name == "same_text" else ExactMatchJudge()
    hand, hand_answers = by_hand(
        data, tokenizer, edited, unedited, locality_tokens, cleaning == "dmle", locality, judge
    )
    for metric in HEADLINE:
        assert answers[metric] == hand_answers[metric], metric  # the budget (point 1) shows in the answers
        assert scores[metric][1] == hand[metric], metric
    for metric, shown in SETTINGS[setting].items():
        values = {v for *_, v in hand[metric]}
        if shown == "some":
            assert 1.0 in values, metric
        else:
            assert values == ({0.0, 1.0} if shown == "mixed" else {shown}), metric


def test_batched_answers_equal_the_reference_loop_on_toy_rules():
    """Point 9: left-padded batches with the cache give every judged answer of the reference's loop (one prompt at a
    time, unpadded, ``use_cache=False``, greedy, float32), on the toy rule model's answers to two staged rules."""
    from lightning_edit.models.loading import ModelSource, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(ModelSource("builtin:models/toy-rule-gpt2"))
    data = RuleEdit("builtin:data/ruleedit", task="all", case_grouping="dmle_staged", limit=2, judge={"same_text": {}})
    data.setup()
    answers: dict = {}
    CaseScorer(model, tokenizer, ScoringConfig(sequences_per_forward=8), data.score_kinds).score(
        data.cases, {}, answers=answers
    )
    checked = 0
    for metric in ("Rel", "Gen", "IP", "RU"):
        for case_id, index, answer in answers[metric]:
            case = next(c for c in data.cases if c.case_id == case_id)
            pairs = [
                (p, e)
                for g in case.groups.values()
                if metric in g.metrics.values()
                for p, e in zip(g.prompts, g.expected)
            ]
            prompt, expected = pairs[index]
            ids, new = tokenizer.encode(prompt), []
            with torch.no_grad():
                for _ in range(3 * len(tokenizer.encode(expected, add_special_tokens=False))):
                    token = int(model(torch.tensor([ids + new]), use_cache=False).logits[0, -1].argmax())
                    if token == tokenizer.eos_token_id:
                        break
                    new.append(token)
            assert answer == tokenizer.decode(new, skip_special_tokens=True).strip(), (metric, prompt)
            checked += 1
    assert checked > 20


def dmle_record_means(case, metric: str, values: list[float], aggregation: str) -> list[float]:
    """One value per record of a staged case for ``metric`` (``values``: its prompts' scores, in group order), as
    DMLE's scripts average a record's prompts: ``run_new`` (run_new.py 202-259) the mean of each block's mean (Loc:
    neighbourhood, distracting; RU of the ins record: its formula and description prompts), ``cal_avg`` (cal_avg.py
    40-77) the mean of the record's prompts; ``pooled`` returns every prompt as its own "record" (prompts alike)."""
    records: dict[str, list[list[float]]] = {}
    for name, group in case.groups.items():
        if metric in group.metrics.values():
            records.setdefault(name.partition(".")[0], []).append(values[: len(group.prompts)])
            values = values[len(group.prompts) :]
    if aggregation == "run_new":
        return [sum(sum(b) / len(b) for b in blocks) / len(blocks) for blocks in records.values()]
    if aggregation == "cal_avg":
        return [sum(map(sum, blocks)) / sum(map(len, blocks)) for blocks in records.values()]
    return [v for blocks in records.values() for block in blocks for v in block]


def test_aggregation_gives_dmles_averages_over_records_and_blocks():
    """Point 6, through whole runs (NoEdit on the scripted stub, 2 staged rules, exact match): the stub answers the
    first prompt of every group right and the others wrong, so blocks of different sizes score differently; each
    metric's macro mean equals the mean over rules of DMLE's per-record means (``run_new``: of block means;
    ``cal_avg``: of the record's prompts, and ``Port`` pooling IP and RU), or of the rule's prompts pooled
    (``pooled``); the three aggregations give different numbers."""
    from lightning import Trainer

    from lightning_edit.editors import NoEdit
    from lightning_edit.judges.exact_match import normalize_answer
    from lightning_edit.models.loading import ModelSource

    macros: dict[str, dict[str, float]] = {}
    for aggregation in ("pooled", "run_new", "cal_avg"):
        data = RuleEdit(
            FIXTURE, task="all", case_grouping="dmle_staged", judge={"exact_match": {}}, aggregation=aggregation
        )
        data.setup()
        editor = NoEdit(ModelSource("builtin:models/toy-gpt2"))
        first = {}  # the stub says the expected answer after the first prompt of each group, "nothing" after others
        for case in data.cases:
            for group in case.groups.values():
                for k, (prompt, expected) in enumerate(zip(group.prompts, group.expected)):
                    first.setdefault(prompt, expected if k == 0 else "nothing")
        editor.model = scripted(editor.tokenizer, first)
        trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
        trainer.validate(editor, datamodule=data, verbose=False)
        macros[aggregation] = {}
        for metric in HEADLINE + ("Port",) * (aggregation == "cal_avg"):
            rule_means = []
            for case in data.cases:
                answers = editor.metrics.case_answers[metric][case.case_id]
                pairs = [e for g in case.groups.values() if metric in g.metrics.values() for e in g.expected]
                values = [float(normalize_answer(answers[i]) == normalize_answer(e)) for i, e in enumerate(pairs)]
                records = dmle_record_means(case, metric, values, aggregation)
                rule_means.append(sum(records) / len(records))
            macros[aggregation][metric] = sum(rule_means) / len(rule_means)
            expected = pytest.approx(macros[aggregation][metric])
            assert editor.metrics.results[metric]["macro"] == expected, (aggregation, metric)
    assert len({tuple(round(macros[a][m], 9) for m in HEADLINE) for a in macros}) == 3
    assert macros["cal_avg"]["Port"] not in (macros["cal_avg"]["IP"], macros["cal_avg"]["RU"])  # a pool of both

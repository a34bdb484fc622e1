"""ScEdit: both formats load (bad records left out and listed), ES / S-ES / S-NS / S-BO equal hand-computed values on a
stub with set logits, the text level's prompts and settings, and the Spearman matrix of its heatmap.

The text level run end to end, judged by a local model and by a test server: tests/judges/test_scedit_text_level.py.
"""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from lightning_edit.data import DataFormatError, ScEdit
from lightning_edit.data.scedit import scedit_cf_record, script_cloze
from lightning_edit.data.scedit.datamodule import SCRIPT_PROMPT, TEXT_METRICS
from lightning_edit.data.scedit.spearman import spearman_matrix
from lightning_edit.errors import ConfigError
from lightning_edit.evaluation import CaseScorer, ScoringConfig
from lightning_edit.judges.kind import Generation

# fmt: off
VOCAB = ["<pad>", "<unk>", "The", "tower", "is", "in", "How", "visit", "the", "museum", "Step", "1", "fly", "to",
         "go", "near", "Rome", "Paris", "mayor", "of", "Xton", "Bob", "Ann", "call", "meet", "Cat", "Dan", "?"]
# fmt: on
ID = {word: i for i, word in enumerate(VOCAB)}

# next-token probabilities by the last word (the rest of the mass is spread evenly over the other words)
UNEDITED = {
    "in": {"Paris": 0.6, "Rome": 0.2},
    "to": {"Paris": 0.5, "Rome": 0.1},
    "near": {"Paris": 0.5, "Rome": 0.1},
    "is": {"Ann": 0.7, "Bob": 0.1},
    "call": {"Ann": 0.4, "Bob": 0.3},
    "meet": {"Cat": 0.6},
    "visit": {"Dan": 0.3},
}
EDITED = {
    **UNEDITED,
    "in": {"Rome": 0.7, "Paris": 0.1},  # ES: the edit took
    "to": {"Rome": 0.4, "Paris": 0.3},  # S-ES: the script prefers the new object
    "near": {"Rome": 0.6, "Paris": 0.2},  # S-NS fails: the neighbour's script now prefers the new object too
    "is": {"Bob": 0.8, "Ann": 0.1},
    "call": {"Ann": 0.5, "Bob": 0.2},  # S-ES fails on ScEdit-T's script
    "meet": {"Cat": 0.45},  # S-BO: the neighbour's object lost 0.15
    "visit": {"Dan": 0.5},  # gained: no bleedover
}

CF_RECORD = {
    "case_id": 7,
    "prompt": "The tower is in",
    "subject": "The tower",
    "ground_truth": "Paris",
    "target_new": "Rome",
    "rephrase_prompts": ["How to visit the tower ? Step 1 fly to"],
    "neighborhood_prompts": ["How to visit the museum ? Step 1 go near"],
    "interrupt_step": [1],
    "property": "location",
    "generation_prompts": ["How to visit the tower ?"],
}
T_RECORD = {
    "case_id": 4,
    "subject": "Xton",
    "relation": "mayor",
    "prompt": "The mayor of Xton is",
    "old_update": "Ann",
    "new_update": "Bob",
    "question": ["How to visit the mayor of Xton ? Step 1 call"],
    "neighborhood": [
        {"object": "Cat", "prompt": "The mayor of the museum is", "question": "How to visit the museum ? Step 1 meet"},
        {"object": "Dan", "prompt": "The mayor of the tower is", "question": "How to visit the tower ? Step 1 visit"},
    ],
}


class BigramLM(torch.nn.Module):
    """Logits at each position: the row of a fixed table for the token at that position."""

    def __init__(self, rows):
        super().__init__()
        table = torch.full((len(VOCAB), len(VOCAB)), 1.0 / len(VOCAB), dtype=torch.double)
        for word, probs in rows.items():
            table[ID[word]] = (1.0 - sum(probs.values())) / (len(VOCAB) - len(probs))
            for target, p in probs.items():
                table[ID[word], ID[target]] = p
        self.register_buffer("table", table.log().float())

    @property
    def device(self):
        return self.table.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self.table[input_ids])


@pytest.fixture(scope="module")
def tokenizer():
    backend = Tokenizer(WordLevel(ID, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def load(tmp_path, records, variant):
    path = tmp_path / f"{variant}.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    data = ScEdit(str(path), variant=variant)
    data.setup()
    return data


def scores(tokenizer, data):
    reference = CaseScorer(BigramLM(UNEDITED), tokenizer, ScoringConfig(), data.score_kinds).reference(data.cases)
    edited = CaseScorer(BigramLM(EDITED), tokenizer, ScoringConfig(), data.score_kinds).score(data.cases, reference)
    return {metric: [value for *_, value in rows] for metric, (_, rows) in edited.items()}


def test_cf_token_level_metrics_equal_hand_computation(tmp_path, tokenizer):
    data = load(tmp_path, [CF_RECORD], "cf")
    assert set(data.declared_metrics()) == {"ES", "S-ES", "S-NS"}
    assert scores(tokenizer, data) == {"ES": [1.0], "S-ES": [1.0], "S-NS": [0.0]}


def test_t_token_level_metrics_equal_hand_computation(tmp_path, tokenizer):
    data = load(tmp_path, [T_RECORD], "t")
    assert data.declared_metrics() == {"ES": "prob", "S-ES": "prob", "S-BO": "bleedover"}
    result = scores(tokenizer, data)
    assert result["ES"] == [1.0] and result["S-ES"] == [0.0]  # after "call", Ann 0.5 still beats Bob 0.2
    assert result["S-BO"] == [pytest.approx(0.6 - 0.45, abs=1e-6), 0.0]  # the drop of Cat; Dan gained


def test_bleedover_is_the_drop_of_the_geometric_mean_probability(tmp_path, tokenizer):
    """S-BO uses P = exp(-mean per-token NLL): for a one-token object, the object's probability."""
    data = load(tmp_path, [T_RECORD], "t")
    unedited = BigramLM(UNEDITED)
    p_before = math.exp(float(unedited.table[ID["meet"], ID["Cat"]]))
    assert p_before == pytest.approx(0.6, abs=1e-6)
    assert scores(tokenizer, data)["S-BO"][0] == pytest.approx(p_before - 0.45, abs=1e-6)


def test_a_file_of_the_other_setting_is_an_error(tmp_path):
    with pytest.raises(DataFormatError, match=r"record 0: field 'new_update': a ScEdit-T record, but variant is 'cf'"):
        load(tmp_path, [T_RECORD], "cf")
    with pytest.raises(DataFormatError, match=r"field 'rephrase_prompts': a ScEdit-CF record, but variant is 't'"):
        load(tmp_path, [CF_RECORD], "t")


def changed(record: dict, change) -> dict:
    record = json.loads(json.dumps(record))
    change(record)
    return record


@pytest.mark.parametrize(
    ("variant", "change", "field"),
    [
        ("t", lambda r: r["neighborhood"][1].pop("object"), "neighborhood[1].object"),
        ("t", lambda r: r["neighborhood"].__setitem__(0, "text"), "neighborhood[0]"),
        ("t", lambda r: r.pop("question"), "question"),
        ("t", lambda r: r.__setitem__("new_update", ""), "new_update"),
        ("cf", lambda r: r.pop("neighborhood_prompts"), "neighborhood_prompts"),
        ("cf", lambda r: r["rephrase_prompts"].append(3), "rephrase_prompts[1]"),
        ("cf", lambda r: r.__setitem__("prompt", "The museum is in"), "prompt"),
        ("cf", lambda r: r.__setitem__("case_id", "8"), "case_id"),
    ],
)
def test_bad_records_are_listed_by_file_record_and_field_and_the_rest_load(tmp_path, variant, change, field):
    good = CF_RECORD if variant == "cf" else T_RECORD
    later = good | {"case_id": good["case_id"] + 1}
    data = load(tmp_path, [good, changed(good | {"case_id": 99}, change), later], variant)
    assert [case.case_id for case in data.cases] == [good["case_id"], good["case_id"] + 1]
    [skipped] = data.skipped
    assert skipped["record"] == 1 and "file" not in skipped  # the benchmark's own file: data.path
    assert skipped["reason"].startswith(f"{tmp_path / f'{variant}.json'}: record 1: field {field!r}: ")


@pytest.fixture
def judge_key(monkeypatch, tmp_path):
    """The default judge's key variable, set (its endpoint is never asked here): a judge without it stops the load;
    its verdict cache, which the load opens, in the test's folder."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-used")
    monkeypatch.setenv("LIGHTNING_EDIT_CACHE", str(tmp_path / "cache"))


def test_text_level_needs_generation_prompts_or_lists_the_record(tmp_path, judge_key):
    path = tmp_path / "cf.json"
    path.write_text(json.dumps([CF_RECORD, changed(CF_RECORD | {"case_id": 8}, lambda r: r.pop("generation_prompts"))]))
    data = ScEdit(str(path), text_level=True)
    data.setup()
    assert len(data.cases) == 1 and "field 'generation_prompts': missing" in data.skipped[0]["reason"]


def test_text_level_prompts_the_paper_prompt_and_hands_the_judge_the_fact(tmp_path, judge_key):
    (tmp_path / "cf.json").write_text(json.dumps([CF_RECORD]))
    data = ScEdit(str(tmp_path / "cf.json"), text_level=True, generation=True)
    data.setup()
    assert list(data.declared_metrics()) == ["ES", "S-ES", "S-NS", "GE", "Exec", "Coh", "Cons", "Comp"]
    group = data.cases[0].groups["text"]
    assert group.prompts == (
        "Provide a step-by-step guide in Script form for answering the question: How to visit the tower ?.\n"
        "The Script should consist of brief events starting from Step 1, with a maximum of 9 steps.\n"
        "Each step should be a single concise action statement in one line less than 8 words.\n"
        "Do not include any explanations, details, notes, or further instructions.\n"
        "The script should consist only of the steps, and nothing else.",
    )
    assert group.prompts[0] == SCRIPT_PROMPT.format(question=CF_RECORD["generation_prompts"][0])
    assert group.metrics == {template: metric for metric, template in TEXT_METRICS.items()}
    assert group.details == (
        {
            "question": "How to visit the tower ?",
            "context": {"prompt": "The tower is in", "target_true": "Paris", "target_new": "Rome"},
        },
    )
    kind = data.score_kinds["scedit_coherence"]  # the benchmark's own, sampled as the released code, 9 steps at most
    assert kind.generation == Generation(200, do_sample=True, top_k=5, stop=("Step 10",))
    judge = kind.judge  # the paper's by default (no request is made here)
    assert (judge.model, judge.template, judge.scale) == ("gpt-4o-2024-11-20", "scedit_coherence", "likert7")


def test_text_level_settings_are_checked():
    with pytest.raises(ConfigError, match="ScEdit-T has none"):
        ScEdit("x.json", variant="t", text_level=True)
    with pytest.raises(ConfigError, match="leave the template out"):
        ScEdit("x.json", text_level=True, judge={"local_lm": {"path": "m", "template": "rule_edit"}})
    with pytest.raises(ConfigError, match="one judge and its arguments"):
        ScEdit("x.json", text_level=True, judge={"class_path": "local_lm", "init_args": {"path": "m"}})
    with pytest.raises(ConfigError, match="write {question} where the question goes"):
        ScEdit("x.json", text_level=True, script_prompt="Answer: {}")
    paper = {"openai_chat": {"model": "gpt-4o-2024-11-20"}}  # the paper's judge (appendix B.2)
    assert ScEdit("x.json", text_level=True).judge == paper


def test_spearman_matrix_over_the_cases_both_metrics_scored():
    case_scores = {
        "ES": {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0},
        "Coh": {0: 4.0, 1: 2.0, 2: 3.0, 3: 2.0},
        "Comp": {0: 5.0, 2: 1.0},  # cases 1 and 3: every verdict missing
    }
    matrix = spearman_matrix(case_scores, ["ES", "Coh", "Comp"])
    # ranks ES (3.5, 1.5, 3.5, 1.5), Coh (4, 1.5, 3, 1.5): deviations (1, -1, 1, -1) and (1.5, -1, 0.5, -1)
    rho, n = matrix[0][1]
    assert n == 4 and rho == pytest.approx(4 / math.sqrt(4 * 4.5)) and matrix[1][0] == matrix[0][1]
    assert matrix[1][1] == (1.0, 4)
    rho, n = matrix[0][2]
    assert n == 2 and math.isnan(rho)  # ES is 1 on both cases Comp scored: undefined
    assert matrix[1][2] == (pytest.approx(1.0), 2)  # Coh 4 > 3 and Comp 5 > 1


def test_the_heatmap_is_drawn_with_the_text_level_only(tmp_path):
    case_scores = {"ES": {0: 1.0, 1: 0.0, 2: 1.0}, "Coh": {0: 4.0, 1: 2.0, 2: 3.0}}
    figure = ScEdit("x.json", text_level=True).figures({}, case_scores)["scedit_spearman"]
    assert [tick.get_text() for tick in figure.axes[0].get_xticklabels()] == ["ES", "Coh"]
    assert ScEdit("x.json").figures({}, case_scores) == {}


def test_toy_scedit_loads_with_generation():
    data = ScEdit("builtin:data/toy/scedit_cf.json", generation=True)
    data.setup()
    assert len(data.cases) == 100 and "GE" in data.declared_metrics()
    case = data.cases[0]
    assert all(prompt.startswith("How to") for prompt in case.groups["script"].prompts)
    assert case.groups["script_neighborhood"].expected[0] == case.requests[0].target_true


def test_script_cloze_cuts_before_the_first_mention_of_the_old_object():
    script = "Step 1: Buy a ticket to Paris. Step 2: Fly to Paris. Step 3: Visit the tower."
    assert script_cloze("How to visit the tower?", script, "Paris") == "How to visit the tower? Step 1: Buy a ticket to"
    with pytest.raises(ValueError, match="does not mention 'Rome'"):
        script_cloze("Q?", script, "Rome")
    record = scedit_cf_record(0, "The tower is in", "The tower", "Paris", "Rome", [("Q?", script)], [])
    assert record["rephrase_prompts"] == ["Q? Step 1: Buy a ticket to"] and record["generation_prompts"] == ["Q?"]

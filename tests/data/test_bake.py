"""BAKE: the DataModule, its metrics under both conventions with and without the pre-edit filter, bad input.

The hand-computed test runs the real validate loop over the 5-case fixture ``bake_qa_5.json`` with a stub language
model whose next-token distribution depends only on the last word (a bigram table set by hand), before and after
a stand-in "edit" that swaps the table. Every answer is one word, so each score reads off one row of the tables.
"""

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning import Trainer
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

import lightning_edit.editors.base as editor_base
from lightning_edit.cli import build_cli
from lightning_edit.data import BAKE, DataFormatError
from lightning_edit.editors import EditorModule
from lightning_edit.models.loading import ModelSource

FIXTURE = Path(__file__).parents[1] / "fixtures" / "data" / "bake_qa_5.json"
WORDS = sorted({w for r in json.loads(FIXTURE.read_text()) for w in json.dumps(r).replace('"', " ").split()})
VOCAB = ["<pad>", "<unk>", "Z", *WORDS]
ID = {word: i for i, word in enumerate(VOCAB)}

# Next-word probabilities by last word; mass not listed is spread evenly over the other words (< 0.02 each).
# Rows: r = rewrite, p/pp = paraphrase, n = neighbourhood, q = reverse QA, j = reverse judgment.
UNEDITED = {
    "n0": {"T0": 0.6},
    "q0": {"R0": 0.4, "S0": 0.1},
    "j0?": {"No": 0.6, "Yes": 0.3},  # fmt: skip
    "n1": {"T1": 0.5},
    "q1": {"S1": 0.5, "R1": 0.2},
    "j1?": {"No": 0.5, "Yes": 0.4},  # fmt: skip
    "n2": {"T2": 0.4, "Z": 0.1},
    "q2": {"R2": 0.5, "S2": 0.2},
    "j2?": {"Yes": 0.6, "No": 0.3},  # fmt: skip
    "n3": {"T3": 0.5},
    "q3": {"R3": 0.5},
    "j3?": {"No": 0.5, "Yes": 0.2},  # fmt: skip
    "n4": {"T4": 0.5},
    "q4": {"R4": 0.3, "S4": 0.3},
    "j4?": {"Yes": 0.45, "No": 0.45},  # fmt: skip
}
EDITED = {
    "r0": {"N0": 0.6, "T0": 0.2},
    "p0": {"Z": 0.4, "N0": 0.3, "T0": 0.2},
    "pp0": {"T0": 0.5, "N0": 0.2},  # fmt: skip
    "n0": {"T0": 0.5, "N0": 0.3},
    "q0": {"R0": 0.3, "S0": 0.2},
    "j0?": {"Yes": 0.5, "No": 0.4},  # fmt: skip
    "r1": {"T1": 0.5, "N1": 0.3},
    "p1": {"N1": 0.5, "T1": 0.1},  # fmt: skip
    "n1": {"N1": 0.5, "T1": 0.3},
    "q1": {"S1": 0.6},
    "j1?": {"No": 0.5, "Yes": 0.4},  # fmt: skip
    "r2": {"N2": 0.7},
    "p2": {"N2": 0.6},  # fmt: skip
    "n2": {"Z": 0.45, "T2": 0.3, "N2": 0.1},
    "q2": {"S2": 0.5, "R2": 0.3},
    "j2?": {"Yes": 0.7},  # fmt: skip
    "r3": {"N3": 0.5, "T3": 0.3},
    "p3": {"N3": 0.4, "T3": 0.35},  # fmt: skip
    "n3": {"T3": 0.5},
    "q3": {"R3": 0.4, "S3": 0.35},
    "j3?": {"Yes": 0.45, "No": 0.4},  # fmt: skip
    "r4": {"N4": 0.6},
    "p4": {"T4": 0.4, "N4": 0.35},  # fmt: skip
    "n4": {"N4": 0.45, "T4": 0.4},
    "q4": {"S4": 0.4, "R4": 0.3},
    "j4?": {"No": 0.5, "Yes": 0.3},  # fmt: skip
}


def probability(rows: dict, last: str, word: str) -> float:
    listed = rows.get(last, {})
    return listed.get(word, (1.0 - sum(listed.values())) / (len(VOCAB) - len(listed)))


def table(rows: dict) -> torch.Tensor:
    return torch.tensor([[probability(rows, last, word) for word in VOCAB] for last in VOCAB]).log()


class BigramLM(torch.nn.Module):
    """Stub causal LM: the logits at a position are the table row of the word at that position."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(table(UNEDITED), requires_grad=False)

    @property
    def device(self) -> torch.device:
        return self.table.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self.table[input_ids])


class TableEdit(EditorModule):
    """Stand-in editor: an edit replaces the table by the EDITED one (restored by the protocol)."""

    def edited_parameters(self, requests):
        return ["table"]

    def apply_edits(self, requests):
        self.model.table.data.copy_(table(EDITED))


@pytest.fixture
def stub_editor(monkeypatch):
    backend = Tokenizer(WordLevel(ID, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")
    monkeypatch.setattr(editor_base, "load_model_and_tokenizer", lambda source: (BigramLM(), tokenizer))
    return TableEdit(ModelSource("stub"))


def validate(editor: EditorModule, **options) -> dict:
    data = BAKE(str(FIXTURE), batch_size=2, **options)
    Trainer(accelerator="cpu", logger=False, enable_progress_bar=False).validate(editor, datamodule=data, verbose=False)
    return editor.metrics.results


def harmonic(*values: float) -> float:
    return len(values) / sum(1 / v for v in values)


# Per-case scores worked out from the tables (cases 10..14 in order); None = left out by the filter.
# probability: 1 iff P(expected) > P(alternative) after editing; token accuracy: 1 iff expected is the argmax.
HAND = {
    "probability": {
        "ES": [1, 0, 1, 1, 1],  # r1: T1 0.5 > N1 0.3
        "GS": [[1, 0], [1], [1], [1], [0]],  # p0: N0 0.3 > T0 0.2; pp0 and p4 prefer the true answer
        "LS": [1, 0, 1, 1, 0],  # n1 and n4: N above T after editing
        "RQS": [0, None, 1, 0, 1],  # q1: unedited prefers S1 (new), filtered; q4: a tie is kept
        "RJS": [1, 0, None, 1, 0],  # j2?: unedited prefers Yes, filtered; j4?: a tie is kept
        "RQS_unfiltered": [0, 1, 1, 0, 1],
        "RJS_unfiltered": [1, 0, 1, 1, 0],
    },
    "token_accuracy": {
        "ES": [1, 0, 1, 1, 1],
        "GS": [[0, 0], [1], [1], [1], [0]],  # p0: the argmax is Z, not N0
        "LS": [1, 0, 0, 1, 0],  # argmax agreement with the unedited model: n2 moves from T2 to Z
        "RQS": [0, None, 1, 0, 1],
        "RJS": [1, 0, None, 1, 0],
        "RQS_unfiltered": [0, 1, 1, 0, 1],
        "RJS_unfiltered": [1, 0, 1, 1, 0],
    },
}


def means(per_case: list) -> tuple[float, float]:
    """(macro, micro) of per-case scores (lists for several prompts, None for a filtered case)."""
    kept = [c if isinstance(c, list) else [c] for c in per_case if c is not None]
    macro = sum(sum(c) / len(c) for c in kept) / len(kept)
    micro = sum(sum(c) for c in kept) / sum(len(c) for c in kept)
    return macro, micro


@pytest.mark.parametrize("convention", ["probability", "token_accuracy"])
@pytest.mark.parametrize("pre_edit_filter", [True, False])
def test_metrics_equal_hand_computation(stub_editor, convention, pre_edit_filter):
    results = validate(stub_editor, convention=convention, pre_edit_filter=pre_edit_filter)
    hand = HAND[convention]
    suffix = "" if pre_edit_filter else "_unfiltered"
    expected = {name: means(hand[name]) for name in ("ES", "GS", "LS")}
    expected |= {name: means(hand[name + suffix]) for name in ("RQS", "RJS")}
    for name, (macro, micro) in expected.items():
        assert results[name]["macro"] == pytest.approx(macro), name
        assert results[name]["micro"] == pytest.approx(micro), name
    for aggregation in ("macro", "micro"):
        k = 0 if aggregation == "macro" else 1
        rs = (expected["RQS"][k] + expected["RJS"][k]) / 2
        assert results["RS"][aggregation] == pytest.approx(rs)
        s = harmonic(expected["ES"][k], expected["GS"][k], expected["LS"][k], rs)
        assert results["S"][aggregation] == pytest.approx(s)
    assert results["S"]["kind"] == "derived"
    if pre_edit_filter:  # one reverse-QA and one judgment prompt left out, reported
        assert results["reverse_qa_filtered"]["micro"] == pytest.approx(1 / 5)
        assert results["reverse_judge_filtered"]["micro"] == pytest.approx(1 / 5)
        assert results["RQS"]["n_cases"] == results["RJS"]["n_cases"] == 4
    else:
        assert "reverse_qa_filtered" not in results


def test_logprob_analysis_before_and_after(stub_editor):
    results = validate(stub_editor)
    for answer, key in (("S", "new"), ("R", "true")):
        for rows, suffix in ((UNEDITED, "_pre"), (EDITED, "")):
            hand = [math.log(probability(rows, f"q{i}", f"{answer}{i}")) for i in range(5)]
            assert results[f"RQ_logprob_{key}{suffix}"]["macro"] == pytest.approx(sum(hand) / 5, rel=1e-5)
    figure = BAKE(str(FIXTURE)).figures(results, {})["bake_logprob"]
    heights = [bar.get_height() for bar in figure.axes[0].patches]
    assert heights == pytest.approx(
        [
            results[n]["macro"]
            for n in ("RQ_logprob_true_pre", "RQ_logprob_new_pre", "RQ_logprob_true", "RQ_logprob_new")
        ]
    )


def test_bake_j_ignores_reverse_qa_with_a_note_and_scores_judgment_only(stub_editor, caplog):
    with caplog.at_level(logging.WARNING):
        results = validate(stub_editor, variant="judge")
    assert "5 of 5 records carry reverse_qa" in caplog.text
    assert "RQS" not in results and "RQ_logprob_new" not in results
    assert results["RS"]["macro"] == results["RJS"]["macro"] == pytest.approx(means(HAND["probability"]["RJS"])[0])


def cases_of(tmp_path, records, **options):
    path = tmp_path / "bake.json"
    path.write_text(json.dumps(records))
    data = BAKE(str(path), **options)
    data.setup()
    return data.cases


def test_record_without_reverse_judge_is_an_error_naming_it(tmp_path):
    records = json.loads(FIXTURE.read_text())
    del records[3]["reverse_judge"]
    for variant in ("qa", "judge"):
        with pytest.raises(DataFormatError, match=r"record 3: field 'reverse_judge.prompt': missing"):
            cases_of(tmp_path, records, variant=variant)


def test_bake_qa_record_without_reverse_qa_is_an_error(tmp_path):
    records = json.loads(FIXTURE.read_text())
    del records[1]["reverse_qa"]["target_true"]
    with pytest.raises(DataFormatError, match=r"record 1: field 'reverse_qa.target_true': missing"):
        cases_of(tmp_path, records)


def test_judgment_templates_build_the_statement_as_the_paper_code(tmp_path):
    records = json.loads(FIXTURE.read_text())[:1]
    qa = cases_of(tmp_path, records, judge_template="gpt-j")[0].groups["reverse_judge"]
    assert qa.prompts == ("N0 q0 S0, is the information described in this sentence correct?",)
    assert (qa.expected[0], qa.alternatives[0]) == ("yes, it is true", "no, it is false")
    judge = cases_of(tmp_path, records, variant="judge", judge_template="Is it so that {}? Answer:")
    assert judge[0].groups["reverse_judge"].prompts == ("Is it so that N0 is S0 j0? Answer:",)
    record = cases_of(tmp_path, records, judge_candidates=("True", "False"))[0].groups["reverse_judge"]
    assert (record.prompts[0], record.expected[0], record.alternatives[0]) == ("Whether N0 is S0 j0?", "True", "False")
    with pytest.raises(ValueError, match="neither a family"):
        BAKE(str(FIXTURE), judge_template="llama-9")


def test_toy_bake_file_loads(tmp_path):
    data = BAKE("builtin:data/toy/bake_qa.json")
    data.setup()
    assert len(data.cases) == 100
    assert {"rewrite", "paraphrase", "neighborhood", "reverse_qa", "reverse_judge"} <= set(data.cases[0].groups)


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_toy_reversal_curse(tmp_path):
    """On toy BAKE, ROME edits the forward direction only; in-context editing reaches the reverse question."""

    def validate_cli(name: str, *args: str) -> dict:
        common = [f"--config={CONFIGS / 'benchmarks/bake.yaml'}", "--data.limit=12", "--trainer.logger=false"]
        common += [f"--trainer.default_root_dir={tmp_path / name}", "--trainer.enable_progress_bar=false"]
        return build_cli(["validate", *args, *common]).model.metrics.results

    rome = validate_cli(
        "rome",
        f"--config={CONFIGS / 'methods/rome.yaml'}",
        f"--config={CONFIGS / 'models/toy-gpt2.yaml'}",
        f"--model.stats.cache_dir={tmp_path / 'stats'}",
    )
    ike = validate_cli(
        "ike",
        f"--config={CONFIGS / 'methods/ike.yaml'}",
        "--model.lm.path=builtin:models/toy-gpt2",
        "--model.in_context.pool=builtin:data/toy/counterfact.json",
        "--model.in_context.retriever=lexical",
        "--model.in_context.demonstrations=4",  # as benchmarks/toy_bake.py
    )
    # every edit succeeds forward (docs/results/toy-benchmarks.md: ES 1.00 on the 100 toy BAKE edits), none reaches
    # the reverse question
    assert rome["ES"]["macro"] == 1.0 and rome["RQS"]["macro"] == 0.0, rome
    assert ike["RQS"]["macro"] >= 0.3, ike
    assert rome["RQ_logprob_new"]["macro"] == pytest.approx(rome["RQ_logprob_new_pre"]["macro"], abs=0.1)
    assert (tmp_path / "ike" / "bake_logprob.png").stat().st_size > 0  # the log directory, as results.json

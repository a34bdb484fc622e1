"""CounterFact (Meng et al., 2022, "Locating and Editing Factual Associations in GPT", ROME).

Each record asks to replace a true fact (``target_true``) by a counterfactual one (``target_new``). Success is a
probability comparison (mean per-token NLL of the new vs the true object): ES on the rewrite prompt, PS on
paraphrases, NS on neighbouring subjects (where the true object must stay preferred). Two file formats exist and
are detected per file:

- ROME format (``counterfact.json``, MEMIT's ``multi_counterfact.json``): a nested ``requested_rewrite`` with a
  ``{}`` template, lists of paraphrase, neighbourhood, attribute and generation prompts, and answers given as
  ``{"str": ..., "id": ...}``;
- the flat MEND/EasyEdit split (``counterfact-{train,val,edit}.json``): one ``prompt``, ``rephrase_prompt`` and
  ``locality_prompt`` per record, answers as plain strings. It has no generation prompts.
"""

from __future__ import annotations

from typing import Any

from lightning_edit.cases import EditCase
from lightning_edit.data.answers import AnswerContext, GeneratedAnswers
from lightning_edit.data.base import EditDataModule
from lightning_edit.data.counterfact_records import counterfact_cases, counterfact_groups
from lightning_edit.data.declared import DeclaredGroup
from lightning_edit.data.sources import DataSource, SourceFile
from lightning_edit.scoring.kinds import ScoreKind

#: ROME's published file; sha256 and size (45,108,470 B) recorded in the Git-LFS pointer of the copy
#: scalable-model-editing/rebuilding-rome:data/counterfact.json (commit 01d0c9f)
COUNTERFACT = DataSource(
    "counterfact",
    (
        SourceFile(
            "counterfact.json",
            "https://rome.baulab.info/data/dsets/counterfact.json",
            sha256="d017056125178a13728594e66a801357a8db9ed7973a7425554bb4271de9fc6f",
        ),
    ),
    "not stated for the data (the ROME code, github.com/kmeng01/rome, is MIT)",
    "https://rome.baulab.info/",
)


class CounterFact(EditDataModule):
    """CounterFact edits, from the ROME-format file or the flat MEND/EasyEdit split (detected per file).

    Groups: ``rewrite`` (ES, rewrite_acc), ``paraphrase`` (PS, rephrase_acc), ``neighborhood`` (NS, locality_acc);
    in the ROME format also ``attribute`` (unscored, kept for generation consistency) and, with ``generation``,
    ``generation`` (GE).

    Args:
        path: the CounterFact JSON file, in the ROME format or the flat split format (or ``counterfact``: ROME's
            published file, downloaded once).
        generation: also score the ``generation_prompts`` by n-gram entropy (GE); ROME format only.
        generated_answers: also generate an answer to the rewrite, paraphrase and neighbourhood prompts and grade it
            (QAEdit: ES_gen, ES_gen_contains, PS_gen, PS_gen_contains, NS_gen; :mod:`lightning_edit.data.answers`),
            with the prompt alone (``bare``), in a QA instruction (``qa_inst``) or as a user turn of the tokenizer's
            chat template (``chat``); None: teacher forcing only.
        answer_judge: also grade those answers (edit and paraphrase prompts) by this judge, given as ``{judge: its
            arguments}`` (e.g. ``openai_chat`` with ``template: answer_correct``): ``<metric>_gen_judged``.
        **kwargs: ``limit``, ``offset``, ``sample_seed``, ``batch_size`` (:class:`EditDataModule`).
    """

    sources = (COUNTERFACT,)

    def __init__(
        self,
        path: str,
        generation: bool = False,
        generated_answers: AnswerContext | None = None,
        answer_judge: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        self.generation = generation
        self.answers = GeneratedAnswers(generated_answers, answer_judge)

    def own_kinds(self) -> list[ScoreKind]:
        """The kinds that grade its generated answers (none without ``generated_answers``)."""
        return self.answers.score_kinds()

    def load_cases(self) -> list[EditCase]:
        return counterfact_cases(self.path, self.generation, self.answers)

    def declared_groups(self) -> dict[str, DeclaredGroup]:
        return counterfact_groups(self.answers, self.generation)

"""MEND training edits of the toy world's facts (:class:`ToyEditTraining`), none of a held-out benchmark's.

    lightning-edit fit --config configs/toy/mend.yaml   # --data ToyEditTraining, on the toy GPT-2

The edits are ROME-format CounterFact records drawn by :func:`~lightning_edit.toy.benchmark_records.counterfact_records`
and read with CounterFact's own checks, so training and locality prompts are those of
:class:`~lightning_edit.data.edit_training.EditTraining` with ``source="counterfact"``.
"""

from __future__ import annotations

from dataclasses import replace

from lightning_edit.cases import EditCase
from lightning_edit.data.counterfact_records import rome_case
from lightning_edit.data.edit_training import EditTraining
from lightning_edit.data.records import RecordReader, read_records
from lightning_edit.errors import DataFormatError
from lightning_edit.toy.benchmark_records import counterfact_records
from lightning_edit.toy.world import load_toy_world


class ToyEditTraining(EditTraining):
    """Batches of training edits of the toy world's facts for MEND, disjoint from the held-out evaluation edits.

    Args:
        world_path: the toy world (``world.json``) whose facts are edited; its facts must be those the model knows.
        heldout_paths: ROME-format benchmark files whose (subject, relation) pairs are never trained on (the
            held-out evaluation edits); None: ``builtin:data/toy/counterfact.json``.
        variants: edits drawn per fact, each with its own counterfactual target, template and neighbours (more
            distinct training edits from one small world).
        val_size: facts held out for validation (the last ones of the first draw; no draw of them is trained on).
        limit: keep only the first ``limit`` training edits (smoke runs).
        batch_size: edits per training step (MEND: 1).
        val_batch_size: edit cases per validation step.
        n_locality: neighbourhood prompts per edit for the locality loss.
        seed: seeds the epoch orders and the choice of locality prompts.
    """

    def __init__(
        self,
        world_path: str = "builtin:data/toy/world.json",
        heldout_paths: list[str] | None = None,
        variants: int = 1,
        val_size: int = 50,
        limit: int | None = None,
        batch_size: int = 1,
        val_batch_size: int = 8,
        n_locality: int = 1,
        seed: int = 0,
    ):
        super().__init__(
            "counterfact",
            val_size=val_size,
            limit=limit,
            batch_size=batch_size,
            val_batch_size=val_batch_size,
            n_locality=n_locality,
            seed=seed,
        )
        self.world_path = world_path
        self.heldout_paths = ["builtin:data/toy/counterfact.json"] if heldout_paths is None else heldout_paths
        self.variants = variants

    def load_splits(self) -> tuple[list[EditCase], list[EditCase]]:
        """(training, validation) edits of the world's facts, none of a held-out (subject, relation) pair.

        Validation takes the last ``val_size`` facts of the first draw; no draw of those facts is trained on.
        """
        world = load_toy_world(self.world_path)
        heldout = set()
        for path in self.heldout_paths:
            for index, record in enumerate(read_records(path)):
                reader = RecordReader(path, index, record)
                heldout.add(
                    (reader.string("requested_rewrite.subject"), reader.string("requested_rewrite.relation_id"))
                )
        draws = []
        for variant in range(self.variants):
            records = counterfact_records(replace(world, seed=world.seed + variant), len(world.facts))
            draws.append([record for record in records if _fact(record) not in heldout])
        if len(draws[0]) <= self.val_size:
            raise DataFormatError(self.world_path, f"{len(draws[0])} facts to edit, val_size {self.val_size}")
        val = draws[0][-self.val_size :]
        validated = {_fact(record) for record in val}
        train = [record for draw in draws for record in draw if _fact(record) not in validated]
        records = [{**record, "case_id": index} for index, record in enumerate(train + val)]
        name = f"toy world {self.world_path}"
        cases = [rome_case(RecordReader(name, index, record)) for index, record in enumerate(records)]
        return cases[: len(train)], cases[len(train) :]


def _fact(record: dict) -> tuple[str, str]:
    """(subject, relation) of a ROME-format toy record."""
    return record["requested_rewrite"]["subject"], record["requested_rewrite"]["relation_id"]

"""Held-out toy BAKE-Q&J edits, the development set the toy presets' BAKE values were chosen on (not a test).

    python benchmarks/toy_heldout.py /tmp/toy_dev            # writes /tmp/toy_dev/bake_dev.json (509 edits)
    lightning-edit validate --config configs/methods/rome.yaml --config configs/models/toy-llama.yaml \\
        --config configs/benchmarks/bake.yaml --data.path /tmp/toy_dev/bake_dev.json

Edits of the shipped toy world drawn as ``builtin:data/toy/bake_qa.json`` was (``ToyWorld.bake_records``) but with
the seeds ``world.seed + k``, k = 1 ... 59, keeping the first edit of each (subject, relation, new object) and none
of a (subject, relation) pair of the shipped BAKE or CounterFact files, so no shipped test edit is tuned on.
"""

import argparse
import json
from dataclasses import replace
from pathlib import Path

from lightning_edit.data.base import read_records
from lightning_edit.data.edit_training import load_toy_world

SHIPPED = ("builtin:data/toy/bake_qa.json", "builtin:data/toy/counterfact.json")


def pair(record: dict) -> tuple[str, str]:
    """(subject, relation) of a ROME-format record."""
    return record["requested_rewrite"]["subject"], record["requested_rewrite"]["relation_id"]


def heldout_bake(draws: int = 59) -> list[dict]:
    world = load_toy_world("builtin:data/toy/world.json")
    shipped = {pair(record) for path in SHIPPED for record in read_records(path)}
    records, seen = [], set()
    for k in range(1, draws + 1):
        for record in replace(world, seed=world.seed + k).bake_records(len(world.facts)):
            edit = (*pair(record), record["requested_rewrite"]["target_new"]["str"])
            if pair(record) not in shipped and edit not in seen:
                seen.add(edit)
                records.append({**record, "case_id": len(records)})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the directory to write bake_dev.json to")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = heldout_bake()
    (args.out / "bake_dev.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    print(f"{len(records)} held-out toy BAKE-Q&J edits -> {args.out / 'bake_dev.json'}")


if __name__ == "__main__":
    main()

"""What an editor's validate or test run reports, written by process 0 at the end of the run.

Into the trainer's log directory: ``results.json`` (with ``seconds``, the time from the start of the evaluation loop
to its end on process 0) and ``results.md`` (:mod:`lightning_edit.results`),
``cases.jsonl`` (one line per edit case: its requests and its mean score on every metric) and the plots (PNG): the
benchmark's own (:meth:`~lightning_edit.data.base.EditDataModule.figures`) and, for a sequential run with
``eval_at``, ``retention`` (each metric against the number of edits applied). To every logger of the trainer: the
resolved config, the per-case table (``log_table``) and the plots (``log_image``), where the logger takes them (W&B
does); the scalar metrics are logged by the editor itself (``val/<metric>_<macro|micro>``).

It runs inside the processes Lightning launches, so the report is the same with any number of devices and any
strategy (``ddp_spawn`` included, whose main process never sees the results). A run in which every request to a judge
failed writes its report, then stops with :class:`~lightning_edit.judges.base.JudgeFailedError` (process 0 alone, once
every file is written: a launcher that stops every process when one fails loses nothing).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from lightning_edit.cases import EditCase
from lightning_edit.data.base import EditDataModule
from lightning_edit.editors.base import EditorModule
from lightning_edit.editors.run_metrics import CaseAnswers
from lightning_edit.editors.stream_health import stream_summary
from lightning_edit.judges.base import JudgeFailedError
from lightning_edit.judges.kind import judge_report, reset_judge_stats
from lightning_edit.redaction import redact
from lightning_edit.results import json_safe, markdown_table, write_results
from lightning_edit.run_folder import run_folder


def case_rows(
    cases: list[EditCase], case_scores: dict[str, dict[int, float]], case_answers: CaseAnswers | None = None
) -> list[dict[str, Any]]:
    """One row per scored case: id, source, requests, ``{metric: mean score of the case's prompts}`` and, for the
    metrics of generated answers, ``answers``: ``{metric: [answer to each prompt of its group, in order]}`` (None
    for a prompt not scored)."""
    rows = []
    for case in cases:
        scores = {name: values[case.case_id] for name, values in case_scores.items() if case.case_id in values}
        if scores:
            requests = [
                {
                    "prompt": r.filled_prompt,
                    "subject": r.subject,
                    "target_new": r.target_new,
                    "target_true": r.target_true,
                }
                for r in case.requests
            ]
            row = {"case_id": case.case_id, "source": case.source, "requests": requests, "scores": scores}
            answers = {
                name: [texts.get(index) for index in range(max(texts) + 1)]
                for name, by_case in (case_answers or {}).items()
                if (texts := by_case.get(case.case_id))
            }
            rows.append(row | ({"answers": answers} if answers else {}))
    return rows


def answer_rows(cases: list[EditCase], case_answers: CaseAnswers) -> list[list[Any]]:
    """``[case id, metric, prompt, answer]`` for every generated answer, for a W&B table."""
    prompts = {}
    for case in cases:
        for group in case.groups.values():
            for metric in group.metrics.values():
                prompts[case.case_id, metric] = group.prompts
    rows = []
    for name, by_case in case_answers.items():
        metric = name.partition("@")[0].removesuffix("_pre")
        for case_id, texts in sorted(by_case.items()):
            asked = prompts.get((case_id, metric), ())
            rows += [[case_id, name, asked[i] if i < len(asked) else None, text] for i, text in sorted(texts.items())]
    return rows


def retention_figure(results: dict[str, dict[str, Any]], n_edits: int, stream: list[dict[str, Any]]):
    """Each metric's macro mean against the number of edits applied (``<metric>@<n>`` and the final value); beside
    it, when the stream recorded them, the held-out perplexity (edited, and unedited dashed) and the total change of
    the edited weights, ‖ΔW‖ over all of them (docs/metrics.md#stream-health)."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for name, result in results.items():
        base, _, n = name.rpartition("@")
        if base and n.isdigit() and base in results:
            curves.setdefault(base, []).append((int(n), result["macro"]))
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    health = [(record["edits"], stream_summary(record)) for record in stream]
    panels = [key for key in ("heldout_perplexity", "weight_change") if any(key in summary for _, summary in health)]
    figure, axes = plt.subplots(1, 1 + len(panels), figsize=(5 * (1 + len(panels)), 3.5), squeeze=False)
    scores = axes[0][0]
    for base, points in curves.items():
        points = sorted(points + [(n_edits, results[base]["macro"])])
        scores.plot([n for n, _ in points], [v for _, v in points], marker="o", label=base)
    scores.set_xlabel("edits applied")
    scores.set_ylabel("macro mean")
    scores.set_title("Sequential editing: scores of the edits so far")
    scores.legend(fontsize="small")
    labels = {"heldout_perplexity": "held-out perplexity", "weight_change": "‖ΔW‖ of the edited weights"}
    for panel, key in zip(axes[0][1:], panels):
        points = [(n, summary[key]) for n, summary in health if key in summary]
        panel.plot([n for n, _ in points], [v for _, v in points], marker="o")
        if key == "heldout_perplexity":
            panel.axhline(stream[0]["heldout"]["perplexity_unedited"], linestyle="--", color="grey", label="unedited")
            panel.set_yscale("log")
            panel.legend(fontsize="small")
        panel.set_xlabel("edits applied")
        panel.set_title(labels[key])
    figure.tight_layout()
    return figure


def stream_table(stream: list[dict[str, Any]]) -> dict[str, list]:
    """The stream's checkpoints as a table (W&B's ``val/stream``): edits, editing seconds, host peak memory and the
    health figures."""
    keys = list(dict.fromkeys(key for record in stream for key in stream_summary(record)))
    columns = ["edits", "edit_seconds", "host_peak_bytes", *keys]
    data = [[record["edits"], record["edit_seconds"], record["host_peak_bytes"]] for record in stream]
    for row, record in zip(data, stream):
        row += [stream_summary(record).get(key) for key in keys]
    return {"columns": columns, "data": data}


def gather_memory(module: EditorModule, world_size: int) -> list[dict[str, Any]]:
    """Every process's peak memory and the phases that set it (each process must call it), in process order."""
    local = module.peak_memory.record(module.model)
    shares: list[Any] = [local]
    if world_size > 1 and torch.distributed.is_initialized():
        shares = [None] * world_size
        torch.distributed.all_gather_object(shares, local)
    return [{"process": rank, **share} for rank, share in enumerate(shares)]


class RunReport(Callback):
    """Writes and logs the report of an editor's validate/test run (see the module docstring).

    Args:
        config: the resolved run config, as LightningCLI dumps it; secret-looking values are redacted.
    """

    def __init__(self, config: dict[str, Any] | None = None):
        self.config = redact(config or {})
        self.start = math.nan

    def on_validation_start(self, trainer: Trainer, module: LightningModule) -> None:
        self.start = time.perf_counter()  # before the editor's own on_validation_start (sequential edits)
        kinds = module.metrics.score_kinds if isinstance(module, EditorModule) else {}
        reset_judge_stats(kinds)  # the report counts this run's verdicts only

    def on_test_start(self, trainer: Trainer, module: LightningModule) -> None:
        self.on_validation_start(trainer, module)

    def on_validation_end(self, trainer: Trainer, module: LightningModule) -> None:
        self.report(trainer, module)

    def on_test_end(self, trainer: Trainer, module: LightningModule) -> None:
        self.report(trainer, module)

    def report(self, trainer: Trainer, module: LightningModule) -> None:
        if not isinstance(module, EditorModule) or trainer.sanity_checking:
            return
        run = module.metrics  # results, per-case scores and answers, score kinds
        judges = redact(judge_report(run.score_kinds))  # from every process; a key pasted as api_key_env redacted
        memory = gather_memory(module, trainer.world_size)  # from every process
        if not trainer.is_global_zero:
            return
        directory = run_folder(trainer)  # the folder the run claimed (lightning_edit.run_folder)
        datamodule = trainer.datamodule
        cases = datamodule.cases if isinstance(datamodule, EditDataModule) else []
        counts = {
            "cases": len(cases),
            "skipped_records": getattr(datamodule, "skipped", []),
            "target_equals_true": getattr(datamodule, "target_equals_true", []),
            "skipped_requests": module.runner.skipped_requests,  # EditorModule.cannot_edit
        }
        notes = datamodule.run_notes(module) if isinstance(datamodule, EditDataModule) else {}
        seconds = time.perf_counter() - self.start
        stream = module.runner.stream
        path = write_results(
            directory, run.results, self.config, counts, seconds, notes, judges, stream, run.score_kinds, memory
        )
        rows = case_rows(cases, run.case_scores, run.case_answers)
        (directory / "cases.jsonl").write_text(
            "".join(json.dumps(json_safe(row), allow_nan=False) + "\n" for row in rows)
        )

        figures = datamodule.figures(run.results, run.case_scores) if isinstance(datamodule, EditDataModule) else {}
        retention = retention_figure(run.results, len(cases), stream)
        if retention is not None:
            figures["retention"] = retention
        for name, figure in figures.items():
            figure.savefig(directory / f"{name}.png", dpi=120)

        names = list(run.case_scores)
        columns = ["case_id", "subject", "prompt", "target_new", "target_true", *names]
        table = [
            [row["case_id"], *(row["requests"][0][k] for k in columns[1:5]), *(row["scores"].get(m) for m in names)]
            for row in rows
        ]
        for logger in trainer.loggers:
            logger.log_hyperparams({"config": self.config})
            if hasattr(logger, "log_table"):
                logger.log_table(key="val/cases", columns=columns, data=table)
                if run.case_answers:
                    answers = answer_rows(cases, run.case_answers)
                    logger.log_table(key="val/answers", columns=["case_id", "metric", "prompt", "answer"], data=answers)
                if stream:
                    logger.log_table(key="val/stream", **stream_table(stream))
            if hasattr(logger, "log_image"):
                for name, figure in figures.items():
                    logger.log_image(key=f"val/{name}", images=[figure])
        if figures:
            import matplotlib.pyplot as plt

            for figure in figures.values():
                plt.close(figure)  # a process that runs many validations (scripts, notebooks) keeps no figures
        rank_zero_info(f"\n{markdown_table(run.results, run.score_kinds)}\n\nresults written to {path}")
        check_judges_answered(judges, run.results, path)  # on process 0 alone, after every file is written


def check_judges_answered(judges: dict[str, Any], results: dict[str, dict[str, Any]], path: Path) -> None:
    """Raise :class:`~lightning_edit.judges.base.JudgeFailedError` if every request to a judge failed (a wrong
    endpoint or key, the service down): its metrics are null in the results, which are written all the same."""
    failed = {kind: judge for kind, judge in judges.get("judges", {}).items() if judge["failed"] == judge["verdicts"]}
    if not failed:
        return
    asked = "; ".join(
        f"{judge['failed']} to {judge.get('model', judge['class'])}"
        + (f" at {judge['base_url']}" if judge.get("base_url") else "")
        for judge in failed.values()
    )
    metrics = [name for name, result in results.items() if result["kind"] in failed]
    raise JudgeFailedError(
        f"every request to the judge failed ({asked}; the warnings above say why): no verdict for "
        f"{', '.join(metrics)}, null in {path}, where the other metrics are written; check the judge's endpoint, model "
        "and API key, then run the same command again"
    )

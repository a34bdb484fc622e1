"""Stopping on a signal: one path for every strategy and every long step (docs/sharding.md#stopping).

A stop signal (SIGTERM from a scheduler, or a user's ``kill``) only records itself (:func:`request_stop`): nothing
runs in the signal handler, least of all a collective (Lightning's own handler broadcasts from process 0 inside the
handler, which hangs the processes when the signal reaches them at different points, or reaches one of them only).
Long steps look at the signal at their safe points, after which nothing is half-done (an edit undone, a batch of
documents summed, a tensor converted):

- :func:`stop_requested`, where a process works on its own (its share of the cases or of the statistics pass, a
  judge's requests, a conversion): the signal this process received, or the one another process of the run posted
  to the process group's store; a process that received one posts it there, so a signal that reaches one process
  stops every process at its next safe point;
- :func:`stop_agreed`, where the processes are in step (an editor call of the sequential stream, every edit and
  forward of a sharded model, the end of each batch of cases): one decision of all of them (an all-reduce), so they
  stop at the same point and none waits in a collective for one that left.

The step then raises :class:`~lightning_edit.errors.Interrupted`, which says what was running and what was kept;
``lightning-edit`` exits with status 143.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_signals: list[int] = []  # the stop signals received by this process (request_stop)
_posted = False  # whether this process posted its signal to the process group's store
_in_step: list[Any] = []  # the strategies whose processes are in step now (in_step)
_held: list[Any] = []  # the processes Lightning's launcher started, taken from its observer (hold_launched_processes)
STORE_KEY = "lightning_edit/stop"


def request_stop(signum: int, frame: Any = None) -> None:
    """Signal handler: record the signal; long steps stop at their next safe point (:func:`stop_requested`)."""
    _signals.append(int(signum))


def _store() -> Any:
    """The key-value store of the run's default process group (the rendezvous' TCP store), or None."""
    import torch.distributed as dist  # here: the tools that register the handler start without torch

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    return dist.distributed_c10d._get_default_store()


def stop_requested() -> int | None:
    """The stop signal this process received or another process of the run posted, or None; posts this process's."""
    global _posted
    store = _store()
    if _signals:
        if store is not None and not _posted:
            store.set(STORE_KEY, str(_signals[0]))
            _posted = True
        return _signals[0]
    if store is not None and store.check([STORE_KEY]):
        return int(store.get(STORE_KEY))
    return None


def stop_agreed(strategy: Any) -> bool:
    """Whether any process of ``strategy`` has a stop requested: a collective, called by every process at the same
    point."""
    requested = stop_requested() is not None
    if strategy.world_size == 1:
        return requested
    agreed = strategy.reduce_boolean_decision(requested, all=False)
    if agreed:
        hold_launched_processes(strategy)
    return agreed


def hold_launched_processes(strategy: Any) -> None:
    """On the process that launched the others (Lightning's subprocess launcher), take them out of the list its
    observer thread watches: the observer kills this process when one of them exits non-zero, and after a stop (143)
    or a user error every process meets (1) they exit while this one may still be ending (it would end with SIGKILL,
    without its line or status). The CLI waits for them before it exits (:func:`take_held_processes`)."""
    launched = getattr(getattr(strategy, "launcher", None), "procs", None)
    if launched:
        _held.extend(launched)
        launched.clear()


def take_held_processes() -> list[Any]:
    """The launched processes :func:`hold_launched_processes` took from the launcher's observer (none are held
    after)."""
    held = list(_held)
    _held.clear()
    return held


@contextmanager
def in_step(strategy: Any | None) -> Iterator[None]:
    """While in the block, :func:`stop_point` is :func:`stop_agreed` of ``strategy`` (its processes run the block in
    step); with None it stays :func:`stop_requested`."""
    _in_step.append(strategy)
    try:
        yield
    finally:
        _in_step.pop()


def stop_point() -> int | None:
    """The stop signal at a safe point of a step that may run in step (:func:`in_step`) or alone, or None."""
    strategy = _in_step[-1] if _in_step else None
    if strategy is None:
        return stop_requested()
    # a process that agrees to stop posted its signal before the all-reduce: every process reads it then
    return stop_requested() if stop_agreed(strategy) else None

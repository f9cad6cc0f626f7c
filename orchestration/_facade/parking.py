"""A stopped run that cannot go on without its per-run credentials, marked as waiting
for them instead of being taken over.

Per-run credentials are never stored (``orchestration/credentials.py``): a run started
with them whose process stopped can go on only where a caller gives them again. A
process that looks after the runs nobody executes (``dagwright serve``'s takeover of a
dead process's runs) must therefore not take such a run over — it could only send its
calls without them, or with the catalog's own credentials on the user's behalf. It
parks it: the run stays ``running`` and resumable, and carries a warning that says what
it waits for and how to give it (``GET /v1/runs/{id}``, the viewer and ``dagwright runs
show`` show it). The warning goes when an execution with the credentials takes the run
(:func:`unpark`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestration.state import RunState
from orchestration.store import StoredRun

if TYPE_CHECKING:  # (local_runs imports unpark from here)
    from orchestration._facade.local_runs import LocalRuns

__all__ = ["PARKED", "park_for_credentials", "unpark"]

PARKED = "waiting for per-run credentials"
"""How the warning of a parked run begins (one per run at most)."""


def _note(run_id: str, names: list[str]) -> str:
    # worded so that the redaction of every answer leaves it whole: no "credentials:"
    # followed by a word, which reads as a secret's key and value (the word is masked)
    shown = ", ".join(repr(n) for n in names)
    return (f"{PARKED} for {shown}, which are never stored: the process executing this run "
            "stopped and the run still has calls for them, so no other process takes it "
            "over (it would have to send them without the credentials, or with the "
            f"catalog's). Resume it with them: POST /v1/runs/{run_id}/resume "
            f"{{\"credentials\": {{...}}}}, dagwright resume {run_id} --credentials-file "
            f"FILE, or resume({run_id!r}, credentials={{...}}).")


def unpark(run: RunState) -> None:
    """Drop the parked warning of ``run``: an execution with its credentials took it."""
    if any(w.startswith(PARKED) for w in run.warnings):
        run.warnings = [w for w in run.warnings if not w.startswith(PARKED)]


async def park_for_credentials(local: LocalRuns, run_id: str) -> list[str]:
    """The per-run credentials the stopped run ``run_id`` needs to go on ([]: none, and
    nothing changes); when it needs some, the run is marked as waiting for them (once),
    under its lease taken for that write alone — nothing is sent. Raises ``RunLeased``
    while a live process executes it (resumed with the credentials, say)."""
    await local.stores.open()

    async def act(stored: StoredRun | None) -> list[str]:
        if stored is None:
            raise local.stores.not_found(run_id)
        run = stored.state
        if run.status != "running":
            return []
        needed = local.credentials_needed(run)
        note = _note(run_id, needed)
        if not needed or note in run.warnings:
            return needed
        recorder = local.stores.recorder(run_id)
        await recorder.take_over(stored)  # as read (RunChanged: read again)
        unpark(run)  # (a note naming other tools, from an older reading)
        run.warn(note)
        await recorder.finish(run)
        return needed

    return await local.stores.as_read(run_id, act)

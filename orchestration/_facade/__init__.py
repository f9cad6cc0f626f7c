"""The parts of the :class:`~orchestration.orchestrator.Orchestrator` facade, one concern
per module; the facade composes them and is the only importer.

- :mod:`.parts` — what the parts read of the facade (its public attributes)
- :mod:`.inputs` — the checks of a query and a caller-chosen run id
- :mod:`.store_access` — the run store: opened once, retention, writes outside an execution
- :mod:`.loop_resources` — what is bound to an event loop, and the sync wrappers' loop
- :mod:`.local_runs` — the local backend: start, continue and execute a run in this process
- :mod:`.resume` — continue a stopped run, or one waiting for approvals
- :mod:`.cancellation` — end a run ``cancelled``, running here or stopped elsewhere
- :mod:`.requests` — cancels other processes asked of the runs executing here
- :mod:`.parking` — a stopped run that needs its per-run credentials, marked, not taken over
- :mod:`.history` — runs and their events, answered from memory, Temporal or the store
- :mod:`.temporal` — the delegation to Temporal workers (``ORCH_BACKEND=temporal``)
"""

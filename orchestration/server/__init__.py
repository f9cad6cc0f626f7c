"""``dagwright serve``: dagwright as an HTTP service, with a run viewer.

* :func:`create_app` — the ASGI app (Starlette) for a service that mounts it itself:
  ``/v1`` (submit a run and poll it, follow its events, decide approvals, cancel),
  ``/ui`` (the run viewer), ``/healthz``, ``/metrics``;
* :func:`serve` — what ``dagwright serve`` runs: the app under uvicorn (in ``--workers``
  processes), with the ``ORCH_SERVE_*`` settings and the refusal to listen beyond
  loopback without a token;
* :func:`tune_collector` — the garbage collector tuned for a server, as ``dagwright
  serve`` does once started (``ORCH_SERVE_GC``), for a service that mounts the app itself.

Needs the ``serve`` extra (``pip install '.[serve]'`` from a clone); ``import orchestration``
does not. See ``docs/serve.md``.
"""

from orchestration.server._app import create_app
from orchestration.server._gc import tune_collector
from orchestration.server._serve import serve

__all__ = ["create_app", "serve", "tune_collector"]

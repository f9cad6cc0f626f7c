"""OpenAPI 3.0/3.1 (and Swagger 2.0) operations as capabilities (the ``openapi`` extra).

Each operation becomes one capability named by its ``operationId`` (or ``<method>_<path>``
without one). Its input schema is an object whose properties are the operation's path,
query, header and cookie parameters, plus ``body`` for a request body (JSON, form fields,
multipart parts or a file). A 2xx JSON answer is the output; error statuses are
classified by the status table in ``docs/tools.md`` (400/422 carry the body in
``details["body"]`` for layer 3).

The package, one job per module:

* :mod:`._documents` reads the document and the files its ``$ref``s name (never the
  network unless allowed);
* :mod:`._schemas` converts schemas once per document into shared ``$defs`` and keeps
  each capability's schema within its size budget;
* :mod:`._requests` renders a request (path, query, header, cookie, JSON, form, multipart);
* :mod:`._security` maps ``securitySchemes`` to the credentials the user gives;
* :mod:`._swagger2` reads a Swagger 2.0 document's pieces as their OpenAPI 3.0 forms;
* :mod:`._source` maps operations, leaving out (and reporting) the ones it cannot map;
* :mod:`._calls` sends an operation's request and classifies its answer.

Libraries: :mod:`referencing` resolves references (the library :mod:`jsonschema` uses)
and ``openapi-spec-validator`` checks the document, its findings kept as notes.
"""

from __future__ import annotations

from orchestration._extras import needs_extra
from orchestration.errors import CatalogError

try:
    import jsonschema_path  # noqa: F401 - the extra's presence is checked here, once
    import openapi_spec_validator  # noqa: F401
except ImportError as _missing:  # pragma: no cover - depends on the installed extras
    raise CatalogError(needs_extra("OpenAPI specs", "openapi", str(_missing))) from _missing

from orchestration.sources.openapi._calls import classify_answer
from orchestration.sources.openapi._names import identifier, tool_identifier
from orchestration.sources.openapi._requests import FILE_INPUT_SCHEMA, Operation
from orchestration.sources.openapi._schemas import MAX_SCHEMA_BYTES
from orchestration.sources.openapi._security import CREDENTIALS_ENV
from orchestration.sources.openapi._source import METHODS, OpenAPIInvoker, OpenAPISource

__all__ = [
    "CREDENTIALS_ENV",
    "FILE_INPUT_SCHEMA",
    "MAX_SCHEMA_BYTES",
    "METHODS",
    "OpenAPIInvoker",
    "OpenAPISource",
    "Operation",
    "classify_answer",
    "identifier",
    "tool_identifier",
]

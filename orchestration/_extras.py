"""How to add an optional extra to *this* installation, for "needs the X extra" messages.

dagwright is not on PyPI: asking pip for the distribution by name with an extra fails
with "Could not find a version that satisfies the requirement". What works depends on where this copy came
from, which pip records (PEP 610, ``direct_url.json`` in the distribution's metadata):

* a clone (``pip install .`` or ``-e .``): ``pip install '/path/to/clone[serve]'``
  (``-e`` kept for an editable install), i.e. ``pip install '.[serve]'`` from the clone;
* a wheel file: ``pip install '/path/to/dagwright-0.1.0-py3-none-any.whl[serve]'``;
* an index (a private one that hosts it): the name with the extra, as usual.

When the metadata says nothing (the source tree on ``PYTHONPATH``), the line names the
two usual cases.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from urllib.parse import unquote, urlparse

from orchestration._version import __version__

__all__ = ["DISTRIBUTION", "MISSING_EXTRA", "install_line", "needs_extra"]

DISTRIBUTION = "dagwright"


def _origin() -> tuple[str, bool] | None:
    """Where this installation came from (a local path) and whether it is editable.

    Every distribution of the name is looked at: a ``dagwright.egg-info`` a build left in
    the working directory comes first on ``sys.path`` and records nothing."""
    text = next((t for d in metadata.distributions(name=DISTRIBUTION)
                 if (t := d.read_text("direct_url.json"))), None)
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file":
        return None
    editable = bool((info.get("dir_info") or {}).get("editable"))
    return unquote(url.path), editable


def install_line(extra: str) -> str:
    """The pip command that adds ``extra`` to this installation."""
    origin = _origin()
    if origin is None:
        try:
            metadata.distribution(DISTRIBUTION)
        except metadata.PackageNotFoundError:  # source tree on PYTHONPATH
            return (f"pip install '.[{extra}]' in a clone of dagwright (or "
                    f"pip install 'dist/dagwright-{__version__}-py3-none-any.whl[{extra}]' from a wheel)")
        return f"pip install '{DISTRIBUTION}[{extra}]'"  # from an index that hosts it
    path, editable = origin
    return f"pip install {'-e ' if editable else ''}'{path}[{extra}]'"


MISSING_EXTRA = re.compile(r"needs the '[\w-]+' extra")
"""How every :func:`needs_extra` message reads: a command's error handler knows it by it."""


def needs_extra(what: str, extra: str, missing: str | None = None) -> str:
    """``what needs the 'extra' extra (missing is missing): <install line>``."""
    because = f" ({missing} is missing)" if missing else ""
    return f"{what} needs the '{extra}' extra{because}: {install_line(extra)}"

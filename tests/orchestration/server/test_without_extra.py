"""The core stays lean: without the serve extra, ``import orchestration`` and the CLI work,
and ``dagwright serve`` says which extra to install."""

from __future__ import annotations

import subprocess
import sys

from tests import ROOT

BLOCK_SERVE_EXTRA = """
import importlib.abc, sys
class NoServeExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"starlette", "uvicorn", "sse_starlette"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoServeExtra())
"""


def test_the_core_and_the_cli_need_no_serve_extra() -> None:
    script = BLOCK_SERVE_EXTRA + (
        "import orchestration\n"
        "from orchestration.cli import main\n"
        "assert 'starlette' not in sys.modules and 'uvicorn' not in sys.modules\n"
        "sys.exit(main(['serve', '--port', '0']))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "dagwright serve needs the 'serve' extra (starlette is missing)" in proc.stderr
    # the line for this installation (an editable one, of this checkout), which works
    assert f"pip install -e '{ROOT}[serve]'" in proc.stderr

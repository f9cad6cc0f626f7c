"""A stdio MCP server's process: run under a small launcher, its stderr kept as a tail.

The launcher (plain Python, no import of ours) runs the server as its child and reports
how it ended, and the server's stderr is read line by line into a bounded tail (and the
debug log): a server that dies at start is reported with its exit code and its last
stderr lines, in words a user acts on, instead of "Connection closed".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Sequence

__all__ = ["STDERR_TAIL_LINES", "StderrTail", "launcher_argv"]

log = logging.getLogger("dagwright.sources.mcp")

_LAUNCHER = (
    "import json, subprocess, sys\n"
    "def protocol(line):\n"
    "    if line.startswith(b'{\"jsonrpc\"'):\n"
    "        return True\n"
    "    if line.lstrip()[:1] not in (b'{', b'['):\n"
    "        return False\n"
    "    try:\n"
    "        data = json.loads(line)\n"
    "    except ValueError:\n"
    "        return False\n"
    "    items = data if isinstance(data, list) else [data]\n"
    "    return bool(items) and all(isinstance(i, dict) and 'jsonrpc' in i for i in items)\n"
    "try:\n"
    "    server = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n"
    "except OSError as exc:\n"
    "    print(f'{MARK} cannot start {sys.argv[1]!r}: {exc.strerror}', file=sys.stderr)\n"
    "    sys.exit(127)\n"
    "out, err = sys.stdout.buffer, sys.stderr.buffer\n"
    "try:\n"
    "    for line in server.stdout:\n"
    "        if protocol(line):\n"
    "            out.write(line)\n"
    "            out.flush()\n"
    "        elif line.strip():\n"
    "            err.write(b'(on stdout) ' + line.rstrip(b'\\r\\n') + b'\\n')\n"
    "            err.flush()\n"
    "except (BrokenPipeError, KeyboardInterrupt):\n"
    "    pass\n"
    "code = server.wait()\n"
    "print(f'{MARK} exited with code {code}', file=sys.stderr)\n"
    "sys.exit(code if code >= 0 else 128 - code)\n"
)
"""Runs a stdio server as its child and says on stderr how it ended: the SDK keeps the
process to itself, so this is how its exit code reaches the error a user reads. Its
stdin is inherited; its stdout passes through line by line, and a line that is not a
JSON-RPC message (a banner, a print, a JSON log line: servers in the wild write them) goes
to stderr instead, where the tail keeps it, rather than into the SDK, which logs a
traceback for each."""
_MARK = "[dagwright-mcp-launcher]"
STDERR_TAIL_LINES = 20


def _not_found_hint(command: Sequence[str]) -> str:
    """What to do about a command that is not on PATH. A server installed with pip into
    dagwright's own virtualenv is beside its Python, yet off PATH when that virtualenv
    is not activated (``.venv/bin/dagwright run`` as the README types it)."""
    if not command or os.sep in command[0] or shutil.which(command[0]) is not None:
        return ""
    beside = os.path.join(os.path.dirname(sys.executable), command[0])
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return (f" ({command[0]!r} is not on PATH, but dagwright's virtualenv has {beside}: "
                "write that path as the command, or activate the virtualenv)")
    return f" ({command[0]!r} is not on PATH: write its full path as the command, or install it)"


class StderrTail:
    """A stdio server's stderr: read by a thread into the last lines (and the debug log)."""

    def __init__(self, name: str, command: Sequence[str] = ()) -> None:
        self._command = list(command)
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")  # handed to the server process as its stderr
        self._reader = os.fdopen(read_fd, "r", errors="replace")
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.exit_code: int | None = None
        self.start_failure: str | None = None
        self._name = name
        self._thread = threading.Thread(target=self._read, name=f"mcp-stderr-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in self._reader:
                line = raw.rstrip("\n")
                if line.startswith(_MARK):
                    said = line[len(_MARK):].strip()
                    code = re.match(r"exited with code (-?\d+)", said)
                    if code:
                        self.exit_code = int(code.group(1))
                    else:
                        self.start_failure = said
                    continue
                self.lines.append(line)
                log.debug("MCP server %s stderr: %s", self._name, line)
        with contextlib.suppress(OSError):
            self._reader.close()

    async def settle(self, timeout_s: float = 2.0) -> None:
        """Wait (bounded) until the server's stderr is read to its end."""
        with contextlib.suppress(OSError):
            self.file.close()  # our copy of the write end: EOF once the server is gone
        await asyncio.to_thread(self._thread.join, timeout_s)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()

    def explain(self, fallback: str) -> str:
        """What a user acts on: the start failure or exit code and the last stderr lines."""
        if self.start_failure:
            head = f"the server {self.start_failure}{_not_found_hint(self._command)}"
        elif self.exit_code is not None:
            head = (f"the server exited with code {self.exit_code} before it answered"
                    if self.exit_code else "the server exited (code 0) before it answered")
        else:
            head = fallback
        lines = [line for line in self.lines if line.strip()]
        if lines:
            head += "; its last stderr lines:\n    " + "\n    ".join(lines[-10:])
        elif self.exit_code is not None:
            head += " (it wrote nothing on stderr)"
        return head


def launcher_argv(command: Sequence[str]) -> tuple[str, list[str]]:
    """The program and arguments that run ``command`` under the launcher."""
    return sys.executable, ["-I", "-S", "-c", _LAUNCHER.replace("{MARK}", _MARK), *command]

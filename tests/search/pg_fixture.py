"""A real, throw-away PostgreSQL server for the tests (import the fixtures into a test module).

``pg_server`` (one per session): ``initdb`` into a fresh temporary directory, a free port on
127.0.0.1 (no Unix socket, no other address), ``pg_ctl start``; stopped and deleted at the
end. ``pg_url``: a fresh database on it for one test, as a ``postgresql+psycopg://`` URL.

The server binaries come from PATH or ``/usr/lib/postgresql/*/bin`` (Debian's ``postgresql``
package; ``.ci/run`` installs it when root). ``initdb`` refuses to run as root, so as root
the server runs as the ``postgres`` user (made by the Debian package; else ``nobody``) via
``runuser`` (or ``su``). Without the binaries or the psycopg driver the tests skip with the
reason, unless ``LOOPTUNE_REQUIRE_POSTGRES=1`` (set by ``.ci/run``): then they fail.
"""
from __future__ import annotations

import glob
import itertools
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REQUIRE_ENV = "LOOPTUNE_REQUIRE_POSTGRES"
SUPERUSER = "postgres"          # the database role initdb creates (-U)


def _unavailable(reason: str):
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set: the PostgreSQL tests must run here)")
    pytest.skip(reason)


def find_bindir() -> str | None:
    """The folder holding initdb and pg_ctl: PATH first, else the newest Debian version."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return os.path.dirname(os.path.realpath(initdb))
    def version(d: str) -> tuple:
        v = Path(d).parent.name
        return tuple(int(x) for x in v.split(".") if x.isdigit())
    dirs = [d for d in glob.glob("/usr/lib/postgresql/*/bin")
            if os.access(os.path.join(d, "initdb"), os.X_OK)
            and os.access(os.path.join(d, "pg_ctl"), os.X_OK)]
    return max(dirs, key=version) if dirs else None


def _run_as() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs the server's programs unprivileged, and that user."""
    if os.geteuid() != 0:
        return [], None
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if shutil.which("runuser"):
            return ["runuser", "-u", name, "--"], pw
        if shutil.which("su"):
            return ["su", "-s", "/bin/sh", name, "-c"], pw
    _unavailable("running as root, and neither a 'postgres' nor a 'nobody' user with runuser "
                 "or su exists to run the PostgreSQL server (initdb refuses root)")
    raise AssertionError("unreachable")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    """A PostgreSQL server on 127.0.0.1:``port`` whose data lives in ``root``."""

    bindir: str
    root: str
    prefix: list[str]
    port: int = 0
    _names: itertools.count = field(default_factory=itertools.count)

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def logfile(self) -> str:
        return os.path.join(self.root, "server.log")

    def _run(self, prog: str, *args: str, unprivileged: bool = True,
             check: bool = True) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bindir, prog), *args]
        if unprivileged and self.prefix:
            cmd = self.prefix + ([shlex.join(cmd)] if self.prefix[0] == "su" else cmd)
        env = dict(os.environ, LC_ALL="C", LANG="C")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                           cwd=self.root)
        if check and r.returncode:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}): "
                               f"{(r.stderr or r.stdout)[-1500:]}{self.log_tail()}")
        return r

    def log_tail(self) -> str:
        try:
            return "\nserver log:\n" + Path(self.logfile).read_text()[-1500:]
        except OSError:
            return ""

    def start(self) -> None:
        self._run("initdb", "-D", self.data, "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        for attempt in range(3):
            self.port = _free_port()
            with open(os.path.join(self.data, "postgresql.conf"), "a") as fh:
                fh.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                         "unix_socket_directories = ''\nfsync = off\n"
                         "synchronous_commit = off\nfull_page_writes = off\n")
            if self._launch(check=attempt == 2).returncode == 0:
                return

    def _launch(self, check: bool = True) -> subprocess.CompletedProcess:
        return self._run("pg_ctl", "-D", self.data, "-l", self.logfile, "-w", "-t", "60",
                         "start", check=check)

    def restart(self) -> None:
        """Start the server again after :meth:`stop` (same data, same port)."""
        self._launch()

    def stop(self) -> None:
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop", check=False)

    def createdb(self, prefix: str = "lt") -> str:
        name = f"{prefix}_{next(self._names)}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, name,
                  unprivileged=False)
        return name

    def url(self, db: str, driver: str = "psycopg") -> str:
        return f"postgresql+{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{db}"


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server for the session (see the module docstring)."""
    bindir = find_bindir()
    if bindir is None:
        _unavailable("PostgreSQL's initdb/pg_ctl are neither on PATH nor under "
                     "/usr/lib/postgresql/*/bin: install Debian's postgresql (apt-get install "
                     "postgresql; .ci/run does when root)")
    prefix, user = _run_as()
    root = tempfile.mkdtemp(prefix="lt-pg-")     # under /tmp: the server user can reach it
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    server = PgServer(bindir, root, prefix)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh database on the session's server, as a ``postgresql+psycopg://`` URL."""
    import importlib.util
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("the psycopg driver is not installed: pip install 'psycopg[binary]' "
                     "(the test extra has it)")
    return pg_server.url(pg_server.createdb())

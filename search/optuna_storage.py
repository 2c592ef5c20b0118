"""Optuna storages for :class:`~looptune.search.optuna_tuner.OptunaTuner`: URLs, database
drivers, clear errors, and heartbeats for workers that die.

Database URLs are SQLAlchemy's: ``postgresql+psycopg://user:password@host:5432/db``. A URL
without a driver (``postgresql://``, ``mysql://``) uses the first installed one of
:data:`DRIVERS` (SQLAlchemy 2.1 would insist on psycopg 3 for ``postgresql://``, 2.0 on
psycopg2). A URL whose driver is not installed, and a server that cannot be reached, raise
:class:`StorageError` with one line naming the package to install or the server tried.

Heartbeats (database storages): every worker records a heartbeat for each trial it is
measuring every ``heartbeat`` seconds; a running trial whose heartbeats stopped for
``3 * heartbeat`` seconds belonged to a worker that died (``kill -9``, a lost machine) and is
failed by the next worker that syncs, which may then measure that config itself. The default
is :data:`HEARTBEAT` seconds, or ``$LOOPTUNE_OPTUNA_HEARTBEAT`` (``0`` turns heartbeats off);
give every worker of a study the same value.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..errors import LooptuneError

log = logging.getLogger("looptune.search.optuna_storage")

HEARTBEAT = 10
HEARTBEAT_ENV = "LOOPTUNE_OPTUNA_HEARTBEAT"
GRACE_FACTOR = 3

# SQLAlchemy driver name -> (module to import, pip package)
DRIVER_PACKAGES = {
    "psycopg": ("psycopg", "psycopg[binary]"),
    "psycopg2": ("psycopg2", "psycopg2-binary"),
    "pg8000": ("pg8000", "pg8000"),
    "mysqldb": ("MySQLdb", "mysqlclient"),
    "pymysql": ("pymysql", "PyMySQL"),
    "mysqlconnector": ("mysql.connector", "mysql-connector-python"),
}
# drivers tried, in order, for a URL that names none
DRIVERS = {"postgresql": ("psycopg", "psycopg2", "pg8000"),
           "mysql": ("mysqldb", "pymysql", "mysqlconnector")}
_SERVERS = {"postgresql": ("PostgreSQL", 5432), "mysql": ("MySQL", 3306)}
_INSTALL_HINT = {"postgresql": "pip install 'psycopg[binary]' (or 'looptune[postgresql]')",
                 "mysql": "pip install PyMySQL"}


class StorageError(LooptuneError):
    """An Optuna storage cannot be opened or used: a bad URL, a missing database driver, a
    server that cannot be reached."""


def heartbeat_seconds(heartbeat: int | None = None) -> int | None:
    """The heartbeat interval: ``heartbeat`` if given, else ``$LOOPTUNE_OPTUNA_HEARTBEAT``,
    else :data:`HEARTBEAT`; None (no heartbeats) for 0."""
    if heartbeat is None:
        env = os.environ.get(HEARTBEAT_ENV, "").strip()
        try:
            heartbeat = int(env) if env else HEARTBEAT
        except ValueError:
            raise StorageError(f"{HEARTBEAT_ENV} must be a whole number of seconds (0: no "
                               f"heartbeats); got {env!r}") from None
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int) or heartbeat < 0:
        raise StorageError(f"OptunaTuner: heartbeat must be a whole number of seconds >= 0 "
                           f"(0: none); got {heartbeat!r}")
    return heartbeat or None


def make_storage(storage: Any, heartbeat: int | None = None):
    """An Optuna storage from None, a URL (``journal:PATH`` for a journal file, ``redis://``,
    or a SQLAlchemy database URL) or a storage object (returned as is)."""
    if storage is None or not isinstance(storage, (str, os.PathLike)):
        return storage
    url = os.fspath(storage)
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    if url.startswith("journal:"):
        path = url[len("journal:"):].removeprefix("//")
        if not path:
            raise StorageError("OptunaTuner: 'journal:PATH' needs a file path")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return JournalStorage(JournalFileBackend(path))
    if url.startswith("redis://"):
        if importlib.util.find_spec("redis") is None:
            raise StorageError(f"storage {url!r} needs the redis package: pip install redis")
        from optuna.storages.journal import JournalRedisBackend
        return JournalStorage(JournalRedisBackend(url))
    if "://" not in url:
        raise StorageError(f"OptunaTuner: storage {url!r} is not a URL; give e.g. "
                           "'journal:tune.journal', 'sqlite:///tune.db' or "
                           "'postgresql+psycopg://user@host/db'")
    return rdb_storage(url, heartbeat_seconds(heartbeat))


def _parse(url: str):
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    try:
        return make_url(url)
    except ArgumentError as e:
        raise StorageError(f"OptunaTuner: storage {url!r} is not a database URL ({e}); "
                           "write e.g. postgresql+psycopg://user@host:5432/db") from None


def shown(u) -> str:
    """A URL as it may be printed (no password)."""
    return u.render_as_string(hide_password=True)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def resolve_driver(url: str):
    """The SQLAlchemy URL of ``url`` with an installed driver: the one named, else the first
    installed one of :data:`DRIVERS`; StorageError naming the package when none is."""
    from sqlalchemy.exc import NoSuchModuleError
    u = _parse(url)
    backend, driver = u.get_backend_name(), u.get_driver_name() if "+" in u.drivername else None
    if driver is None and backend in DRIVERS:
        for d in DRIVERS[backend]:
            if _importable(DRIVER_PACKAGES[d][0]):
                return u.set(drivername=f"{backend}+{d}")
        raise StorageError(f"storage {shown(u)!r} needs a {_SERVERS[backend][0]} driver and "
                           f"none is installed: {_INSTALL_HINT[backend]}")
    try:
        dialect = u.get_dialect()
    except NoSuchModuleError:
        known = ", ".join(f"{b}+{d}" for b, ds in DRIVERS.items() for d in ds)
        raise StorageError(f"storage {shown(u)!r}: SQLAlchemy knows no database "
                           f"'{u.drivername}'; use one of {known}, or sqlite") from None
    try:
        dialect.import_dbapi()
    except ImportError as e:
        module, package = DRIVER_PACKAGES.get(dialect.driver, (e.name, e.name))
        alt = f"; or, with psycopg 3, {backend}+psycopg://..." if backend == "postgresql" \
            and dialect.driver != "psycopg" and _importable("psycopg") else ""
        raise StorageError(f"storage {shown(u)!r} needs the Python package {package} (driver "
                           f"'{dialect.driver}', module {module}): pip install '{package}'"
                           f"{alt}") from None
    return u


def _connect_args(u) -> dict[str, Any]:
    """A connect timeout, so that an unreachable host fails in seconds, not minutes."""
    if u.get_backend_name() in _SERVERS and "connect_timeout" not in u.query:
        if u.get_driver_name() in ("psycopg", "psycopg2", "mysqldb", "pymysql"):
            return {"connect_timeout": 10}
        if u.get_driver_name() == "mysqlconnector":
            return {"connection_timeout": 10}
    return {}


def server_error(u, e: BaseException) -> StorageError:
    """The StorageError for a database that refused or failed a connection."""
    backend = u.get_backend_name()
    name, port = _SERVERS.get(backend, (backend, None))
    where = f"{u.host or 'localhost'}:{u.port or port}" if u.host or port else str(u.database)
    if "host" in u.query:
        where = f"{u.query['host']} (port {u.port or port})"
    orig = getattr(e, "orig", None) or e
    first = next((ln.strip() for ln in str(orig).splitlines() if ln.strip()), type(e).__name__)
    return StorageError(f"cannot open the {name} database at {where} (storage {shown(u)!r}): "
                        f"{first}; check that the server runs there and that the user, "
                        f"password and database in the URL exist")


def rdb_storage(url: str, heartbeat: int | None, attempts: int = 5):
    """An RDBStorage (with heartbeats when ``heartbeat`` is set). Workers started together on
    an empty database race to create its tables; the losers see a unique-key error and retry."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError
    u = resolve_driver(url)
    kw: dict[str, Any] = {}
    if heartbeat:
        kw = {"heartbeat_interval": heartbeat, "grace_period": GRACE_FACTOR * heartbeat}
    engine = {"connect_args": _connect_args(u)} if _connect_args(u) else {}
    for k in range(attempts):
        try:
            with warnings_off():
                return optuna.storages.RDBStorage(u.render_as_string(hide_password=False),
                                                  engine_kwargs=engine, **kw)
        except SQLAlchemyError as e:
            if k == attempts - 1 or "already exists" not in str(e):
                raise server_error(u, e) from None
            log.info("storage %s: schema created by another worker meanwhile; retrying", shown(u))
            time.sleep(0.2 * (k + 1))


@contextlib.contextmanager
def warnings_off() -> Iterator[None]:
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="optuna")
        warnings.filterwarnings("ignore", message=".*experimental.*")
        yield


@contextlib.contextmanager
def storage_errors(study) -> Iterator[None]:
    """Database errors while tuning (the server went away) as one StorageError line. Optuna
    wraps those met while writing in a StorageInternalError; the cause tells."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError
    try:
        yield
    except (OperationalError, StorageInternalError) as e:
        cause = e.__cause__ if isinstance(e, StorageInternalError) else e
        storage = getattr(study, "_storage", None)
        url = getattr(getattr(storage, "_backend", storage), "url", None)
        if isinstance(cause, OperationalError) and isinstance(url, str):
            err = str(server_error(_parse(url), cause))
        else:
            detail = str(getattr(cause, "orig", None) or cause or e).strip()
            err = f"the database failed: {detail.splitlines()[0] if detail else type(e).__name__}"
        raise StorageError(f"lost the study '{study.study_name}': {err}; the log keeps every "
                           "result so far (tune again with --resume)") from None


class Heartbeat:
    """A daemon thread that records a heartbeat every ``interval`` seconds for the trials
    ``trial_ids()`` returns (the trials this worker is measuring). It ends with its owner."""

    def __init__(self, storage, interval: int, owner: object,
                 trial_ids: Callable[[object], Iterable[int]]):
        self.storage, self.interval = storage, interval
        self._owner = weakref.ref(owner)
        self._ids = trial_ids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="looptune-heartbeat",
                                        daemon=True)
        self._thread.start()

    def record(self, trial_id: int) -> None:
        """One heartbeat for trial ``trial_id`` (a failure is logged: the next may work)."""
        try:
            self.storage.record_heartbeat(trial_id)
        except Exception as e:  # noqa: BLE001 - a missed beat; the next may get through
            log.debug("heartbeat of trial %s failed: %s", trial_id, e)

    def beat(self) -> None:
        owner = self._owner()
        if owner is None:
            self._stop.set()
            return
        for tid in list(self._ids(owner)):
            self.record(tid)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def stop(self) -> None:
        self._stop.set()

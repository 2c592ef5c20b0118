"""Compiling C to shared objects with gcc/clang, cached on disk by content.

The cache key hashes the source, the flags and the compiler's version. Entries are written to
a temporary name and renamed into place (atomic on POSIX), and each ``.so`` has a sidecar with
its own SHA-256: an entry whose bytes do not match (a partial write, a corrupted disk) is
rebuilt, never loaded. ``$LOOPTUNE_CACHE`` sets the directory (default ``~/.cache/looptune``).

Everything a build writes before its entry is complete (the temporary ``.so``, and the
compiler's own temporaries: ``TMPDIR`` points there) lives in a private directory of the cache,
``.build-<host>-<pid>-*``, removed when the build ends. A build killed on the way (a build
timeout kills the worker's whole process group) leaves its directory behind; the first build
of every later process, and a worker pool after it kills a worker, remove those of this host's
processes that no longer run (``sweep``), so a long tuning leaves nothing in ``/tmp`` or the
cache but entries.

The cache is bounded: entries are touched when used, and the first build of a process prunes
the least recently used ones when the cache holds more than ``$LOOPTUNE_CACHE_MAX`` bytes
(default 4G; ``0`` or ``off``: no bound), down to 80% of it; entries used in the last hour are
kept. ``looptune cache`` shows the cache, ``--clear`` and ``--max-size`` empty or prune it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import BuildError

log = logging.getLogger("looptune.backends.compiler")


def cache_dir() -> Path:
    d = Path(os.environ.get("LOOPTUNE_CACHE") or Path.home() / ".cache" / "looptune")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(f"the build cache {d} cannot be created ({e.strerror}); got "
                         f"LOOPTUNE_CACHE={os.environ.get('LOOPTUNE_CACHE', '')!r}; set "
                         "LOOPTUNE_CACHE to a writable directory") from None
    return d


def _cache_error(d: Path, e: OSError) -> BuildError:
    return BuildError(f"the build cache {d} is not writable ({e.strerror}: {e.filename}); set "
                      "LOOPTUNE_CACHE to a writable directory")


# a function's name starts its cache files' names, cut so that they stay within NAME_MAX (255)
_NAME_CHARS = 64


@functools.cache
def compiler_version(cc: str) -> str:
    if shutil.which(cc) is None:
        raise BuildError(f"C compiler '{cc}' was not found on PATH; install it or pick another "
                         "with the target option -cc=NAME")
    out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cc


@functools.cache
def predefined_macros(cc: str, march: str) -> frozenset[str]:
    """The names of the macros that ``cc -march=<march>`` predefines (``__AVX2__``,
    ``__x86_64__``, ...); BuildError when the compiler rejects that ``-march``."""
    compiler_version(cc)                      # a clear error when the compiler is missing
    proc = subprocess.run([cc, f"-march={march}", "-dM", "-E", "-x", "c", os.devnull],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"'{cc} -march={march}' failed: {proc.stderr.strip()[:500]}; fix "
                         "the target option -march (or pick a compiler that knows it)")
    return frozenset(line.split()[1] for line in proc.stdout.splitlines()
                     if line.startswith("#define ") and len(line.split()) > 1)


@functools.cache
def simd_bytes(cc: str, march: str) -> int:
    """The widest SIMD register, in bytes, that ``cc -march=<march>`` generates code for,
    read from the compiler's predefined macros (16 where none is recognised)."""
    macros = predefined_macros(cc, march)
    if "__AVX512F__" in macros:
        return 64
    if "__AVX__" in macros:
        return 32
    return 16


def _simd_bytes_or_0(cc: str, march: str) -> int:
    """simd_bytes, or 0 where the compiler rejects the -march (the build then fails with the
    compiler's message and the source's path)."""
    try:
        return simd_bytes(cc, march)
    except BuildError:
        return 0


def flags_for(options: dict, parallel: bool) -> list[str]:
    from .target import march_of
    opt, march = options.get("O", "3"), march_of(options)
    flags = [f"-O{opt}", f"-march={march}", "-fPIC", "-std=gnu11",
             "-fno-math-errno", "-fopenmp" if parallel else "-fopenmp-simd"]
    if _simd_bytes_or_0(options.get("cc", "gcc"), march) == 64:
        # Schedules are sized to Target.vector_lanes (16 floats with AVX-512): the vectorizer
        # must use those registers. gcc's tuning for some AVX-512 CPUs (rocketlake, icelake,
        # what -march=native may resolve to in a VM) prefers 256-bit vectors and would split
        # every vectorized loop in two: a 1024^3 sgemm's 8 x 32 micro-kernel then needs 32
        # ymm accumulators, spills, and runs at the 256-bit peak (99 against 170 GFLOP/s).
        flags.append("-mprefer-vector-width=512")
    if options.get("fast-math"):
        flags.append("-ffast-math")
    san = options.get("sanitize")
    if san:
        kinds = "address,undefined" if san is True else san
        flags += [f"-fsanitize={kinds}", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all",
                  "-g"]
    return flags


# sanitizers whose runtime must be loaded before anything else: loading code built with them
# into a process without it aborts the process (ASan) or fails (TSan, LSan: static TLS)
_RUNTIMES = {"address": ("AddressSanitizer", "libasan.so", "__asan_init"),
             "pointer-compare": ("AddressSanitizer", "libasan.so", "__asan_init"),
             "pointer-subtract": ("AddressSanitizer", "libasan.so", "__asan_init"),
             "thread": ("ThreadSanitizer", "libtsan.so", "__tsan_init"),
             "leak": ("LeakSanitizer", "liblsan.so", "__lsan_init"),
             "hwaddress": ("HWAddressSanitizer", "libhwasan.so", "__hwasan_init"),
             "memory": ("MemorySanitizer", "libmsan.so", "__msan_init")}


def check_sanitizer_runtime(target) -> None:
    """BuildError unless the runtime of every ``-sanitize=`` kind of ``target`` that must come
    first is already loaded in this process (UBSan needs none)."""
    san = target.options.get("sanitize")
    if not san:
        return
    kinds = ["address", "undefined"] if san is True else str(san).split(",")
    main = ctypes.CDLL(None)
    for kind in kinds:
        if kind not in _RUNTIMES:
            continue
        name, lib, symbol = _RUNTIMES[kind]
        if not hasattr(main, symbol):
            raise BuildError(
                f"build(target='{target}'): -sanitize={san} needs the {name} runtime loaded "
                f"first in this process, and loading the sanitized code without it would abort "
                f"Python; got a process without {lib}; run Python with "
                f"LD_PRELOAD=$(gcc -print-file-name={lib}) (as tests/backends/test_sanitizers.py "
                "does), or use -sanitize=undefined, or build without -sanitize")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_shared(source: str, cc: str = "gcc", flags: list[str] | None = None,
                   name: str = "kernel") -> Path:
    """Compile ``source`` into a cached shared object and return its path."""
    flags = list(flags or [])
    key = hashlib.sha256("\0".join([source, cc, compiler_version(cc), *flags]).encode())
    stem = f"{name[:_NAME_CHARS]}-{key.hexdigest()[:32]}"
    d = cache_dir()
    _first_build(str(d))
    so, sidecar = d / f"{stem}.so", d / f"{stem}.sha256"
    if so.exists() and sidecar.exists():
        try:
            if sidecar.read_text().strip() == _sha(so):
                _touch(so)
                return so
        except OSError:
            pass
        log.warning("looptune cache entry %s is corrupt or partial; rebuilding", so.name)
    try:
        work = Path(tempfile.mkdtemp(dir=d, prefix=f"{_BUILD_PREFIX}{_host()}-{os.getpid()}-"))
    except OSError as e:
        raise _cache_error(d, e) from None
    try:
        return _compile_into(source, cc, flags, d, stem, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# sanitizer runtimes (gcc's libasan.so.8, clang's libclang_rt.asan-x86_64.so, ...)
_SANITIZER_RUNTIME = re.compile(r"^lib(clang_rt\.)?(asan|ubsan|tsan|lsan|hwasan|msan)\b")


def _compiler_env(env: dict) -> dict:
    """``env`` without the sanitizer runtimes in ``LD_PRELOAD``: a process that runs sanitized
    kernels is started with them preloaded (see ``check_sanitizer_runtime``), and its
    compiler would inherit them: gcc's cc1, as and ld all ran instrumented, 2.5x slower
    (0.5 -> 1.2-1.3 s for a small -sanitize build), and LeakSanitizer could fail a build
    on the compiler's own leaks. Other preloaded libraries stay."""
    pre = env.get("LD_PRELOAD")
    if pre:
        keep = [p for p in re.split(r"[:\s]+", pre)
                if p and not _SANITIZER_RUNTIME.match(os.path.basename(p))]
        if keep:
            env["LD_PRELOAD"] = ":".join(keep)
        else:
            del env["LD_PRELOAD"]
    return env


def _compile_into(source: str, cc: str, flags: list[str], d: Path, stem: str,
                  work: Path) -> Path:
    so, sidecar, src_path = d / f"{stem}.so", d / f"{stem}.sha256", d / f"{stem}.c"
    tmp = work / "out.so"
    try:
        _atomic_write(src_path, source.encode(), work)
    except OSError as e:
        raise _cache_error(d, e) from None
    libs = [f for f in flags if f.startswith("-l")]  # libraries go after the source
    cmd = [cc, *(f for f in flags if not f.startswith("-l")), "-shared", "-o", str(tmp),
           str(src_path), *libs, "-lm"]
    # the compiler's temporaries (gcc's /tmp/cc*.s, *.o) go to the build's own directory, so
    # that a compiler killed by a build timeout leaves nothing where nobody cleans up
    env = _compiler_env(dict(os.environ, TMPDIR=str(work)))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise BuildError(f"{cc} failed on {src_path}:\n{proc.stderr.strip()}\n"
                         f"command: {' '.join(cmd)}", str(src_path), proc.stderr)
    try:
        digest = _sha(tmp)
        os.replace(tmp, so)
        _atomic_write(sidecar, digest.encode(), work)
    except OSError as e:
        raise _cache_error(d, e) from None
    return so


# ---------------------------------------------------------------------------------------------
# what killed builds leave, and the cache's bound

_BUILD_PREFIX = ".build-"
_ENTRY = re.compile(r"^(?P<stem>[^.].*)\.(so|sha256|c|cl)$")
_STALE_PARTIAL_S = 3600.0     # a dot-file older than this is what an older looptune's killed
_KEEP_RECENT_S = 3600.0       # build left; entries used in the last hour are never pruned
_SIZE_CHECK_S = 600.0


@functools.cache
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname() or "host")[:64]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass                  # a read-only shared cache: its entries are simply not re-dated


def sweep(d: Path | None = None) -> int:
    """Remove what killed builds left in the cache ``d``: the build directories of this host's
    processes that no longer run, and partial files an older looptune left (dot-files older
    than an hour). Returns how many it removed."""
    try:
        d = d or cache_dir()
    except BuildError:
        return 0
    mine, now, removed = f"{_BUILD_PREFIX}{_host()}-", time.time(), 0
    try:
        entries = list(os.scandir(d))
    except OSError:
        return 0
    for e in entries:
        name = e.name
        try:
            if name.startswith(mine):
                pid = name[len(mine):].split("-", 1)[0]
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(e.path, ignore_errors=True)
                    removed += 1
            elif (name.startswith(".") and not name.startswith(_BUILD_PREFIX)
                  and e.is_file(follow_symlinks=False)
                  and now - e.stat(follow_symlinks=False).st_mtime > _STALE_PARTIAL_S):
                os.unlink(e.path)
                removed += 1
        except OSError:
            pass
    return removed


def parse_size(text: str, what: str = "LOOPTUNE_CACHE_MAX") -> int:
    """Bytes from ``"4G"``, ``"500M"``, ``"64k"``, ``"1000"``; 0 for ``"0"``/``"off"`` (no
    bound)."""
    t = str(text).strip().lower()
    if t in ("0", "off", "none", "unlimited"):
        return 0
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", t)
    if not m:
        raise BuildError(f"{what}={text!r} is not a size; write it as bytes or with a unit, "
                         "such as 4G, 500M or 64k (0 or off: no bound)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * scale)


def cache_limit() -> int:
    """The cache's bound in bytes from ``$LOOPTUNE_CACHE_MAX`` (default 4G); 0: none."""
    return parse_size(os.environ.get("LOOPTUNE_CACHE_MAX", "4G"))


def cache_entries(d: Path | None = None) -> dict[str, tuple[float, int]]:
    """Each entry's stem -> (when it was last used, bytes of its files)."""
    d = d or cache_dir()
    out: dict[str, list] = {}
    for e in os.scandir(d):
        m = _ENTRY.match(e.name)
        if not m or not e.is_file(follow_symlinks=False):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        rec = out.setdefault(m.group("stem"), [0.0, 0])
        rec[0] = max(rec[0], st.st_mtime)
        rec[1] += st.st_size
    return {k: (v[0], v[1]) for k, v in out.items()}


def prune(max_bytes: int, d: Path | None = None, keep_recent_s: float = _KEEP_RECENT_S) -> int:
    """Remove the least recently used entries of the cache ``d`` until it holds at most
    ``max_bytes`` (entries used in the last ``keep_recent_s`` seconds stay); returns the bytes
    removed."""
    d = d or cache_dir()
    entries = cache_entries(d)
    total = sum(size for _, size in entries.values())
    now, freed = time.time(), 0
    for stem, (used, size) in sorted(entries.items(), key=lambda kv: kv[1][0]):
        if total - freed <= max_bytes:
            break
        if now - used < keep_recent_s:
            break
        for ext in (".so", ".sha256", ".c", ".cl"):
            try:
                os.unlink(d / f"{stem}{ext}")
            except OSError:
                pass
        freed += size
    return freed


def clear(d: Path | None = None) -> int:
    """Remove every entry of the cache ``d`` (not its locks); returns the bytes removed."""
    return prune(0, d, keep_recent_s=0.0)


@functools.cache
def _first_build(d: str) -> None:
    """Once per process and cache: sweep what killed builds left, and keep the cache within
    its bound."""
    sweep(Path(d))
    limit = cache_limit()
    stamp = Path(d) / "locks" / "size-checked"
    try:                          # the size is checked at most every 10 minutes per cache
        if time.time() - stamp.stat().st_mtime < _SIZE_CHECK_S:
            return
    except OSError:
        pass
    try:
        stamp.parent.mkdir(exist_ok=True)
        stamp.touch()
    except OSError:
        pass
    if limit:
        entries = cache_entries(Path(d))
        if sum(size for _, size in entries.values()) > limit:
            freed = prune(int(limit * 0.8), Path(d))
            log.info("looptune cache %s: pruned %.1f MB of least recently used builds "
                     "(LOOPTUNE_CACHE_MAX=%s)", d, freed / 1e6,
                     os.environ.get("LOOPTUNE_CACHE_MAX", "4G"))


def _atomic_write(path: Path, data: bytes, work: Path | None = None) -> None:
    fd, tmp = tempfile.mkstemp(dir=work or path.parent, prefix=f".{path.name[:_NAME_CHARS]}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

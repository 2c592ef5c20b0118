"""Compiling C to shared objects with gcc/clang, cached on disk by content.

The cache key hashes the source, the flags and the compiler's version. Entries are written to
a temporary name and renamed into place (atomic on POSIX), and each ``.so`` has a sidecar with
its own SHA-256: an entry whose bytes do not match (a partial write, a corrupted disk) is
rebuilt, never loaded. ``$LOOPTUNE_CACHE`` sets the directory (default ``~/.cache/looptune``).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
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


def flags_for(options: dict, parallel: bool) -> list[str]:
    opt = options.get("O", "3")
    flags = [f"-O{opt}", f"-march={options.get('march', 'native')}", "-fPIC", "-std=gnu11",
             "-fno-math-errno", "-fopenmp" if parallel else "-fopenmp-simd"]
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
    so, sidecar, src_path = d / f"{stem}.so", d / f"{stem}.sha256", d / f"{stem}.c"
    if so.exists() and sidecar.exists():
        try:
            if sidecar.read_text().strip() == _sha(so):
                return so
        except OSError:
            pass
        log.warning("looptune cache entry %s is corrupt or partial; rebuilding", so.name)
    try:
        _atomic_write(src_path, source.encode())
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{stem[:_NAME_CHARS]}-", suffix=".so")
        os.close(fd)
    except OSError as e:
        raise _cache_error(d, e) from None
    libs = [f for f in flags if f.startswith("-l")]  # libraries go after the source
    cmd = [cc, *(f for f in flags if not f.startswith("-l")), "-shared", "-o", tmp,
           str(src_path), *libs, "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise BuildError(f"{cc} failed on {src_path}:\n{proc.stderr.strip()}\n"
                         f"command: {' '.join(cmd)}", str(src_path), proc.stderr)
    try:
        digest = _sha(Path(tmp))
        os.replace(tmp, so)
        _atomic_write(sidecar, digest.encode())
    except OSError as e:
        raise _cache_error(d, e) from None
    return so


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

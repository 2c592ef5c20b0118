"""Run fuzz cases built with ASan+UBSan; started by test_fuzz.py in a subprocess.

An ASan-instrumented shared object cannot be loaded into an uninstrumented python, so this
process is started with the sanitizer runtimes preloaded (see ``sanitizer_env``). It reads a
JSON list of cases on stdin, each ``{"seed", "op", "params", "steps", "lowered"}`` with
``steps`` as written by ``looptune.schedule.steps.dumps``; for each it re-creates the operator,
replays the steps, checks the loop nest is the one the parent saw, builds with
``c -sanitize=address,undefined``, runs on exact-size arrays (so ASan's redzones border them)
and compares with numpy.

Protocol: before each case a line ``{"seed": S, "event": "start"}`` on stdout and a marker
line on stderr (sanitizer reports go to stderr, and the parent cuts stderr at the markers to
attribute a report to its case); after it ``{"seed": S, "event": "done", "error": null|str}``.
A sanitizer report ends the process (``halt_on_error``/``abort_on_error``); the parent then
blames the last started case and starts a new runner for the cases after it.

``python sanitizer_runner.py --oob`` runs a deliberately out-of-bounds C function instead,
so a test can check that the preloaded sanitizers really catch errors here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TARGET = "c -sanitize=address,undefined"
MARKER = "=== looptune fuzz case {seed} ==="


def sanitizer_env(base: dict | None = None) -> dict:
    """The environment a sanitized runner needs: ASan and UBSan runtimes preloaded, leak
    detection off (python itself leaks by design), abort on the first report."""
    env = dict(os.environ if base is None else base)

    def lib(name: str) -> str:
        return subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                              text=True, check=True).stdout.strip()
    env["LD_PRELOAD"] = f"{lib('libasan.so')}:{lib('libubsan.so')}"
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    return env


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _run_case(spec: dict) -> str | None:
    import looptune as lt
    from fuzz_gen import build_and_run, replay_case
    op, s = replay_case(spec["op"], spec["params"], spec["steps"])
    lowered = str(lt.lower(s, op.args))
    if lowered != spec["lowered"]:
        return f"replayed loop nest differs from the parent's:\n{lowered}"
    return build_and_run(op, s, TARGET, spec["seed"], guard=False)


def run_cases(specs: list[dict]) -> None:
    for spec in specs:
        _emit({"seed": spec["seed"], "event": "start"})
        os.write(2, (MARKER.format(seed=spec["seed"]) + "\n").encode())
        try:
            err = _run_case(spec)
        except Exception:  # noqa: BLE001 - any other exception is the finding
            err = traceback.format_exc()
        _emit({"seed": spec["seed"], "event": "done", "error": err})


# ---- the parent's side ---------------------------------------------------------------------

def run_batch(specs: list[dict], per_case_s: float = 20.0) -> dict[int, str | None]:
    """Run ``specs`` in sanitized runner processes; seed -> None (clean) or the failure
    (the sanitizer report, a mismatch, a traceback). A runner that dies or hangs is blamed on
    its last started case and a new one takes the cases after it."""
    results: dict[int, str | None] = {}
    todo = list(specs)
    env = sanitizer_env()
    while todo:
        out, err, rc = _spawn(todo, env, 30 + per_case_s * len(todo))
        started = None
        for line in out.splitlines():
            msg = json.loads(line) if line.startswith("{") else {}
            if msg.get("event") == "start":
                started = msg["seed"]
            elif msg.get("event") == "done":
                results[msg["seed"]] = msg["error"]
                started = None
        for seed, text in _split_stderr(err).items():   # reports that did not stop the run
            if seed in results and _is_report(text):
                results[seed] = (results[seed] or "") + "\nsanitizer report:\n" + text
        if started is None and rc != 0 and todo[0]["seed"] not in results:
            started = todo[0]["seed"]                    # died before its first case
        if started is not None:
            why = "timed out" if rc is None else f"exited with status {rc}"
            results[started] = f"sanitized runner {why} in this case:\n" + \
                _split_stderr(err).get(started, err)[-6000:]
        todo = [c for c in todo if c["seed"] not in results]
        if started is None and todo:                       # clean exit but cases missing
            for c in todo:
                results[c["seed"]] = f"runner exited ({rc}) without running this case:\n" + \
                    err[-3000:]
            todo = []
    return results


def _spawn(specs, env, timeout):
    cmd = [sys.executable, str(Path(__file__).resolve())]
    try:
        p = subprocess.run(cmd, input=json.dumps(specs), capture_output=True, text=True,
                           env=env, timeout=timeout, check=False)
        return p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return text(e.stdout), text(e.stderr), None


def _split_stderr(err: str) -> dict[int, str]:
    parts: dict[int, str] = {}
    seed = None
    head = MARKER.split("{seed}")[0]
    for line in err.splitlines(keepends=True):
        if line.startswith(head):
            seed = int(line[len(head):].split()[0])
            parts[seed] = ""
        elif seed is not None:
            parts[seed] += line
    return parts


def _is_report(text: str) -> bool:
    return "ERROR: AddressSanitizer" in text or "runtime error:" in text


OOB_SOURCE = """
#include <stdlib.h>
int write_past_end(int n) {
  int *a = (int *)malloc(sizeof(int) * n);
  for (int i = 0; i <= n; i++) a[i] = i;    /* one past the end */
  int r = a[0];
  free(a);
  return r;
}
"""


def run_oob() -> None:
    import cffi
    from looptune.backends.compiler import compile_shared, flags_for
    so = compile_shared(OOB_SOURCE, "gcc", flags_for({"sanitize": True}, False), name="oob")
    ffi = cffi.FFI()
    ffi.cdef("int write_past_end(int);")
    lib = ffi.dlopen(str(so))
    _emit({"event": "calling"})
    lib.write_past_end(13)
    _emit({"event": "returned"})


if __name__ == "__main__":
    if sys.argv[1:] == ["--oob"]:
        run_oob()
    else:
        run_cases(json.load(sys.stdin))

"""benchmarks/peers.py: option parsing (--halide, --log folders), the jobs and table of the
Halide Adams2019 column, its report as skipped when ``import halide`` fails, and timing the
auto-scheduled config of a log written as benchmarks/auto_schedule.py writes it (slow).

The suite never imports halide: the Halide parts run in peers.py's worker processes."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import peers
from peers import ADAMS, Job, Result

HALIDE_MISSING = "`import halide` failed: ModuleNotFoundError: No module named 'halide'"


def error_of(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit):
        peers.parse(argv)
    return capsys.readouterr().err


# ---- options ----------------------------------------------------------------------------------


def test_halide_columns_default_to_hand_and_adams():
    assert peers.parse([]).halide == ("hand", ADAMS)


@pytest.mark.parametrize("text, want", [("adams2019", (ADAMS,)), ("hand", ("hand",)),
                                        (" adams2019 , hand", ("hand", ADAMS)),
                                        ("none", ())])
def test_halide_option_picks_the_columns(text, want):
    assert peers.parse(["--halide", text]).halide == want


@pytest.mark.parametrize("text", ["adams", "hand,mullapudi", ","])
def test_unknown_halide_column_is_an_error_naming_it(capsys, text):
    err = error_of(capsys, ["--halide", text])
    assert "--halide: unknown Halide column(s)" in err and "hand, adams2019, or none" in err
    assert (text.split(",")[-1] if text != "," else "','") in err


def test_log_folder_stands_for_its_jsonl_files(tmp_path):
    folder = tmp_path / "auto200"
    folder.mkdir()
    for name in ("softmax.jsonl", "matmul.jsonl", "notes.txt"):
        (folder / name).write_text("")
    single = tmp_path / "conv2d.jsonl"
    single.write_text("")
    opts = peers.parse(["--log", str(folder), "--log", str(single)])
    assert opts.log == [str(folder / "matmul.jsonl"), str(folder / "softmax.jsonl"),
                        str(single)]


def test_log_folder_without_logs_and_missing_log_are_errors(capsys, tmp_path):
    assert "holds no *.jsonl log" in error_of(capsys, ["--log", str(tmp_path)])
    missing = str(tmp_path / "auto200")
    assert f"--log {missing}: no such log file or folder" in error_of(capsys, ["--log", missing])


# ---- jobs and table ---------------------------------------------------------------------------


def test_jobs_follow_the_halide_columns():
    peers.parse(["--quick"])
    both = peers.make_jobs(["sgemm", "blur"], [], {}, ("hand", ADAMS))
    halide = [j.label for j in both if j.system == "halide"]
    assert halide == ["halide", f"halide:{ADAMS}", "halide:inline", "halide:tiled",
                      f"halide:{ADAMS}"]
    assert {j.column for j in both if j.system == "halide"} == {"Halide hand",
                                                                 "Halide Adams2019"}
    only = peers.make_jobs(["sgemm"], [], {}, (ADAMS,))
    assert [j.variant for j in only if j.system == "halide"] == [ADAMS]
    assert not [j for j in peers.make_jobs(["sgemm"], [], {}, ()) if j.system == "halide"]


def test_tuned_jobs_only_for_operators_with_records():
    peers.parse(["--quick"])
    jobs = peers.make_jobs(["conv2d", "softmax"], ["x.jsonl"], {}, (),
                           {"conv2d": ["conv2d"], "softmax": []})
    assert [j.label for j in jobs if j.system == "looptune-tuned"] == ["looptune-tuned:conv2d"]


def test_fast_math_adds_a_looptune_variant_per_operator_and_the_worker_builds_it(monkeypatch):
    opts = peers.parse(["--quick", "--fast-math"])
    assert opts.fast_math
    jobs = peers.make_jobs(["blur"], ["x.jsonl"], {}, (), {"blur": ["blur"]}, fast_math=True)
    mine = [j.label for j in jobs if j.system.startswith("looptune")]
    assert mine == ["looptune-hand:blur", "looptune-hand:blur -fast-math",
                    "looptune-tuned:blur", "looptune-tuned:blur -fast-math"]
    assert not any("fast-math" in j.variant for j in peers.make_jobs(["blur"], [], {}, ()))
    out = peers.worker(Job("blur", "looptune-hand", "blur -fast-math"), peers._ARGS["blur"], 1,
                       [], True)
    assert out["seconds"] > 0
    # the variant's kernel is built with the option, the plain one without
    import looptune as lt
    built = []
    real = lt.build
    monkeypatch.setattr(lt, "build", lambda *a, **k: built.append(k["target"]) or real(*a, **k))
    inputs, output = peers._inputs("blur", peers._ARGS["blur"])
    for variant in ("blur -fast-math", "blur"):
        peers._looptune_call(Job("blur", "looptune-hand", variant), peers._ARGS["blur"], inputs,
                             output, 1, [])
    assert built == ["c -threads=1 -fast-math", "c -threads=1"]
    results = {Job("blur", "numpy"): Result([4e-3]),
               Job("blur", "looptune-hand", "blur"): Result([2e-3]),
               Job("blur", "looptune-hand", "blur -fast-math"): Result([1e-3])}
    row = peers.table(results, ["blur"], {}, False, ()).splitlines()[2]
    assert "| 1.000 (blur -fast-math) |" in row


def test_adams_reported_skipped_with_the_reason_when_halide_is_missing():
    peers.parse(["--quick"])
    skipped = {"halide": HALIDE_MISSING}
    jobs = peers.make_jobs(["softmax"], [], skipped, ("hand", ADAMS))
    assert not [j for j in jobs if j.system == "halide"]
    results = {j: Result(times=[1e-3]) for j in jobs}
    text = peers.table(results, ["softmax"], skipped, False, ("hand", ADAMS))
    head, _, row = text.splitlines()
    assert "| Halide hand ms | Halide Adams2019 ms |" in head
    assert "| skipped | skipped |" in row
    notes = peers.skip_notes(skipped, ("hand", ADAMS), {})
    assert notes == [f"halide (Halide hand, Halide Adams2019): skipped: {HALIDE_MISSING}"]


def test_auto_vs_adams_ratio_and_no_record_cell():
    peers.parse(["--quick"])
    results = {Job("softmax", "numpy"): Result([4e-3]),
               Job("softmax", "halide", ADAMS): Result([3e-3]),
               Job("softmax", "looptune-hand", "softmax"): Result([2.5e-3]),
               Job("softmax", "looptune-tuned", "softmax"): Result([1.5e-3]),
               Job("sgemm", "numpy"): Result([1e-3]),
               Job("sgemm", "halide", ADAMS): Result([], ["the output differs"]),
               Job("sgemm", "looptune-hand", "matmul"): Result([2e-3])}
    text = peers.table(results, ["softmax", "sgemm"], {}, True, (ADAMS,),
                       {"sgemm": "matmul: no record"})
    head, _, softmax, sgemm = text.splitlines()
    assert head.endswith("| looptune vs best peer | auto vs Adams2019 |")
    assert softmax.endswith("| 1.500 | 2.00x vs Halide Adams2019 (goal 1.10x met) | "
                            "2.00x (goal 1.50x met) |")
    assert "| 1.000 | error | -" in sgemm and "| no record | 0.50x vs numpy | - |" in sgemm


def test_main_without_halide_measures_no_halide_job(monkeypatch, capsys):
    """The project's venv has no halide: the Adams column is skipped with the reason and no
    worker is started for it (the workers are faked here)."""
    monkeypatch.setattr(peers, "probe", lambda m: HALIDE_MISSING if m == "halide" else None)
    started = []
    monkeypatch.setattr(peers, "run_job",
                        lambda job, opts: started.append(job) or {"seconds": 1e-3, "note": ""})
    assert peers.main(["--quick", "--only", "softmax", "--rounds", "1",
                       "--halide", "adams2019", "--no-floors"]) == 0
    out = capsys.readouterr().out
    assert {j.system for j in started} == {"numpy", "torch", "looptune-hand"}
    assert "Halide Adams2019 ms" in out and "Halide hand ms" not in out
    assert f"halide (Halide Adams2019): skipped: {HALIDE_MISSING}" in out


# ---- logs -------------------------------------------------------------------------------------


def test_log_without_a_record_of_the_workload_says_so(tmp_path):
    log = tmp_path / "softmax.jsonl"
    log.write_text("")
    names, why = peers.tuned_operators("softmax", (33, 77), [str(log)])
    assert names == []
    assert why.startswith("softmax: ") and "holds no usable correct record of softmax(33, 77" \
        in why and "no records" in why


@pytest.mark.slow
def test_auto_schedule_log_times_the_auto_config_at_odd_sizes(tmp_path):
    """A log that benchmarks/auto_schedule.py --out would write (``<op>.jsonl`` of the auto
    task of the example's algorithm) gives the tuned job its auto-scheduled config, built
    with peers.py's target and checked against numpy."""
    import looptune as lt
    from looptune.search import MeasureOption
    args = (33, 77)
    (op,) = peers._operators("softmax")
    log = tmp_path / "softmax.jsonl"
    out = op.algorithm(*args)      # as benchmarks/auto_schedule.py calls it
    lt.search.auto_schedule(list(out) if isinstance(out, (list, tuple)) else [out], trials=2,
                            log_file=str(log),
                            measure_option=MeasureOption(number=1, repeat=1, n_parallel=1))
    assert peers.tuned_operators("softmax", args, [str(log)]) == (["softmax"], "")
    inputs, output = peers._inputs("softmax", args)
    job = Job("softmax", "looptune-tuned", "softmax")
    run, how = peers._looptune_call(job, args, inputs, output, 1, [str(log)])
    assert how.startswith("auto-scheduled config #")
    run()
    np.testing.assert_allclose(output, op.reference_for(args)(*inputs), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("system, ours", [("numpy", False), ("torch", False),
                                          ("halide", False), ("looptune-hand", True)])
def test_the_peers_run_with_their_own_thread_pool_settings(monkeypatch, system, ours):
    """looptune's OpenBLAS timeout and OpenMP spin (set at import) reach only looptune's own
    jobs; the peers get their libraries' own defaults, spelled out so that a looptune import
    in the worker keeps them (torch's bundled libgomp read looptune's settings before); a
    user's own settings (no looptune mark) reach every job."""
    import subprocess

    from looptune.runtime_env import LIBRARY_DEFAULTS
    seen = {}

    def fake_run(cmd, env, **kw):
        seen.clear()
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, '{"seconds": 1.0, "note": ""}', "")
    monkeypatch.setattr(peers.subprocess, "run", fake_run)
    opts = peers.parse(["--threads", "2"])
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "18")
    monkeypatch.setenv("LOOPTUNE_BLAS_DEFAULTS", "1")
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("LOOPTUNE_OPENMP_DEFAULTS", "1")
    peers.run_job(Job("sgemm", system), opts)
    if ours:
        assert seen["OPENBLAS_THREAD_TIMEOUT"] == "18" and seen["GOMP_SPINCOUNT"] == "10000"
    else:
        assert seen["OPENBLAS_THREAD_TIMEOUT"] == LIBRARY_DEFAULTS["OPENBLAS_THREAD_TIMEOUT"]
        assert seen["GOMP_SPINCOUNT"] == LIBRARY_DEFAULTS["GOMP_SPINCOUNT"] == "300000"
        assert "LOOPTUNE_OPENMP_DEFAULTS" not in seen and "LOOPTUNE_BLAS_DEFAULTS" not in seen
    assert seen["OMP_NUM_THREADS"] == "2"
    monkeypatch.delenv("LOOPTUNE_BLAS_DEFAULTS")           # the user's own settings
    monkeypatch.delenv("LOOPTUNE_OPENMP_DEFAULTS")
    peers.run_job(Job("sgemm", system), opts)
    assert seen["OPENBLAS_THREAD_TIMEOUT"] == "18" and seen["GOMP_SPINCOUNT"] == "10000"


def test_auto_schedule_counts_the_trials_a_log_holds(tmp_path):
    """The table's "trials" column: distinct configs measured, not the --trials asked for
    (transpose's space ran out at 74 of 200); re-measures are no trials."""
    import json

    import auto_schedule
    log = tmp_path / "transpose.jsonl"
    rows = [{"config": {"index": i}, "kind": k} for i, k in
            ((1, "measure"), (2, "measure"), (2, "measure"), (1, "remeasure"))]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert auto_schedule._trials(str(log)) == 2


# ---- the machine's floors: why a workload falls short ------------------------------------------


def _results(times: dict) -> dict:
    """{(workload, system): ms} -> peers' results, one round each."""
    return {Job(w, s): Result([ms / 1e3]) for (w, s), ms in times.items()}


def test_floor_spec_counts_the_flop_of_the_examples_algorithms():
    from looptune.operators import load_operators
    from looptune.search import count_flop
    peers.parse([])
    for w in ("sgemm", "conv2d"):
        kind, flop = peers.floor_spec(w, peers.opts_args(w))
        op = load_operators(str(peers.EXAMPLES / peers.WORKLOADS[w][0]))[0]
        out = op.algorithm(*peers.opts_args(w))
        tensors = list(out) if isinstance(out, (list, tuple)) else [out]
        assert kind == "fma" and flop == count_flop(tensors) > 2e8
    assert peers.floor_spec("blur", peers.opts_args("blur")) == ("stream", (4096, 4096))
    assert peers.floor_spec("layernorm", peers.opts_args("layernorm")) == ("stream",
                                                                           (4096, 1024))


def test_verdicts_say_met_out_of_reach_or_within_reach_with_the_floor():
    peers.parse([])
    res = _results({("sgemm", "torch"): 5.88, ("sgemm", "looptune-hand"): 6.26,
                    ("sgemm", "numpy"): 6.48,
                    ("softmax", "torch"): 1.24, ("softmax", "looptune-hand"): 1.00,
                    ("layernorm", "torch"): 0.70, ("layernorm", "looptune-hand"): 0.69,
                    ("blur", "numpy"): 54.6, ("blur", "looptune-hand"): 50.0})
    floors = {"fma_gflops": 349.0, "stream_s": {"softmax": 0.61e-3, "layernorm": 0.62e-3,
                                                "blur": 2.5e-3}}
    lines = peers.verdicts(res, ["sgemm", "softmax", "layernorm", "blur"],
                           ("numpy", "torch"), ("looptune hand",), floors)
    sgemm, softmax, layernorm, blur = lines
    # 2.147 GFLOP at 349 GFLOP/s is 6.15 ms, under 1.1x torch (5.345 ms)...
    assert sgemm.startswith("sgemm: 0.94x torch: goal beyond the measured floor: 1.1x torch "
                            "is 5.345 ms, 115% of the speed of the floor (6.153 ms: 2.15 "
                            "GFLOP at the FMA peak measured by benchmarks/fma_peak.py, 349 "
                            "GFLOP/s), which torch beat (5.880 ms), so the floor is not tight")
    assert sgemm.endswith("looptune runs at 98% of it, torch at 105%")
    # ...and with a peak torch does not beat, out of reach
    (sgemm,) = peers.verdicts(res, ["sgemm"], ("numpy", "torch"), ("looptune hand",),
                              dict(floors, fma_gflops=380.0))
    assert sgemm.startswith("sgemm: 0.94x torch: goal out of reach here: 1.1x torch is "
                            "5.345 ms, under the floor of 5.651 ms")
    assert sgemm.endswith("torch runs at 96% of the floor's speed, looptune at 90%")
    assert softmax == "softmax: 1.24x torch: goal met"
    assert layernorm.startswith("layernorm: 1.01x torch: goal not met, within reach: 1.1x "
                                "torch needs 97% of the floor's speed (0.620 ms: y = 2x over "
                                "4096x1024 float32: 16 MiB read and 16 written)")
    assert layernorm.endswith("looptune runs at 90%, torch at 89%")
    # the streamed y = 2x was the faster floor: the verdict says so
    (layernorm,) = peers.verdicts(res, ["layernorm"], ("numpy", "torch"), ("looptune hand",),
                                  dict(floors, stream_nt={"layernorm": True}))
    assert "(0.620 ms: y = 2x over 4096x1024 float32: 16 MiB read and 16 written, streaming " \
        "stores)" in layernorm, layernorm
    assert blur.startswith("blur: 1.09x numpy: goal not met, within reach: 1.1x numpy needs "
                           "5% of the floor's speed")


def test_verdicts_without_floors_say_why_not():
    peers.parse([])
    res = _results({("softmax", "torch"): 1.0, ("softmax", "looptune-hand"): 1.0})
    (line,) = peers.verdicts(res, ["softmax"], ("torch",), ("looptune hand",),
                             {"error": "timed out after 900 s"})
    assert line == ("softmax: 1.00x torch: goal not met (the machine's floors were not "
                    "measured: timed out after 900 s)")
    (line,) = peers.verdicts(res, ["softmax"], ("torch",), ("looptune hand",), {"stream_s": {}})
    assert line.endswith("(the memory floor was not measured)")


def test_floors_worker_measures_the_peak_and_the_stream_floor():
    peers.parse(["--quick"])
    out = peers.floors_worker(["sgemm", "softmax"], 1, rounds=1)
    assert out["lanes"] in (4, 8, 16) and out["fma_gflops"] > 1.0
    assert set(out["stream_s"]) == {"softmax"} and 0 < out["stream_s"]["softmax"] < 0.1
    assert set(out["stream_nt"]) == {"softmax"} and out["stream_nt"]["softmax"] in (True, False)


def test_main_prints_a_verdict_per_workload_and_no_floors_skips_them(monkeypatch, capsys):
    monkeypatch.setattr(peers, "probe", lambda m: HALIDE_MISSING if m == "halide" else None)
    monkeypatch.setattr(peers, "run_job", lambda job, opts: {
        "seconds": 1e-3 if job.system.startswith("looptune") else 2e-3, "note": ""})
    asked = []
    monkeypatch.setattr(peers, "machine_floors",
                        lambda opts: asked.append(opts.workloads) or {"stream_s": {}})
    assert peers.main(["--quick", "--only", "softmax,layernorm", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert asked == [["softmax", "layernorm"]]
    assert "- softmax: 2.00x numpy: goal met\n- layernorm: 2.00x numpy: goal met" in out
    assert "hypervisor steal: " in out          # the host's share of the run, beside the table
    assert peers.main(["--quick", "--only", "softmax", "--rounds", "1", "--no-floors"]) == 0
    assert len(asked) == 1 and "goal met" not in capsys.readouterr().out


def test_cells_carry_the_rounds_spread_and_the_ratio_round_by_round():
    """With several rounds a cell shows ± half the rounds' range, and the ratio its range
    round by round and in how many rounds the goal was met (a verdict the noise can flip)."""
    peers.parse(["--quick"])
    results = {Job("blur", "numpy"): Result([6e-3, 8e-3, 7e-3]),
               Job("blur", "looptune-hand", "blur"): Result([5e-3, 8e-3, 6e-3])}
    text = peers.table(results, ["blur"], {}, False, ())
    row = text.splitlines()[2]
    assert "| 7.000 ±14% |" in row and "| 6.000 ±25% |" in row
    assert row.endswith("| 1.17x vs numpy (goal 1.10x met); rounds 1.00-1.20x, goal in 2/3 |")

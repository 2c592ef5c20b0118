"""A tuner guided by a gradient-boosted-tree cost model over loop-nest features.

Each config is described by the features of its lowered loop nest
(:mod:`looptune.search.features`), not by its knob values, so one model can learn from
several tasks. The loop:

1. the first ``n_init`` candidates are random (unless transferred data already trains a
   model);
2. configs are proposed in plans of ``plan_size`` (measured ``n_parallel`` at a time); before
   each plan, a scikit-learn ``HistGradientBoostingRegressor`` is retrained on every
   measured config (a plan of 8 rather than one per batch of 2 cut the model time about
   3-4x on the benchmark tasks). The target is, by ``objective``: ``"rank"`` (default) each
   config's throughput rank among the measured ones, scaled to [0, 1] — an order-only
   target that outliers and failed candidates cannot distort; or ``"log"``, log
   throughput. (A pairwise ranking model — a classifier on feature differences — ranked no
   better on the benchmark tasks' data and costs many more predictions, so it is not
   offered);
3. to propose a batch, simulated annealing over the model walks ``n_chains`` chains of
   neighbouring configs (one knob changed) from the best measured and best predicted configs,
   with a temperature falling over ``sa_steps`` steps, and computes the features of at most
   ``explore`` new configs (lowering is what costs: a few to a few tens of ms per config);
   ``random_share`` of that budget goes to random configs, for a global view of the space.
   Every scored, never-measured config joins a pool that the current model re-ranks each
   batch;
4. the plan is the pool's best predictions (with ``diversity`` > 0, traded for knob values
   that the plan does not have yet, among the best 4 plans' worth); each slot is instead a
   random config with probability ``eps``. No config is measured twice.

Transfer: ``transfer_logs=[paths]`` adds the records of *other* tasks of those logs (their
templates must be registered, i.e. imported). A second model, the transferred model, is
trained on them (each task's targets normalised on its own; records of this task are left to
``tune(resume=...)``). How it takes part is ``transfer_slots``:

- ``"warm"`` (default): a warm start. The first ``n_warm`` trials are the transferred model's
  best predictions (spread over knob values as ``diversity`` asks), explored and ranked on the
  side with a generator, pool and feature cache of their own. Then the search runs as without
  transfer: the same random draws, the same pool, and a model that never learns from the warm
  picks (nor starts annealing chains from them), so it cannot be drawn into the region of the
  other task's optimum. Transfer then costs the search ``n_warm`` trials of its budget and
  adds ``n_warm`` informed early candidates.
- ``"start"``: every other pick of the random start is the transferred model's best
  unmeasured config instead, and this task's model learns from them. The transferred model is
  also trained on this task's records, weighted 0.5 at first and less as they accumulate
  (0.5 x 2 ``n_init`` / their number, past 2 ``n_init``).
- ``"random"``: as ``"start"``, and afterwards also every other one of the ``eps`` share of
  random picks.

With ``"start"`` and ``"random"`` the transferred picks must earn their slots: once at least
``min_compare`` of them and of the random picks are measured, transfer is set aside for good
if its picks rank lower, on average, among this task's measurements than the random picks do.
Why ``"warm"`` is the default: it is the one mode that cannot lead the search astray: under
a deterministic cost its search makes the very picks of the search without transfer (tested),
so it can only lose the ``n_warm`` trials it gives up, and gain its informed early picks. On
the benchmark, ``"start"`` raised the means once (sgemm 401 -> 435, the conv2d layer 368 ->
401 GFLOP/s, 5 seeds, diversity 0) and once left 4 conv2d seeds of 5 near sgemm's best
register tile (8x1x32, 348-374 GFLOP/s, where the search without transfer found 8x2x16 at
404-429; that run was also measured last of each seed's runs, see the benchmark's notes on
run order). (Letting the two models' picks alternate raised the mean best on sgemm but lost
up to 8% in one seed of six; ``"random"`` raised sgemm's and lowered the conv2d layer's.)
"""
from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence

import numpy as np

from ..errors import LooptuneError
from .features import config_features
from .measure import MeasureResult
from .space import ConfigEntity
from .task import Task
from .tuner import Tuner

log = logging.getLogger("looptune.search.gbt_tuner")

OBJECTIVES = ("rank", "log")
TRANSFER_SLOTS = ("warm", "start", "random")


def _targets(fit: np.ndarray, objective: str) -> np.ndarray:
    """Training targets from fitness values (0 = failed), higher is better."""
    fit = np.asarray(fit, dtype=np.float64)
    ok = fit > 0
    if objective == "log":
        if not ok.any():
            return np.zeros_like(fit)
        y = np.empty_like(fit)
        y[ok] = np.log(fit[ok]) - np.log(fit[ok].max())
        y[~ok] = y[ok].min() - 1.0
        return y
    from scipy.stats import rankdata  # a scikit-learn dependency
    return (rankdata(fit, method="average") - 1.0) / max(1, len(fit) - 1)   # ties share


def _one_thread():
    """OpenMP limited to one thread for the model: on a few hundred rows threads only add
    overhead, and on a machine whose cores are busy measuring (or shared) scikit-learn's
    OpenMP loops slow down 10-100x from spinning threads."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="openmp")


class GBTTuner(Tuner):
    """Cost-model-guided search: gradient-boosted trees on loop-nest features, simulated
    annealing over the model, an ``eps`` share of random configs, optional transfer.

    ``explore`` new configs are scored per plan, ``random_share`` of them random. On
    benchmarks/search_efficiency.py (3 seeds, 100 trials) going from 32 and 0.25 to these
    defaults raised the mean best from 311 to 383 GFLOP/s on sgemm 512 and from 350 to 361
    on a ResNet conv2d layer. At 200 trials (plans of 8), ``diversity=0.5`` rather than 0
    raised the mean best over 5 seeds from 401 to 452 GFLOP/s on sgemm and from 368 to 411 on
    the conv2d layer; in the run of every tuner (build/se200e) GBT's mean best was 468 on
    sgemm and 414 on the conv2d layer (random search 430 and 363 over 3 seeds), with 17-20 s
    of model time per run (lowering for the features dominates it).
    """

    def __init__(self, task: Task, seed: int | None = None, objective: str = "rank",
                 n_init: int = 12, eps: float = 0.1, explore: int = 64, n_chains: int = 8,
                 sa_steps: int = 12, random_share: float = 0.5, plan_size: int = 8,
                 diversity: float = 0.5,
                 transfer_logs: Sequence | None = None, transfer_slots: str = "warm",
                 n_warm: int = 6, max_transfer: int = 400, min_compare: int = 4,
                 model_params: dict | None = None):
        super().__init__(task, seed)
        if objective not in OBJECTIVES:
            raise LooptuneError(f"GBTTuner: objective must be one of {', '.join(OBJECTIVES)}; "
                                f"got {objective!r}")
        if not 0.0 <= eps <= 1.0 or not 0.0 <= random_share <= 1.0 or n_init < 1 \
                or explore < 1 or n_chains < 1 or plan_size < 1 or not diversity >= 0.0 \
                or n_warm < 0:
            raise LooptuneError("GBTTuner: need 0 <= eps <= 1, 0 <= random_share <= 1, "
                                "n_init >= 1, explore >= 1, n_chains >= 1, "
                                "plan_size >= 1, diversity >= 0 and n_warm >= 0")
        self.diversity = diversity
        if transfer_slots not in TRANSFER_SLOTS:
            raise LooptuneError(f"GBTTuner: transfer_slots must be one of "
                                f"{', '.join(TRANSFER_SLOTS)}; got {transfer_slots!r}")
        self.transfer_slots = transfer_slots
        self.n_warm = n_warm
        self._warm: set[int] = set()     # the warm start's picks, kept out of this task's model
        self._warm_pending = transfer_slots == "warm"
        self.plan_size = plan_size
        self._plan: list[int] = []       # proposed (visited), not yet handed out
        self._stale = False
        self.random_share = random_share
        self.objective, self.n_init, self.eps = objective, n_init, eps
        self.explore, self.n_chains, self.sa_steps = explore, n_chains, sa_steps
        self.min_compare = min_compare
        self.model_params = {"max_iter": 120, "learning_rate": 0.1, "max_leaf_nodes": 15,
                             "min_samples_leaf": 3, "l2_regularization": 1.0,
                             "early_stopping": False}
        self.model_params.update(model_params or {})
        self._feat: dict[int, np.ndarray | None] = {}
        self._fit: dict[int, float] = {}                # measured index -> fitness
        self._pool: dict[int, None] = {}                # scored, never proposed
        self._dims = self.space.dims
        self.model = None                               # the model that anneals
        self._models: dict[str, object] = {}            # "transfer" / "target"
        self._slot: dict[int, str] = {}                 # random slot's pick -> "random"/"transfer"
        self._random_slots = 0
        self.active = "target"
        self.transfer_trusted = True
        # transfer-only randomness has its own generator: self.rng draws as without transfer
        self._xrng = np.random.default_rng(None if seed is None else [seed, 0x7f4a])
        self._src_x, self._src_y = self._load_transfer(transfer_logs or (), max_transfer)
        if len(self._src_y):
            self.active = "transfer"
            self._retrain()

    @property
    def n_transferred(self) -> int:
        """How many records of other tasks the transferred model learns from."""
        return len(self._src_y)

    # ---- features ----------------------------------------------------------------------------

    def features(self, index: int) -> np.ndarray | None:
        """The loop-nest features of config ``index`` (cached); None for an invalid config."""
        if index not in self._feat:
            try:
                self._feat[index] = config_features(self.task, self.space.get(index))
            except Exception as e:  # noqa: BLE001 - a template bug: measuring records it
                log.debug("GBTTuner: config %d of %s: the template raised %s: %s", index,
                          self.task.key, type(e).__name__, e)
                self._feat[index] = None
        return self._feat[index]

    # ---- proposing ---------------------------------------------------------------------------

    def has_next(self) -> bool:
        return bool(self._plan) or super().has_next()

    def next_batch(self, n: int) -> list[ConfigEntity]:
        """The next ``n`` configs of the plan; an empty plan is refilled with ``plan_size``
        configs chosen by a model retrained on every measurement so far."""
        if not self._plan and self._warm_pending:
            self._warm_pending = False
            self._plan = self._warm_plan()
        if not self._plan:
            if self._stale:
                self._retrain()
                self._stale = False
            self._plan = self._make_plan(max(n, self.plan_size))
        out, self._plan = self._plan[:n], self._plan[n:]
        return [self.space.get(i) for i in out]

    def _make_plan(self, n: int) -> list[int]:
        target = self._models.get("target")
        xfer = self._models.get("transfer") if self.transfer_trusted else None
        if self.transfer_slots == "warm" or \
                (target is not None and self.transfer_slots == "start"):
            xfer = None                          # as without transfer
        ranked: list[int] = []
        xranked: list[int] = []
        if target is not None:
            self._explore()                      # as without transfer
            ranked = self._ranked_pool(target)
        elif xfer is not None:
            with self._own_rng():                # the random start's draws stay aligned
                self._explore()
        if xfer is not None:
            xranked = self._ranked_pool(xfer)
        out: list[int] = []
        covered: list[set] = [set() for _ in self._dims]      # knob values picked in this plan
        for k in range(n):
            while ranked and ranked[0] in self.visited:
                ranked.pop(0)
            if target is not None and ranked and not self.rng.random() < self.eps:
                i = ranked.pop(self._diverse_pick(ranked, covered, n))
            else:
                # a random pick of the search without transfer (drawn even when transfer
                # replaces it, so the draws that follow stay those of that search): every
                # other one goes to the transferred model while its picks earn their slots
                i = self._random_unvisited()
                self._random_slots += 1
                kind = "random"
                if xfer is not None and self._random_slots % 2 == 1:
                    while xranked and xranked[0] in self.visited:
                        xranked.pop(0)
                    if xranked:
                        i, kind = xranked.pop(0), "transfer"
                if i is not None and self.n_transferred and self.transfer_slots != "warm":
                    self._slot[i] = kind
            if i is not None and self._take(i):
                out.append(i)
                for c, v in zip(covered, self.space.vector(i)):
                    c.add(v)
        for i in out:
            self._pool.pop(i, None)
        return out

    def _warm_plan(self) -> list[int]:
        """The warm start: the transferred model's ``n_warm`` best predictions (spread over
        knob values as ``diversity`` asks), explored and ranked on the side: the random
        draws, pool and feature cache of the search of this task stay as without transfer."""
        xfer = self._models.get("transfer")
        if xfer is None or self.n_warm == 0:
            return []
        own = self._pool, self._feat, self.model
        self._pool, self._feat, self.model = {}, dict(self._feat), xfer
        try:
            with self._own_rng():
                self._explore()
            ranked = self._ranked_pool(xfer)
            out: list[int] = []
            covered: list[set] = [set() for _ in self._dims]
            while ranked and len(out) < self.n_warm:
                i = ranked.pop(self._diverse_pick(ranked, covered, self.n_warm))
                if self._take(i):
                    out.append(i)
                    for c, v in zip(covered, self.space.vector(i)):
                        c.add(v)
        finally:
            self._pool, self._feat, self.model = own
        self._warm.update(out)
        self._slot.update(dict.fromkeys(out, "transfer"))
        self._stale = True                       # the transferred model is no longer needed
        log.info("GBTTuner: warm start with %d configs from the transferred model", len(out))
        return out

    def _diverse_pick(self, ranked: list[int], covered: list[set], n: int) -> int:
        """Where in ``ranked`` (best first) the next model pick is: the best one, or with
        ``diversity`` > 0, the one of the best ``4 n`` that maximises its rank score (1 for
        the best, falling linearly) + ``diversity`` x the share of its knob values that no
        config of this plan has yet: a plan spread over the space rather than 8 neighbours
        of one config (AutoTVM's submodular pick works the same way)."""
        if self.diversity <= 0.0:
            return 0
        window = [k for k in range(min(len(ranked), 4 * n)) if ranked[k] not in self.visited]
        if not window:
            return 0
        span = max(1, 4 * n)
        best, best_val = window[0], -math.inf
        for k in window:
            vec = self.space.vector(ranked[k])
            new = sum(1 for c, v in zip(covered, vec) if v not in c) / max(1, len(vec))
            val = 1.0 - k / span + self.diversity * new
            if val > best_val:
                best, best_val = k, val
        return best

    @contextlib.contextmanager
    def _own_rng(self):
        """Inside, self.rng is the transfer-only generator."""
        self.rng, self._xrng = self._xrng, self.rng
        try:
            yield
        finally:
            self.rng, self._xrng = self._xrng, self.rng

    def _ranked_pool(self, model=None) -> list[int]:
        cands = [i for i in self._pool if i not in self.visited]
        if not cands:
            return []
        scores = self._predict(cands, model)
        order = sorted(range(len(cands)), key=lambda k: (-scores[k], cands[k]))
        return [cands[k] for k in order]

    def _predict(self, indices: Sequence[int], model=None) -> np.ndarray:
        model = model or self.model
        x = np.stack([self._feat[i] for i in indices])
        with _one_thread():
            return model.predict(x)

    def _explore(self) -> None:
        """Simulated annealing over the model; scored new configs join the pool."""
        budget = self.explore
        for _ in range(round(self.explore * self.random_share)):   # a global view: random
            i = self._random_unvisited()
            if i is not None and i not in self._feat:
                budget -= 1
                if self.features(i) is not None:
                    self._pool[i] = None
        chains = self._chain_starts()
        if not chains:
            return
        scores = list(self._predict(chains))
        scale = max(float(np.std(scores)), 1e-9)
        for step in range(self.sa_steps):
            if budget <= 0:
                break
            temp = 1.0 * (0.05 / 1.0) ** (step / max(1, self.sa_steps - 1))
            moves = []
            for c in chains:
                j = self._neighbour(c)
                if j is not None and j not in self._feat:
                    budget -= 1
                if j is not None and self.features(j) is not None:
                    moves.append(j)
                    if j not in self.visited:
                        self._pool[j] = None
                else:
                    moves.append(None)
            valid = [j for j in moves if j is not None]
            if not valid:
                continue
            pred = dict(zip(valid, self._predict(valid)))
            for k, j in enumerate(moves):
                if j is None:
                    continue
                delta = (pred[j] - scores[k]) / scale
                if delta >= 0 or self.rng.random() < math.exp(delta / temp):
                    chains[k], scores[k] = j, pred[j]

    def _chain_starts(self) -> list[int]:
        best = sorted((i for i in self._fit if i not in self._warm),
                      key=lambda i: (-self._fit[i], i))
        starts = [i for i in best if self._feat.get(i) is not None][:self.n_chains // 2]
        for i in self._ranked_pool():
            if len(starts) >= self.n_chains:
                break
            if i not in starts:
                starts.append(i)
        for _ in range(self.n_chains - len(starts)):
            i = self._random_unvisited()
            if i is not None and self.features(i) is not None:
                starts.append(i)
        return starts

    def _neighbour(self, index: int) -> int | None:
        vec = list(self.space.vector(index))
        movable = [k for k, d in enumerate(self._dims) if d > 1]
        if not movable:
            return None
        for _ in range(8):
            cand = list(vec)
            k = int(self.rng.choice(movable))
            d = self._dims[k]
            if self.rng.random() < 0.5:                      # adjacent (splits are ordered)
                step = 1 if self.rng.random() < 0.5 else -1
                cand[k] = vec[k] + step if 0 <= vec[k] + step < d else vec[k] - step
            else:
                other = int(self.rng.integers(d - 1))
                cand[k] = other if other < vec[k] else other + 1
            j = self.space.index_of(cand)
            if j not in self.visited or j in self._warm:     # scored, but never proposed
                return j
        return None

    # ---- learning ----------------------------------------------------------------------------

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            fit = self.fitness(r)
            self._fit[c.index] = fit
            self._pool.pop(c.index, None)
        self._stale = True            # retrained when the plan runs out

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        idx = [i for i in self._fit if i not in self._warm and self.features(i) is not None]
        if not idx:
            return np.empty((0, 0)), np.empty(0)
        x = np.stack([self._feat[i] for i in idx])
        y = _targets(np.array([self._fit[i] for i in idx]), self.objective)
        return x, y

    def _new_model(self):
        from sklearn.ensemble import HistGradientBoostingRegressor
        return HistGradientBoostingRegressor(random_state=self.seed or 0, **self.model_params)

    def _retrain(self) -> None:
        with _one_thread():
            self._fit_models()

    def _fit_models(self) -> None:
        x, y = self._training_set()
        n_ok = sum(1 for i in self._fit if self._fit[i] > 0 and i not in self._warm)
        self._models = {}
        if len(self._src_y) and (self.transfer_slots != "warm" or self._warm_pending):
            xs, ys = self._src_x, self._src_y
            # the transferred records count less as this task's own accumulate
            w_src = np.full(len(ys), 0.5 * min(1.0, 2.0 * self.n_init / max(1, len(y))))
            if len(y):
                xs, ys = np.vstack([xs, x]), np.concatenate([ys, y])
                w_src = np.concatenate([w_src, np.ones(len(y))])
            self._models["transfer"] = self._new_model().fit(xs, ys, sample_weight=w_src)
        if n_ok >= self.n_init and len(y) >= 2:
            self._models["target"] = self._new_model().fit(x, y)
        self._choose_model()

    def _choose_model(self) -> None:
        """The target-only model anneals once it exists (the transferred one before); the
        transferred model is set aside for good once its picks rank lower than the random
        picks among this task's measurements."""
        if self.transfer_trusted and "transfer" in self._models:
            rank = dict(zip(self._fit, _targets(list(self._fit.values()), "rank")))
            by = {"random": [], "transfer": []}
            for i, kind in self._slot.items():
                if i in rank:
                    by[kind].append(rank[i])
            if min(len(v) for v in by.values()) >= self.min_compare and \
                    np.mean(by["transfer"]) < np.mean(by["random"]):
                self.transfer_trusted = False
                log.info("GBTTuner: transfer set aside: its %d picks rank %.2f on average among "
                         "this task's measurements, %d random picks %.2f", len(by["transfer"]),
                         np.mean(by["transfer"]), len(by["random"]), np.mean(by["random"]))
        self.active = "target" if "target" in self._models else \
            "transfer" if self._models else "target"
        self.model = self._models.get(self.active)

    # ---- transfer ----------------------------------------------------------------------------

    def _load_transfer(self, logs: Sequence, limit: int) -> tuple[np.ndarray, np.ndarray]:
        if not logs:
            return np.empty((0, 0)), np.empty(0)
        from .log import load_records
        from .template import get_template
        by_task: dict = {}
        for r in load_records(list(logs)):
            if r.task != self.task.key:
                by_task.setdefault(r.task, []).append(r)
        xs, ys = [], []
        per_task = max(1, limit // max(1, len(by_task)))
        for key, recs in by_task.items():
            try:
                task = Task(get_template(key.name), key.args, key.target)
            except Exception as e:  # noqa: BLE001 - another task's template: skip its records
                log.warning("GBTTuner: cannot use the records of %s for transfer: %s", key,
                            _why(e))
                continue
            feats, fits, bad = self._transfer_features(task, self._pick_records(recs, per_task))
            if bad:
                log.warning("GBTTuner: transfer skips %d configs of %s that its template "
                            "rejects (e.g. %s)", len(bad), key, bad[0])
            if len(feats) >= 2:
                xs.append(np.stack(feats))
                ys.append(_targets(np.array(fits), self.objective))
        if not xs:
            return np.empty((0, 0)), np.empty(0)
        log.info("GBTTuner: %d transferred records from %d tasks", sum(map(len, ys)), len(ys))
        return np.vstack(xs), np.concatenate(ys)

    @staticmethod
    def _transfer_features(task: Task, records: list) -> tuple[list, list, list[str]]:
        """(features, fitness, why each rejected config failed) of ``records`` of ``task``.
        A config whose template raises anything (not only a LooptuneError: another
        operator's template may raise what it likes) is skipped, not fatal."""
        feats, fits, bad = [], [], []
        for r in records:
            try:
                f = config_features(task, task.config_space.from_json(r.config))
            except (LooptuneError, IndexError):
                f = None                        # no longer fits the template's knobs
            except Exception as e:  # noqa: BLE001 - the other template's own failure
                bad.append(f"config {r.index}: {_why(e)}")
                continue
            if f is not None:
                feats.append(f)
                fits.append(r.gflops or (1.0 / r.cost if r.ok else 0.0))
        return feats, fits, bad

    def _pick_records(self, recs: list, limit: int) -> list:
        """Distinct configs; the best half of the budget, the rest spread over the others."""
        uniq = list({r.index: r for r in recs}.values())
        if len(uniq) <= limit:
            return uniq
        uniq.sort(key=lambda r: r.cost)
        top, rest = uniq[:limit // 2], uniq[limit // 2:]
        pick = self._xrng.choice(len(rest), size=limit - len(top), replace=False)
        return top + [rest[int(k)] for k in sorted(pick)]


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"

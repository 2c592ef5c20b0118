"""One config, and one measurement, per distinct program.

A template reads only some of its knobs for a given config: the knobs of a stage it inlined,
the vector width of a loop it did not vectorize, and so on. Configs that differ only in knobs
nobody read build the same program, and so may configs whose different values give the same
schedule. Before a tuner's proposals are measured:

- :func:`canonical` runs the template once and resets every knob it did not read to its
  first choice: such configs become one *canonical* config (the one measured and logged);
- :class:`ProgramSet` keys each program by its canonical config or, for templates whose
  schedule steps and compute DAG are all that they build (``Template.steps_identify_program``:
  the auto scheduler's sketches), by those: a program measured before is not built again.
  The proposal is then answered with the earlier result, which the tuner learns from (it sees
  the config visited) but which is not a new trial and is not logged again.

```python
programs = ProgramSet(task)
for res, fresh in programs.measure(measurer, batch, tuner):   # in batch order
    ...                                  # fresh: measured now; else an earlier result
```
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence

from ..errors import LooptuneError
from .space import ConfigEntity

log = logging.getLogger("looptune.search.programs")

STALE_LIMIT = 2000     # proposals in a row that were all measured before: the space is spent


def canonical(task, config: ConfigEntity) -> tuple[ConfigEntity, str | None]:
    """``config`` with every knob the template did not read reset to its first choice, and
    the key of its program: the canonical index, or a digest of the steps and the DAG (see
    the module docstring), ``"invalid:<index>"`` when
    the schedule primitives refuse it (the canonical config is refused alike: it reads the
    same knobs up to the refusal), None when the template fails otherwise (the measurement
    will record it)."""
    space = task.config_space
    cfg = config.fresh(space)
    try:
        s, tensors = task._call(cfg)
    except LooptuneError:
        s = tensors = None
    except Exception as e:  # noqa: BLE001 - a template bug: the measurement records it
        log.debug("config %d of %s: the template raised %s", config.index, task.key, e)
        return config, None
    vec = [v if name in cfg.used else 0
           for v, name in zip(space.vector(config.index), space.knobs)]
    index = space.index_of(vec)
    out = config if index == config.index else space.get(index)
    if s is None:
        return out, f"invalid:{index}"
    key = steps_key(task, s, tensors)
    return out, key if key is not None else f"config:{index}"


def steps_key(task, s, tensors) -> str | None:
    """The program key of schedule ``s`` of ``tensors`` (an instance of ``task``) where the
    template's steps and DAG are all it builds (``Template.steps_identify_program``): a
    digest of both; else None."""
    if not getattr(task.template, "steps_identify_program", False):
        return None
    from ..schedule.steps import dumps
    text = dumps(s.steps) + "\n" + _dag_text(tensors)
    return hashlib.sha256(text.encode()).hexdigest()


def _dag_text(tensors) -> str:
    from ..lang.tensor import ComputeOp
    from ..schedule.schedule import topo_ops
    outs = [t for t in tensors if isinstance(t.op, ComputeOp)]
    return "\n".join(f"{op.output.name}|{list(op.output.shape)}|{op.output.dtype}|"
                     f"{op.body if isinstance(op, ComputeOp) else 'placeholder'}"
                     for op in topo_ops(outs))


class ProgramSet:
    """The programs a tuner has measured, by key (see the module docstring)."""

    def __init__(self, task):
        self.task = task
        self.results: dict[str, object] = {}       # key -> the result that measured it
        self._indexed = 0                           # tuner.history entries taken in
        self.stale = 0                              # proposals in a row answered from before
        self.duplicates = 0                         # proposals answered from before, in all

    def _take_history(self, tuner) -> None:
        """Earlier results (resumed from a log, or loaded) key their programs too."""
        for res in tuner.history[self._indexed:]:
            _, key = canonical(self.task, res.config)
            if key is not None:
                self.results.setdefault(key, res)
        self._indexed = len(tuner.history)

    def measure(self, measurer, batch: Sequence[ConfigEntity], tuner
                ) -> Iterator[tuple[object, bool]]:
        """Measure the distinct new programs of ``batch`` (as canonical configs, marked
        visited in ``tuner``); yields ``(result, fresh)`` per proposal, in batch order, each
        as soon as it is known."""
        self._take_history(tuner)
        plan: list[str] = []
        todo: dict[str, ConfigEntity] = {}
        for k, cfg in enumerate(batch):
            canon, key = canonical(self.task, cfg)
            tuner.visited.add(canon.index)
            key = key if key is not None else f"raw:{k}"      # measured as it is
            plan.append(key)
            if key not in self.results and key not in todo:
                todo[key] = canon
        keys = iter(todo)
        results = measurer.measure(list(todo.values()))
        got: dict[str, object] = {}
        done: set[str] = set()
        for key in plan:
            if key in todo and key not in done:
                while key not in got:                 # results come in the order of todo
                    got[next(keys)] = next(results)
                done.add(key)
                if not key.startswith("raw:"):
                    self.results[key] = got[key]
                self.stale = 0
                yield got[key], True
                continue
            self.stale += 1
            self.duplicates += 1
            yield (got[key] if key in got else self.results[key]), False
        self._indexed = len(tuner.history)

    @property
    def spent(self) -> bool:
        """So many proposals in a row were programs measured before that the space's
        distinct programs look exhausted."""
        return self.stale >= STALE_LIMIT

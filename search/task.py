"""Tasks: one template, its arguments and a target — the unit that is tuned.

``create_task`` runs the template once with a :class:`ConfigSpace` to collect the knobs, and
counts the FLOPs of the compute DAG it returns. ``task.instantiate(config)`` runs it again with
one config. Worker processes rebuild a task from :meth:`Task.spec`: the args, the target and
the template's own spec (:meth:`Template.spec`, re-created by its kind).
"""
from __future__ import annotations

import logging
import re
from typing import Any

from ..errors import LooptuneError, ScheduleError
from ..lang.tensor import Tensor
from ..schedule.schedule import Schedule
from .flops import count_flop
from .space import ConfigEntity, ConfigSpace, FallbackConfig
from .template import TaskKey, Template, canonical_target, get_template, template_from_spec

log = logging.getLogger("looptune.search.task")


class Task:
    """A template with concrete args for a target: its config space, FLOPs and instances."""

    def __init__(self, tpl: Template, args: tuple, target: str = "c"):
        self.template = tpl
        self.name = tpl.name
        self.args = tpl.canonical_args(tuple(args))
        self.target = canonical_target(target)
        space = ConfigSpace(f"{self.name}{_short(self.args)}")
        try:
            s, tensors = self._call(space)
        except ScheduleError as e:
            raise LooptuneError(f"template '{self.name}' raised while its config space was "
                                f"collected (every knob at its first choice): {e}; the first "
                                "choice of every knob must give a valid schedule") from e
        unread = [n for n in space.knobs if n not in space.used]
        if unread:
            log.info("template '%s' defines knobs %s but never reads them (cfg[name]); their "
                     "values cannot change the schedule", self.name, unread)
        self.config_space = space
        self.flop: int | float | None = space.flop if space.flop is not None else \
            count_flop(tensors)
        self.func_name = _c_ident(self.name)

    @property
    def key(self) -> TaskKey:
        """``(name, args, target)``: what identifies this task in tuning logs."""
        return TaskKey(self.name, self.args, self.target)

    def _call(self, cfg) -> tuple[Schedule, list[Tensor]]:
        out = self.template.func(cfg, *self.args)
        if not (isinstance(out, (tuple, list)) and len(out) == 2
                and isinstance(out[0], Schedule)):
            raise LooptuneError(f"template '{self.name}' must return (schedule, tensors); got "
                                f"{type(out).__name__}")
        s, tensors = out
        tensors = list(tensors)
        if not tensors or not all(isinstance(t, Tensor) for t in tensors):
            raise LooptuneError(f"template '{self.name}' must return a list of tensors (the "
                                "build arguments) after its schedule")
        return s, tensors

    def instantiate(self, config: ConfigEntity | int | None = None
                    ) -> tuple[Schedule, list[Tensor]]:
        """Run the template with ``config`` (a ConfigEntity, an index, or None for the
        fallback). Raises ScheduleError when the config makes an invalid schedule."""
        if config is None:
            return self._call(FallbackConfig())
        if not isinstance(config, ConfigEntity):
            config = self.config_space.get(config)
        cfg = config.fresh(self.config_space)
        out = self._call(cfg)
        missing = set(self.config_space.knobs) - cfg.defined
        if missing:
            raise LooptuneError(f"template '{self.name}' did not define knobs "
                                f"{sorted(missing)} for config {config.index}; define every "
                                "knob for every config")
        unused = set(self.config_space.knobs) - cfg.used
        if unused:
            log.debug("template '%s': knobs %s were defined but never read", self.name,
                      sorted(unused))
        return out

    def spec(self) -> dict[str, Any]:
        """What a worker process needs to rebuild this task (JSON-able): the template's
        spec (its kind, name and how to find or re-create it), the args and the target."""
        return {**self.template.spec(), "name": self.name, "args": list(self.args),
                "target": self.target}

    def __repr__(self) -> str:
        return (f"Task({self.name}{_short(self.args)}, target='{self.target}', "
                f"{self.config_space.size} configs)")


def _short(args: tuple) -> str:
    return "(" + ", ".join(repr(a) for a in args) + ")"


def _c_ident(name: str) -> str:
    s = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return s if s and not s[0].isdigit() else "t_" + s


def create_task(name: str, args=(), target="c") -> Task:
    """The task of template ``name`` called with ``args`` (a tuple) for ``target``."""
    if not isinstance(args, (tuple, list)):
        raise LooptuneError(f"create_task('{name}'): args must be a tuple; got {args!r}")
    return Task(get_template(name), tuple(args), target)


# ---- workers: rebuilding a task from its spec --------------------------------------------

_TASKS: dict[tuple, Task] = {}


def task_from_spec(spec: dict) -> Task:
    """The task a :meth:`Task.spec` describes (cached per process)."""
    key = (spec["name"], repr(spec["args"]), spec["target"])
    task = _TASKS.get(key)
    if task is None:
        task = _TASKS[key] = Task(template_from_spec(spec), tuple(spec["args"]),
                                  spec["target"])
    return task

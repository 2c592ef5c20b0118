"""Templates: schedule functions with knobs, their registry and the dispatch context.

``@template("matmul")`` registers ``def matmul(cfg, N, M, K): ... return s, tensors``. Calling
``matmul(N, M, K)`` (without ``cfg``) dispatches:

- inside ``apply_history_best(log)``, the log's best correct config for this task is used (a
  task missing from the log falls back, with a warning naming its key);
- elsewhere, a :class:`~looptune.search.space.FallbackConfig` is used, and a warning says so
  once per task.

During tuning, a :class:`~looptune.search.task.Task` calls the function with one specific
:class:`~looptune.search.space.ConfigEntity` instead (``Template.func``).

Templates come in kinds (:data:`TEMPLATE_KINDS`): a ``function`` template is a decorated
function, found in a worker process by its module or file (or sent by value); a ``dag``
template (:class:`DagTemplate`, the auto scheduler's) carries its compute DAG and the name of
the sketch function that schedules it. ``template.spec()`` is the JSON-able description a
worker process re-creates it from (:func:`template_from_spec`).
"""
from __future__ import annotations

import base64
import contextvars
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from ..backends.target import Target
from ..errors import LooptuneError
from .space import FallbackConfig

if TYPE_CHECKING:
    from ..lang.tensor import Tensor
    from .space import ConfigEntity

log = logging.getLogger("looptune.search.template")

_REGISTRY: dict[str, Template] = {}
_MAIN_MODULES = ("__main__", "__mp_main__")

# The one piece of global state: the apply_history_best contexts entered, innermost last.
_DISPATCH: contextvars.ContextVar[tuple] = contextvars.ContextVar("looptune_dispatch",
                                                                  default=())


class TaskKey(NamedTuple):
    """What identifies a task in logs: template name, canonical args, target string."""

    name: str
    args: tuple
    target: str

    def __str__(self) -> str:
        return f"{self.name}{_args_str(self.args)} target='{self.target}'"


def _args_str(args: tuple) -> str:
    return "(" + ", ".join(repr(a) for a in args) + ("," if len(args) == 1 else "") + ")"


def freeze_args(args) -> tuple:
    """Template args as a hashable tuple of JSON-compatible values (lists become tuples)."""
    def one(a: Any):
        if isinstance(a, (list, tuple)):
            return tuple(one(x) for x in a)
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        if isinstance(a, np.generic):
            return one(a.item())
        raise LooptuneError(f"template arguments must be numbers, strings, None or lists of "
                            f"them (they are stored in tuning logs); got {a!r}")
    return tuple(one(a) for a in args)


def canonical_target(target) -> str:
    """The normalised target string (options sorted), as stored in task keys."""
    return str(Target.parse(target))


class Template:
    """A registered template: call it like the function without ``cfg``."""

    kind: ClassVar[str] = "function"

    def __init__(self, name: str, func: Callable):
        self.name = name
        self.func = func
        self.module = getattr(func, "__module__", None)
        try:
            self.file: str | None = inspect.getfile(func)
        except (TypeError, OSError):
            self.file = None
        params = list(inspect.signature(func).parameters.values())
        if not params:
            raise LooptuneError(f"template '{name}': the function must take cfg as its first "
                                "argument")
        self._sig = inspect.Signature(params[1:])
        for p in params[1:]:
            if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD):
                raise LooptuneError(f"template '{name}': parameter '{p.name}' is keyword-only; "
                                    "template arguments must be positional (they form the "
                                    "task key)")
        self._warned: set[TaskKey] = set()
        # True when the schedule's steps and the compute DAG are all that a config changes
        # (no knob acts through anything else, e.g. the process it runs in): two configs
        # with equal steps are one program, measured once (search/programs.py)
        self.steps_identify_program = False
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", name)
        self.__wrapped__ = func

    @property
    def importable(self) -> bool:
        """Whether a worker process can find this template by importing its module or
        loading its script file. Not so for one defined in a notebook cell, ``python -c``,
        standard input, or inside a function (a closure)."""
        if "<locals>" in getattr(self.func, "__qualname__", ""):
            return False
        if self.module and self.module not in _MAIN_MODULES:
            return True
        return bool(self.file) and os.path.isfile(self.file)

    def spec(self) -> dict[str, Any]:
        """What a worker process needs to re-create this template (JSON-able; part of
        :meth:`Task.spec`): its kind, name, module and file, plus the function itself by value
        (cloudpickle, base64) when it is not :attr:`importable`."""
        spec: dict[str, Any] = {"kind": self.kind, "name": self.name, "module": self.module,
                                "file": self.file}
        if not self.importable:
            spec["pickled"] = base64.b64encode(self._pickled()).decode("ascii")
        return spec

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Template:
        """In a worker process: the template a :meth:`spec` describes (registered)."""
        if spec.get("pickled"):
            return template_from_pickle(spec["name"], spec["pickled"])
        return load_template(spec["name"], spec.get("module"), spec.get("file"))

    def _pickled(self) -> bytes:
        where = self.file if self.file and not self.file.startswith("<") else None
        origin = "inside a function" if "<locals>" in self.func.__qualname__ else \
            f"in {self.file or self.module}" if where is None else f"in {where}"
        try:
            import cloudpickle
        except ImportError:
            raise LooptuneError(
                f"template '{self.name}' is defined {origin} (a notebook cell, python -c or a "
                "closure), which measurement worker processes cannot import; install "
                "cloudpickle (pip install cloudpickle) to send it to them by value, or move it "
                "into a module or script file") from None
        try:
            return cloudpickle.dumps(self.func)
        except Exception as e:  # noqa: BLE001 - what the function refers to may not pickle
            raise LooptuneError(
                f"template '{self.name}' is defined {origin}, so it is sent to the measurement "
                f"workers by value, but cloudpickle cannot pickle it: {type(e).__name__}: {e}; "
                "make the globals it uses picklable, or move it into a module or script "
                "file") from None

    def canonical_args(self, args: tuple, kwargs: dict | None = None) -> tuple:
        """All positional values of a call, defaults filled in, as the task key holds them."""
        try:
            bound = self._sig.bind(*args, **(kwargs or {}))
        except TypeError as e:
            raise LooptuneError(f"template '{self.name}': {e}") from None
        bound.apply_defaults()
        out: list = []
        for p in self._sig.parameters.values():
            v = bound.arguments.get(p.name, ())
            out.extend(v) if p.kind is p.VAR_POSITIONAL else out.append(v)
        return freeze_args(out)

    def key(self, args: tuple, target="c") -> TaskKey:
        """The task key of calling this template with ``args`` for ``target``."""
        return TaskKey(self.name, self.canonical_args(tuple(args)), canonical_target(target))

    def __call__(self, *args, **kwargs):
        """Instantiate with the config chosen by the active dispatch context (or a fallback).
        Returns ``(schedule, tensors)``."""
        cargs = self.canonical_args(args, kwargs)
        for ctx in reversed(_DISPATCH.get()):
            cfg = ctx.query(self, cargs)
            if cfg is not None:
                out = self.func(cfg, *cargs)
                ctx.instantiated(self, cargs, cfg, out)
                return out
        contexts = _DISPATCH.get()
        if contexts:
            keys = {k for ctx in contexts for k in ctx.keys_for(self, cargs)}
            key = TaskKey(self.name, cargs, "/".join(sorted(k.target for k in keys)) or "any")
            contexts[-1].warn_once(key, f"template '{self.name}': the applied tuning log has "
                                   f"no correct record for task {key}; using a fallback "
                                   "config (untuned, possibly slow)")
        else:
            key = TaskKey(self.name, cargs, "*")
            self._warn_once(key, f"template '{self.name}' called with args "
                            f"{_args_str(cargs)} outside tuning: using a fallback config "
                            "(untuned); tune it with lt.search.create_task(...) and apply the "
                            "log with lt.search.apply_history_best(log)")
        return self.func(FallbackConfig(), *cargs)

    def _warn_once(self, key: TaskKey, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg)

    def __repr__(self) -> str:
        return f"Template({self.name!r}, {self.module}.{self.__name__})"


class DagTemplate(Template):
    """A template generated from a compute DAG, not written by hand (the auto scheduler's).

    It holds the build arguments ``tensors`` (placeholders and outputs, in call order) and a
    module-level ``sketch(cfg, tensors, **options) -> (schedule, tensors)`` with JSON-able
    ``options``; it takes no arguments of its own. Its :meth:`spec` carries the DAG by value
    (pickled, base64) and the sketch by its import name, so a worker process re-creates it
    with :meth:`from_spec`. A config changes only the schedule's steps, so configs with equal
    steps are one program (``steps_identify_program``).
    """

    kind: ClassVar[str] = "dag"

    def __init__(self, name: str, tensors: Sequence[Tensor], sketch: Callable,
                 options: dict[str, Any] | None = None):
        qualname = getattr(sketch, "__qualname__", "")
        if not callable(sketch) or not qualname or "<locals>" in qualname \
                or getattr(sketch, "__module__", None) in (None, *_MAIN_MODULES):
            raise LooptuneError(f"DagTemplate '{name}': the sketch must be a function defined "
                                "at the top level of an importable module (worker processes "
                                f"import it by name); got {sketch!r}")
        self.tensors = tuple(tensors)
        self.sketch = sketch
        self.options = dict(options or {})
        super().__init__(name, self._schedule)
        self.module = sketch.__module__
        try:
            self.file = inspect.getsourcefile(sketch)
        except TypeError:          # a callable object, not a function
            self.file = None
        self.__name__ = name
        self.__doc__ = f"The {name} sketch of a compute DAG ({sketch.__qualname__})."
        self.steps_identify_program = True

    def _schedule(self, cfg):
        return self.sketch(cfg, list(self.tensors), **self.options)

    def holds(self, tensors: Sequence[Tensor]) -> bool:
        """Whether this template was made from these very tensor objects, in this order."""
        return len(tensors) == len(self.tensors) and \
            all(a is b for a, b in zip(tensors, self.tensors))

    @property
    def importable(self) -> bool:
        """Always: a worker re-creates it from its spec (the DAG by value)."""
        return True

    def spec(self) -> dict[str, Any]:
        """Kind, name, the DAG (pickled, base64), the sketch's import name and its options."""
        return {"kind": self.kind, "name": self.name,
                "dag": base64.b64encode(pickle.dumps(list(self.tensors))).decode("ascii"),
                "sketch": f"{self.sketch.__module__}:{self.sketch.__qualname__}",
                "options": self.options}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> DagTemplate:
        """In a worker process: the template a :meth:`spec` describes (registered)."""
        module, _, qualname = spec["sketch"].partition(":")
        try:
            sketch: Any = importlib.import_module(module)
            for part in qualname.split("."):
                sketch = getattr(sketch, part)
        except (ImportError, AttributeError) as e:
            raise LooptuneError(f"template '{spec['name']}': its sketch {spec['sketch']!r} "
                                f"cannot be imported in this worker ({type(e).__name__}: {e}); "
                                "the worker must run the same looptune version") from None
        tensors = pickle.loads(base64.b64decode(spec["dag"]))
        return register(cls(spec["name"], tensors, sketch, spec.get("options")))


def template(name: str) -> Callable[[Callable], Template]:
    """Register a template ``func(cfg, *args) -> (schedule, tensors)`` under ``name``.

    Tuning re-imports a template's module or script file in its worker processes (scripts
    must keep their top-level work under ``if __name__ == "__main__"``); a template defined
    where nothing can be imported (a notebook cell, ``python -c``, inside a function) is sent
    to them by value with cloudpickle.
    """
    if not isinstance(name, str) or not name:
        raise LooptuneError(f"@template: the name must be a non-empty string; got {name!r}")

    def decorate(func: Callable) -> Template:
        return register(Template(name, func))
    return decorate


def register(tpl: Template) -> Template:
    """Make ``tpl`` the template called ``tpl.name`` (replacing one of that name); returns it."""
    old = _REGISTRY.get(tpl.name)
    if old is not None and old is not tpl and (old.module, old.func.__qualname__) != \
            (tpl.module, tpl.func.__qualname__):
        log.debug("template '%s' re-registered (%s.%s replaces %s.%s)", tpl.name, tpl.module,
                  tpl.func.__qualname__, old.module, old.func.__qualname__)
    _REGISTRY[tpl.name] = tpl
    return tpl


def template_from_pickle(name: str, data: bytes | str) -> Template:
    """In a worker process: register the template ``name`` from :meth:`Template.spec`'s
    pickled function (bytes, or their base64 text as the spec holds them): a template that
    could not be imported there."""
    try:
        func = pickle.loads(base64.b64decode(data) if isinstance(data, str) else data)
    except Exception as e:  # noqa: BLE001 - reported with what to do
        raise LooptuneError(f"template '{name}' was sent to this worker by value but does not "
                            f"unpickle here: {type(e).__name__}: {e}; move it into a module "
                            "or script file that the workers can import") from None
    return register(Template(name, func))


def load_template(name: str, module: str | None, file: str | None) -> Template:
    """Find template ``name``: registered already, else import ``module`` by name, else load
    ``file`` (a script such as examples/matmul.py)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    errors = []
    if module and module not in _MAIN_MODULES:
        try:
            importlib.import_module(module)
            return get_template(name)
        except Exception as e:  # noqa: BLE001 - fall back to the file, report both below
            errors.append(f"import {module}: {type(e).__name__}: {e}")
    if file and os.path.exists(file):
        mod_name = "_looptune_tpl_" + hashlib.sha1(file.encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(mod_name, file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        try:
            spec.loader.exec_module(mod)
            return get_template(name)
        except Exception as e:  # noqa: BLE001
            errors.append(f"load {file}: {type(e).__name__}: {e}")
    raise LooptuneError(f"template '{name}' could not be loaded in a worker process "
                        f"(module {module!r}, file {file!r}): {'; '.join(errors) or 'not found'}"
                        "; define templates in an importable module or a script file")


TEMPLATE_KINDS: dict[str, type[Template]] = {Template.kind: Template,
                                              DagTemplate.kind: DagTemplate}


def template_from_spec(spec: dict[str, Any]) -> Template:
    """In a worker process: the template a ``template.spec()`` describes, by its kind."""
    kind = spec.get("kind", Template.kind)
    cls = TEMPLATE_KINDS.get(kind)
    if cls is None:
        raise LooptuneError(f"template '{spec.get('name')}': unknown template kind {kind!r} "
                            f"(known: {', '.join(TEMPLATE_KINDS)}); the worker must run the "
                            "same looptune version as the tuner")
    return cls.from_spec(spec)


def get_template(name: str) -> Template:
    """The registered template called ``name``."""
    tpl = _REGISTRY.get(name)
    if tpl is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise LooptuneError(f"no template named '{name}' is registered (registered: {known}); "
                            "decorate it with @lt.search.template(name) and import its module")
    return tpl


def find_template(name: str) -> Template | None:
    """The registered template called ``name``, or None."""
    return _REGISTRY.get(name)


def registered() -> list[str]:
    """Names of every registered template."""
    return sorted(_REGISTRY)


class DispatchContext:
    """Base of contexts that choose a template's config (see ``apply_history_best``)."""

    def query(self, tpl: Template, args: tuple) -> ConfigEntity | None:
        """The config to use for ``tpl(*args)``, or None when this context has none."""
        raise NotImplementedError

    def keys_for(self, tpl: Template, args: tuple) -> list[TaskKey]:
        """Task keys this context looked for (named in the fallback warning)."""
        return []

    def instantiated(self, tpl: Template, args: tuple, cfg: ConfigEntity, out) -> None:
        """Called with the template's ``(schedule, tensors)`` after ``query`` chose ``cfg``."""

    def warn_once(self, key: TaskKey, msg: str) -> None:
        """Log ``msg`` as a warning the first time this context misses ``key``."""
        warned = self.__dict__.setdefault("_warned", set())
        if key not in warned:
            warned.add(key)
            log.warning(msg)

    def __enter__(self):
        self._token = _DISPATCH.set(_DISPATCH.get() + (self,))
        return self

    def __exit__(self, *exc) -> None:
        _DISPATCH.reset(self._token)

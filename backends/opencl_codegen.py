"""OpenCL C code generation: a lowered function becomes kernels launched in order.

The execution model is SPMD, as in TVM and Halide:

* The lowered body is ``Allocate(T1, Allocate(T2, Seq(s1, s2, ...)))``. The root allocations
  become global device buffers (temporaries) and each top-level statement one ``__kernel``
  (one per root stage; two when a reduction's init nest is outermost). Kernels run in order on
  an in-order queue, so a kernel boundary is a global barrier.
* A loop bound to ``blockIdx.d`` is the work-group index in dimension d, ``threadIdx.d`` the
  local index. Global size = blockIdx extent * threadIdx extent per dimension; local size =
  threadIdx extents. Without thread loops the runtime picks the local size and ``blockIdx.d``
  is the global index. A tag's launch extent is the extent its loops share (in the size
  variables), else the largest constant bound of their extents (a producer's region that varies
  per block); a loop shorter than the launch is guarded, one that may be longer becomes a loop
  strided by the launch extent.
* Everything else runs inside each work-item: serial loops, lets, stages computed at a loop.
  Vectorized and streamed (``s[T].stream``) loops are plain loops here: OpenCL C has no
  portable non-temporal store, and a work-item's loop is not where a GPU's width comes from.
  Code inside the work-group loops but outside the thread loops runs in every work-item of
  the group; its stores to global and ``__local`` memory happen in local id 0 only.
* An intermediate allocated in a kernel outside its thread loops is shared by the work-group
  (a ``__local`` array at kernel scope) when thread loops write it or its scope is "shared"
  (TVM's rule: what is allocated under blockIdx and filled by threads is shared memory); any
  other is a private array of each work-item. Barriers are placed by
  :mod:`.opencl_barriers`.

Validation raises ScheduleError before any OpenCL compiler runs: a tag bound twice in one loop
nest, a blockIdx loop under a loop that is not a blockIdx loop, launch extents that disagree
between loops sharing a tag, a bound loop whose iterations would all write one element (a bound
reduction), a "shared" buffer allocated inside thread loops, kernel buffers of non-constant
size. The work-group size is checked against the device when the module is built.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import BuildError, ScheduleError
from ..lang import dtype as dt
from ..lang.expr import Const, Expr, Var
from ..lang.intrinsics import INTRINSICS, render
from ..lang.simplify import simplify, upper_bound
from ..lang.tensor import PlaceholderOp
from ..lang.visitor import ExprVisitor, collect_vars
from ..schedule.lower import LoweredFunc
from ..schedule.ranges import RangeContext
from ..schedule.verify import verify_pass
from ..schedule.stmt import (EMPTY, Allocate, Buffer, For, ForKind, Seq, Stmt, StmtMutator,
                             StmtVisitor, Store)
from .c_codegen import FLOOR_HELPERS, CCodegen, _CExpr, _dim, _minmax_helpers
from .opencl_barriers import insert_barriers
from .sanitize import c_comment, c_identifier

log = logging.getLogger("looptune.backends.opencl")

_DIM = {"x": 0, "y": 1, "z": 2}

PRELUDE = r"""typedef char int8_t;
typedef uchar uint8_t;
typedef short int16_t;
typedef ushort uint16_t;
typedef int int32_t;
typedef uint uint32_t;
typedef long int64_t;
typedef ulong uint64_t;

""" + FLOOR_HELPERS

@dataclass(frozen=True)
class KernelInfo:
    """One kernel: its parameters (global buffers, then size variables as ``long``) and its
    launch geometry as expressions in the size variables (``local_size`` None: any)."""

    name: str
    buffers: tuple[Buffer, ...]
    size_vars: tuple[Var, ...]
    global_size: tuple[Expr, ...]
    local_size: tuple[Expr, ...] | None
    local_bytes: int


@dataclass(frozen=True)
class CLSource:
    """The OpenCL program of one lowered function."""

    source: str
    kernels: tuple[KernelInfo, ...]
    temporaries: tuple[Buffer, ...]     # root intermediates: global buffers allocated per call
    uses_fp64: bool


def storage_type(dtype: str) -> str:
    """The OpenCL type of a buffer element (``bool`` is not allowed in buffers)."""
    return "uchar" if dtype == "bool" else dt.c_type(dtype)


def const_elems(b: Buffer) -> int | None:
    n: Expr = Const(1, "int32")
    for d in b.shape:
        n = n * _dim(d)
    n = simplify(n)
    return n.value if isinstance(n, Const) else None


def _same(a: Expr, b: Expr) -> bool:
    if a == b:
        return True
    d = simplify(a - b)
    return isinstance(d, Const) and d.value == 0


# ---- analysis ------------------------------------------------------------------------------

class _Exprs(ExprVisitor):
    def __init__(self, scan: _Scan):
        self.scan = scan

    def visit_Var(self, e):
        self.scan.vars.add(e)

    def visit_Const(self, e):
        self.scan.dtypes.add(e.dtype)

    def visit_Cast(self, e):
        self.scan.dtypes.add(e.dtype)
        self.visit(e.value)

    def visit_BufferLoad(self, e):
        self.scan.buffers.add(e.buffer.uid)
        self.scan.dtypes.add(e.dtype)
        ExprVisitor.visit_Load(self, e)


@dataclass
class _Alloc:
    buffer: Buffer
    in_thread: bool
    written_in_thread: bool = False


class _Scan(StmtVisitor):
    """One kernel's bound loops, launch extents, allocations, stores and references."""

    def __init__(self, kname: str, size_vars):
        self.kname = kname
        self.size_vars = set(size_vars)
        self.stack: list[For] = []
        self.ranges = RangeContext()
        self.lets: dict[Var, Expr] = {}
        self.fixed: dict[str, Expr] = {}         # tag -> extent in size variables only
        self.first: dict[str, For] = {}
        self.varying: dict[str, list] = {}       # tag -> [(loop, constant upper bound)]
        self.launch: dict[str, Expr] = {}        # tag -> launch extent, set by resolve()
        self.allocs: dict[int, _Alloc] = {}
        self.stores: list[tuple[Store, tuple[For, ...]]] = []
        self.parallel: list[For] = []
        self.vars: set[Var] = set()
        self.buffers: set[int] = set()
        self.dtypes: set[str] = set()

    def visit_expr(self, e):
        _Exprs(self).visit(e)

    def _in_thread(self) -> bool:
        return any(f.is_thread_loop for f in self.stack)

    def visit_For(self, s: For):
        self.visit_expr(s.min)
        self.visit_expr(s.extent)
        if s.kind is ForKind.THREAD:
            self._bound(s)
        elif s.kind is ForKind.PARALLEL:
            self.parallel.append(s)
        self.stack.append(s)
        with self.ranges.loop(s.var, s.min, s.extent):
            self.visit(s.body)
        self.stack.pop()

    def _bound(self, s: For) -> None:
        """Validate a bound loop and record its extent."""
        tag = s.tag
        where = f"kernel '{self.kname}': bind({s.var.name}, '{tag}')"
        for f in self.stack:
            if f.tag == tag:
                raise ScheduleError(
                    f"{where}: the loop is nested inside loop '{f.var.name}', which is bound "
                    f"to {tag} too; a tag indexes one loop of a nest: bind the inner loop to "
                    "another dimension (y, z) or leave it serial")
            if tag.startswith("blockIdx") and not (f.tag or "").startswith("blockIdx"):
                what = f"bound to {f.tag}" if f.tag else f"{f.kind.value}, not bound"
                raise ScheduleError(
                    f"{where}: the loop is nested inside loop '{f.var.name}' ({what}); "
                    "work-group loops must enclose everything else in their kernel: reorder "
                    f"'{s.var.name}' outward or bind '{f.var.name}' to a blockIdx as well")
        ext = s.extent
        if collect_vars(ext) <= self.size_vars:      # the same in every work-item: a launch size
            old = self.fixed.get(tag)
            if old is None:
                self.fixed[tag], self.first[tag] = ext, s
            elif not _same(old, ext):
                raise ScheduleError(
                    f"{where}: the extent {ext} disagrees with extent {old} of loop "
                    f"'{self.first[tag].var.name}', also bound to {tag} in this kernel; one "
                    "launch has one size per tag: split the loops so their bound parts have "
                    "equal extents (e.g. split(..., nparts=N) for a producer)")
        else:
            ub = upper_bound(ext, self.ranges.facts)
            self.varying.setdefault(tag, []).append((s, ub))

    def visit_Allocate(self, s: Allocate):
        self.allocs.setdefault(s.buffer.uid, _Alloc(s.buffer, self._in_thread()))
        self.dtypes.add(s.buffer.dtype)
        self.visit(s.body)

    def visit_Store(self, s: Store):
        a = self.allocs.get(s.buffer.uid)
        if a is not None and not a.in_thread and self._in_thread():
            a.written_in_thread = True
        self.buffers.add(s.buffer.uid)
        self.dtypes.add(s.buffer.dtype)
        self.stores.append((s, tuple(f for f in self.stack if f.kind is ForKind.THREAD)))
        super().visit_Store(s)

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self.lets[s.var] = s.value
        with self.ranges.let(s.var, s.value):
            self.visit(s.body)

    def visit_Barrier(self, s):
        if self._in_thread():
            raise ScheduleError(f"kernel '{self.kname}': a barrier inside thread loops would "
                                "not be reached by every work-item of the group")

    # ---- decisions after the walk --------------------------------------------------------

    def resolve(self) -> None:
        """Each tag's launch extent: the extent its loops share, else the largest constant
        bound of its varying extents (shorter loops are guarded, longer ones strided)."""
        for tag in sorted(set(self.fixed) | set(self.varying)):
            if tag in self.fixed:
                self.launch[tag] = self.fixed[tag]
                continue
            bounds = [ub for _, ub in self.varying[tag] if ub is not None]
            if not bounds:
                s = self.varying[tag][0][0]
                raise ScheduleError(
                    f"kernel '{self.kname}': bind({s.var.name}, '{tag}'): the extent {s.extent} "
                    "varies inside the kernel and has no constant upper bound, so it cannot "
                    "size the launch; split the loop by a constant factor (or nparts) and bind "
                    "the constant-extent part")
            self.launch[tag] = Const(max(bounds), "int32")
        for e in self.launch.values():
            self.vars |= collect_vars(e)

    @property
    def has_threads(self) -> bool:
        return any(t.startswith("threadIdx") for t in self.launch)

    def spaces(self) -> dict[int, str]:
        """Memory space of each allocation in the kernel: "local" or "private"."""
        out = {}
        for uid, a in self.allocs.items():
            b = a.buffer
            if b.scope == "shared" and a.in_thread:
                raise ScheduleError(
                    f"kernel '{self.kname}': '{b.name}' has scope 'shared' but is allocated "
                    "inside thread loops, where each work-item would have its own copy; "
                    "compute_at a loop outside the threadIdx loops (a work-group loop)")
            shared = self.has_threads and not a.in_thread and (
                b.scope == "shared" or a.written_in_thread)
            out[uid] = "local" if shared else "private"
            if const_elems(b) is None:
                raise ScheduleError(
                    f"kernel '{self.kname}': intermediate '{b.name}' has the size "
                    f"{list(b.shape)}, which is not a constant; a buffer inside a kernel has a "
                    "fixed size: compute_at a loop whose region has constant extents")
        return out

    def check_races(self, spaces: dict[int, str]) -> None:
        """Every work-item (work-group) along a bound loop must write its own elements."""
        for st, bound in self.stores:
            space = spaces.get(st.buffer.uid, "global")
            if space == "private":
                continue
            deps = self._deps(st.indices)
            for f in bound:
                block = f.tag.startswith("blockIdx")
                launch = self.launch[f.tag]
                if (block and space == "local") or (isinstance(launch, Const)
                                                    and launch.value == 1):
                    continue
                if f.var not in deps:
                    unit = "work-group" if block else "work-item"
                    raise ScheduleError(
                        f"kernel '{self.kname}': bind({f.var.name}, '{f.tag}'): the store to "
                        f"'{st.buffer.name}' does not depend on '{f.var.name}', so every "
                        f"{unit} along {f.tag} would update the same element (a reduction loop "
                        "cannot be bound); rfactor the reduction (s.rfactor) and bind a "
                        "spatial loop of the new stage")

    def _deps(self, exprs) -> set[Var]:
        todo = set().union(*(collect_vars(e) for e in exprs)) if exprs else set()
        seen: set[Var] = set()
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                if v in self.lets:
                    todo |= collect_vars(self.lets[v])
        return seen


# ---- code generation -----------------------------------------------------------------------

class _CLExpr(_CExpr):
    def visit_Const(self, e):
        if dt.is_int(e.dtype) and (e.dtype == "uint64" or not -(2**31) < e.value < 2**31):
            if e.value == -(2**63):
                return "LONG_MIN"
            return f"{e.value}UL" if e.dtype == "uint64" else f"{e.value}L"
        return super().visit_Const(e)

    def visit_Call(self, e):
        row = INTRINSICS[e.name]
        args = [self.visit(a) for a in e.args]
        return render(row, args, e.dtype, row.opencl, lambda name: INTRINSICS[name].opencl)


class _KernelGen(CCodegen):
    """The body of one kernel (the C generator's expressions and statements, OpenCL loops)."""

    def __init__(self, scan: _Scan, spaces: dict[int, str]):
        super().__init__(ieee_div=True)     # OpenCL C divides as its device does (no lt_divf)
        self.expr = _CLExpr(self)
        self.scan, self.spaces = scan, spaces
        self.thread_tags = [t for t in sorted(scan.launch) if t.startswith("threadIdx")
                            and not _same(scan.launch[t], Const(1, "int32"))]
        self.enclosing: list[str] = []
        self.local_decls: list[str] = []

    def _block(self, head: str, body) -> None:
        self.emit(f"{head} {{" if head else "{")
        self.depth += 1
        body()
        self.depth -= 1
        self.emit("}")

    def visit_For(self, s: For):
        if s.kind is ForKind.THREAD:
            return self._bound_loop(s)
        v = self.var_name(s.var)
        lo, ext = self.expr.visit(s.min), self.expr.visit(s.extent)
        if s.kind is ForKind.UNROLLED:
            self.emit("#pragma unroll")
        end = ext if lo == "0" else f"{lo} + {ext}"
        with self.ranges.loop(s.var, s.min, s.extent):
            self._block(f"for (int64_t {v} = {lo}; {v} < {end}; ++{v})",
                        lambda: self.visit(s.body))

    def _bound_loop(self, s: For) -> None:
        """``v = min + id``; guarded where the loop is shorter than the launch, a strided
        loop where it may be longer."""
        kind, axis = s.tag.split(".")
        fn = ("get_local_id" if kind == "threadIdx" else
              "get_group_id" if self.scan.has_threads else "get_global_id")
        launch = self.scan.launch[s.tag]
        v, lo = self.var_name(s.var), self.expr.visit(s.min)
        idx = f"(int64_t){fn}({_DIM[axis]})"
        first = idx if lo == "0" else f"{lo} + {idx}"
        end = self.expr.visit(s.extent)
        end = end if lo == "0" else f"{lo} + {end}"
        over = upper_bound(simplify(s.extent - launch), self.ranges.facts)
        self.ranges.push_loop(s.var, s.min, s.extent)
        self.enclosing.append(s.tag)
        if not _same(s.extent, launch) and (over is None or over > 0):
            step = self.expr.visit(launch)
            self._block(f"/* {c_comment(s.var.name)}: {s.tag} */ for (int64_t {v} = {first}; "
                        f"{v} < {end}; {v} += {step})", lambda: self.visit(s.body))
        else:
            def body():
                self.emit(f"const int64_t {v} = {first};")
                if _same(s.extent, launch):
                    self.visit(s.body)
                else:
                    self._block(f"if ({v} < {end})", lambda: self.visit(s.body))
            self._block(f"/* {c_comment(s.var.name)}: {s.tag} */", body)
        self.enclosing.pop()
        self.ranges.pop()

    def visit_Store(self, s: Store):
        space = self.spaces.get(s.buffer.uid, "global")
        missing = [] if space == "private" else [
            t for t in self.thread_tags if t not in self.enclosing]
        if not missing:
            return super().visit_Store(s)
        cond = " && ".join(f"get_local_id({_DIM[t[-1]]}) == 0" for t in missing)
        self._block(f"if ({cond})", lambda: super(_KernelGen, self).visit_Store(s))

    def visit_LetStmt(self, s):
        # braces: sibling copies of a statement (unrolled iterations, the two halves of a
        # partitioned loop once opencl_barriers splits them) declare the same let again
        self._block("", lambda: super(_KernelGen, self).visit_LetStmt(s))

    def visit_Allocate(self, s: Allocate):
        b = s.buffer
        decl = f"{storage_type(b.dtype)} {self.buf_name(b)}[{const_elems(b)}];"
        if self.spaces[b.uid] == "local":
            if "__local " + decl not in self.local_decls:
                self.local_decls.append("__local " + decl)
            self.visit(s.body)
            return

        def body():
            self.emit(decl)
            self.visit(s.body)

        self._block("", body)

    def visit_Barrier(self, s):
        self.emit("barrier(CLK_LOCAL_MEM_FENCE);")

    def kernel(self, info: KernelInfo, stmt: Stmt, inputs: set[int]) -> str:
        params = []
        for b in info.buffers:
            const = "const " if b.uid in inputs else ""
            params.append(f"__global {const}{storage_type(b.dtype)} *restrict "
                          f"{self.buf_name(b)}")
        params += [f"const long {self.var_name(v)}" for v in info.size_vars]
        self.visit(stmt)
        attr = ""
        if info.local_size is not None and all(isinstance(x, Const) for x in info.local_size):
            dims = [x.value for x in info.local_size] + [1] * (3 - len(info.local_size))
            attr = f"__attribute__((reqd_work_group_size({', '.join(map(str, dims))}))) "
        body = ["  " + d for d in self.local_decls] + self.lines
        return (f"__kernel {attr}void {info.name}({', '.join(params)}) {{\n"
                + "\n".join(body) + "\n}\n")


# ---- the program ---------------------------------------------------------------------------

def split_kernels(body: Stmt) -> tuple[list[Buffer], list[Stmt]]:
    """(root temporaries, one statement per kernel) of a lowered body."""
    temps = []
    while isinstance(body, Allocate):
        temps.append(body.buffer)
        body = body.body
    parts = list(body.stmts) if isinstance(body, Seq) else [body]
    return temps, parts


class _FirstStore(StmtVisitor):
    def __init__(self, uids):
        self.uids, self.found = uids, None

    def visit_Store(self, s):
        if self.found is None and s.buffer.uid in self.uids:
            self.found = s.buffer


def _kernel_name(fname: str, part: Stmt, global_uids: set[int], taken: set[str]) -> str:
    fs = _FirstStore(global_uids)
    fs.visit(part)
    base = c_identifier(f"{fname}_{fs.found.name}" if fs.found is not None
                        else f"{fname}_kernel")
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _geometry(launch: dict[str, Expr]):
    """(global size, local size or None) per dimension from the tags' launch extents."""
    if not launch:
        return (Const(1, "int32"),), None
    ndim = max(_DIM[t[-1]] for t in launch) + 1
    one = Const(1, "int32")
    threads = any(t.startswith("threadIdx") for t in launch)
    glob, loc = [], []
    for axis in "xyz"[:ndim]:
        b, t = launch.get(f"blockIdx.{axis}", one), launch.get(f"threadIdx.{axis}", one)
        glob.append(simplify(b * t))
        loc.append(t)
    return tuple(glob), (tuple(loc) if threads else None)


def _no_float16(dtypes, fname: str) -> None:
    if "float16" in dtypes:
        raise BuildError(f"'{fname}' computes in float16, which the opencl target does not "
                         "support yet; compute in float32 (.astype('float32'))")


def _kernel(f: LoweredFunc, part: Stmt, kname: str, global_bufs: list[Buffer],
            inputs: set[int]) -> tuple[KernelInfo, str, _KernelGen]:
    """Validate one kernel's statement; its description, text and generator."""
    scan = _Scan(kname, f.size_vars)
    scan.visit(part)
    _no_float16(scan.dtypes, f.name)
    scan.resolve()
    spaces = scan.spaces()
    scan.check_races(spaces)
    local = {u for u, sp in spaces.items() if sp == "local"}
    part = verify_pass("insert_barriers", insert_barriers(part, local), f.size_vars, global_bufs)
    if not scan.launch:
        log.info("kernel '%s' has no bound loops; it runs as a single work-item (correct but "
                 "serial): bind its outer loops to blockIdx/threadIdx", kname)
    for p in scan.parallel:
        log.warning("kernel '%s': loop '%s' is marked parallel, which means nothing inside an "
                    "OpenCL kernel; it runs serially (bind it to blockIdx instead)",
                    kname, p.var.name)
    gsize, lsize = _geometry(scan.launch)
    local_bytes = sum(const_elems(scan.allocs[u].buffer) * dt.itemsize(scan.allocs[u].buffer.dtype)
                      for u in local)
    info = KernelInfo(kname, tuple(b for b in global_bufs if b.uid in scan.buffers),
                      tuple(v for v in f.size_vars if v in scan.vars), gsize, lsize, local_bytes)
    gen = _KernelGen(scan, spaces)
    return info, gen.kernel(info, part, inputs), gen


class _DropPrefetches(StmtMutator):
    """``s[T].prefetch`` is a CPU cache hint: OpenCL devices get none (a prefetch's row
    loops, left empty, go too)."""

    def visit_Prefetch(self, s):
        return EMPTY

    def visit_For(self, s):
        out = super().visit_For(s)
        empty = isinstance(out.body, Seq) and not out.body.stmts
        return EMPTY if empty and out is not s else out


def generate_opencl(f: LoweredFunc) -> CLSource:
    """The OpenCL program for ``f``: one kernel per top-level statement, in order."""
    temps, parts = split_kernels(_DropPrefetches().visit(f.body))
    for t in temps:
        if t.scope == "shared":
            raise ScheduleError(f"'{t.name}' has scope 'shared' but is computed at root, "
                                "outside every kernel; compute_at a work-group loop of its "
                                "reader")
    global_bufs = list(f.buffers) + temps
    dtypes = {b.dtype for b in global_bufs}
    _no_float16(dtypes, f.name)
    inputs = {b.uid for t, b in zip(f.args, f.buffers) if isinstance(t.op, PlaceholderOp)}
    taken: set[str] = set()
    kernels, texts, minmax = [], [], set()
    for part in parts:
        kname = _kernel_name(f.name, part, {b.uid for b in global_bufs}, taken)
        info, text, gen = _kernel(f, part, kname, global_bufs, inputs)
        kernels.append(info)
        texts.append(text)
        minmax |= gen.minmax
        dtypes |= gen.scan.dtypes
    fp64 = "float64" in dtypes
    head = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if fp64 else ""
    helpers = "".join(_minmax_helpers(d) for d in sorted(minmax))
    src = head + PRELUDE + helpers + "\n" + "\n".join(texts)
    return CLSource(src, tuple(kernels), tuple(temps), fp64)

"""Who still holds an owner's memory when it is released, and what ebb does
about it: the leak policy (docs/python.md, "Holders of released memory").

A block an owner never freed is a leak; before ebb frees it, the live
framework objects on it are found (PyTorch tensors, CuPy arrays, Numba
device arrays, through the garbage collector), named by an attribute path
from a module or a caller's local variable where there is one
(`torchcrepe.infer.model.conv1.weight`), and made safe, so that no array is
left pointing at memory ebb gave away:

  host   (default) a PyTorch tensor moves to host memory: same values, now a
         CPU tensor (views stay views of one copy), its GPU block is freed;
         the next GPU use fails with PyTorch's device error, or the program
         moves it back (torchcrepe's infer() does: it runs on, reloaded).
         A Numba array becomes unusable (as "error"); a CuPy array, which
         cannot change its memory in place, keeps its block (as "keep").
  error  each holder becomes unusable: any use raises ebb.ReleasedError
         naming the owner, the release and the allocation site; its device
         block is freed. A CuPy array keeps its block (as "keep").
  keep   the blocks stay allocated, still the owner's, until their holders
         drop them (ebb_keep); the report says so.
  none   nobody is looked for: the blocks are freed under their holders, as
         before ebb 1.3 (a later use reads freed memory; on a GPU that is an
         illegal-address fault or wrong results).

EBB_LEAK_POLICY sets the process's policy; ebb.set_leak_policy() changes it;
o.release(policy=...) and o.close(policy=...) choose for one call."""
import gc
import os
import sys
import types

POLICIES = ("host", "error", "keep", "none")
_policy = [None]


class ReleasedError(RuntimeError):
    """An array or tensor used after the owner whose memory it was on was
    released (leak policy "error", or a Numba array under "host")."""


def get_policy():
    if _policy[0] is None:
        _policy[0] = _check_policy(os.environ.get("EBB_LEAK_POLICY", "host"), "EBB_LEAK_POLICY")
    return _policy[0]


def set_policy(policy):
    """The process's leak policy: "host" (default), "error", "keep" or "none"."""
    _policy[0] = _check_policy(policy, "ebb.set_leak_policy()")


def _check_policy(p, where):
    if p not in POLICIES:
        raise ValueError("%s: unknown leak policy %r; one of %s" % (where, p, ", ".join(POLICIES)))
    return p


# --- finding the holders ---------------------------------------------------------
class Held:
    """The live objects on one block: the framework ("torch", "cupy",
    "numba"), the objects, and after naming, their paths."""

    def __init__(self, kind):
        self.kind, self.objs, self.paths, self.roots, self.action = kind, [], [], [], None

    @property
    def name(self):
        named = [p for p in self.paths if p]
        if named:
            return named[0]
        return "a %s no module attribute or caller's variable refers to" % _KIND_NAMES[self.kind]


_KIND_NAMES = {"torch": "torch.Tensor", "cupy": "cupy.ndarray", "numba": "Numba device array"}


def _torch_block(o, ordinal):
    torch = sys.modules["torch"]
    if not isinstance(o, torch.Tensor) or not o.is_cuda or o.device.index != ordinal:
        return None
    return o.untyped_storage().data_ptr()


def _cupy_block(o, ordinal):
    cupy = sys.modules["cupy"]
    if not isinstance(o, cupy.ndarray) or o.data is None or o.device.id != ordinal:
        return None
    return o.data.mem.ptr


def _numba_block(o, ordinal):
    from numba.cuda.cudadrv import devicearray
    if not isinstance(o, devicearray.DeviceNDArrayBase):
        return None
    gd = getattr(o, "gpu_data", None)
    base = getattr(gd, "owner", None) or gd
    h = getattr(base, "handle", None)
    return getattr(h, "value", h) if h is not None else None


def _finders():
    out = []
    if "torch" in sys.modules:
        out.append(("torch", _torch_block))
    if "cupy" in sys.modules:
        out.append(("cupy", _cupy_block))
    if "numba.cuda.cudadrv.devicearray" in sys.modules:
        out.append(("numba", _numba_block))
    return out


def find(ordinal, addrs):
    """{addr: Held} for the blocks in addrs that live framework objects on
    device `ordinal` still use (a walk over the garbage collector's objects)."""
    finders = _finders()
    held = {}
    if not finders or not addrs:
        return held
    for o in gc.get_objects():
        for kind, block_of in finders:
            try:
                addr = block_of(o, ordinal)
            except Exception:  # a half-made object, a tensor subclass without storage
                addr = None
            if addr in addrs:
                held.setdefault(addr, Held(kind)).objs.append(o)
                break
    return held


# --- naming them -----------------------------------------------------------------
_WALK_BUDGET = 400000  # objects visited looking for names (a bound, not a tuning)
_WALK_DEPTH = 8
_SKIP_MODULES = set(getattr(sys, "stdlib_module_names", ())) | {"ebb"}


def _children(obj, torch_module):
    """(name suffix, child, is a torch Module) pairs to look into."""
    if torch_module is not None and isinstance(obj, torch_module):
        for group in ("_parameters", "_buffers", "_modules"):
            for k, v in (getattr(obj, group, None) or {}).items():
                if v is not None:
                    yield "." + k, v
        d = getattr(obj, "__dict__", {})
        for k, v in d.items():
            if k not in ("_parameters", "_buffers", "_modules"):
                yield "." + k, v
        return
    if isinstance(obj, dict):
        for i, (k, v) in enumerate(obj.items()):
            if i >= 10000:
                break
            yield "[%r]" % (k,), v
        return
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj[:10000]):
            yield "[%d]" % i, v
        return
    if isinstance(obj, (types.ModuleType, str, bytes, int, float)):
        return
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict):  # functions' attributes, classes, instances
        for k, v in d.items():
            if not (k.startswith("__") and k.endswith("__")):
                yield "." + k, v


def _roots(skip_frame):
    # packages before their modules (Python moves a package to the end of
    # sys.modules once its __init__ has run): torchcrepe.infer, not
    # torchcrepe.core.infer
    mods = sorted(((n, m) for n, m in list(sys.modules.items())
                   if m is not None and n.partition(".")[0] not in _SKIP_MODULES),
                  key=lambda nm: nm[0].count("."))
    for name, mod in mods:
        yield name, mod
    f = skip_frame
    while f is not None:
        pkg = str(f.f_globals.get("__name__", "")).partition(".")[0]
        if pkg != "ebb" and f.f_code.co_name != "<module>":  # a module's frame: its module
            for k, v in list(f.f_locals.items()):
                yield "%s() local %s" % (f.f_code.co_name, k), v
        f = f.f_back


def name(held, frame=None):
    """Fills each Held's paths: an attribute path from a module, or a local
    variable of a caller, to each object (None where none is found within
    the walk's bounds). The walk is breadth-first, so the shortest path
    wins; a path is spelt out only for the objects it finds."""
    targets = {}
    for h in held.values():
        h.paths = [None] * len(h.objs)
        h.roots = [None] * len(h.objs)
        for i, o in enumerate(h.objs):
            targets[id(o)] = (h, i)
    torch = sys.modules.get("torch")
    tmod = torch.nn.Module if torch is not None else None
    seen, left = set(), len(targets)
    # entries: (parent index, name part, object, depth, index of the
    # outermost torch Module on the way: the holder a report groups by)
    q = [(-1, path, obj, 0, -1) for path, obj in _roots(frame)]
    i = 0
    while i < len(q) and left and i < _WALK_BUDGET:
        _, _, obj, depth, mroot = q[i]
        oid = id(obj)
        t = targets.get(oid)
        if t is not None and t[0].paths[t[1]] is None:
            t[0].paths[t[1]] = _path(q, i)
            t[0].roots[t[1]] = _path(q, mroot) if mroot >= 0 else t[0].paths[t[1]]
            left -= 1
        if mroot < 0 and tmod is not None and isinstance(obj, tmod):
            mroot = i
        if oid not in seen and depth < _WALK_DEPTH and len(q) < _WALK_BUDGET and \
                not (depth and isinstance(obj, types.ModuleType)):
            seen.add(oid)
            try:
                if depth == 0 and isinstance(obj, types.ModuleType):
                    kids = [("." + k, v) for k, v in list(vars(obj).items())
                            if not k.startswith("__")]
                else:
                    kids = list(_children(obj, tmod))
            except Exception:  # a mapping that changed under the walk, a property that raised
                kids = []
            q.extend((i, s, v, depth + 1, mroot) for s, v in kids)
        i += 1


def _path(q, i):
    parts = []
    while i >= 0:
        parts.append(q[i][1])
        i = q[i][0]
    return "".join(reversed(parts))


# --- making them safe ------------------------------------------------------------
def _torch_view(t, storage):
    torch = sys.modules["torch"]
    return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.size(), t.stride())


def _torch_to_host(h):
    """Every tensor on the block becomes a CPU tensor on one host copy of
    its storage (views stay views). Their GPU storage then dies with its
    last tensor, and PyTorch frees the block."""
    host = h.objs[0].untyped_storage().cpu()
    for t in h.objs:
        t.data = _torch_view(t, host)


def _released_class(base, message):
    class Released(base):
        __ebb_released__ = message

        @classmethod
        def __torch_function__(cls, func, types_=(), args=(), kwargs=None):
            if func in (base.__repr__, base.__str__, base.__format__):
                return "<%s released by ebb: %s>" % (base.__name__, message)
            raise ReleasedError(message)

    Released.__name__ = Released.__qualname__ = "Released" + base.__name__
    return Released


def _torch_unusable(h, message):
    torch = sys.modules["torch"]
    for t in h.objs:
        t.data = torch.empty(0, dtype=t.dtype)
        try:
            t.__class__ = _released_class(type(t), message)
        except TypeError:  # a tensor type whose layout forbids it: left on host, empty
            pass


class _ReleasedPointer:
    """Stands for a Numba array's device memory after its owner's release."""

    def __init__(self, message):
        self._message = message

    def __getattr__(self, name):
        raise ReleasedError(self._message)


def _numba_unusable(h, message):
    for a in h.objs:
        a.gpu_data = _ReleasedPointer(message)


def secure(held, policy, device, owner_name, sites):
    """Applies policy to every Held; sets .action (what was done)."""
    for addr, h in held.items():
        message = ("%s (%s) was on memory of ebb owner '%s' allocated at %s, and that owner "
                   "was released; ebb made it unusable (leak policy '%s')"
                   % (h.name, _KIND_NAMES[h.kind], owner_name, sites.get(addr, "?"), policy))
        kind = h.kind
        if policy == "none":
            h.action = "freed under it (leak policy 'none')"
        elif kind == "cupy" or policy == "keep":
            device.keep(addr)
            h.action = "kept: the block stays allocated until it is freed"
        elif kind == "torch" and policy == "host":
            _torch_to_host(h)
            h.action = "moved to host memory"
        elif kind == "torch":
            _torch_unusable(h, message)
            h.action = "made unusable (ebb.ReleasedError)"
        else:  # numba, host or error
            _numba_unusable(h, message)
            h.action = "made unusable (ebb.ReleasedError)"
        h.objs = []  # the old device memory dies with the holders' last reference


# --- the release's side ----------------------------------------------------------
class Rescued:
    """What rescue() found and did: the owner's live blocks (Leak objects by
    address) and the Held on each block that had holders."""

    def __init__(self, policy, blocks, held):
        self.policy, self.blocks, self.held = policy, blocks, held


def rescue(owner, policy=None):
    """Before owner's release or close: its live blocks, the framework
    objects still on them, named and made safe per policy. None when there
    is nothing to do (no live block, no holder, policy "none")."""
    policy = get_policy() if policy is None else _check_policy(policy, "policy=")
    if policy == "none" or not _finders():
        return None
    live = owner.live_blocks()
    if live is None:
        return None
    blocks = {k.addr: k for k in live.leaks if not k.pinned}
    held = find(owner.device.ordinal, blocks)
    if not held:
        return None
    name(held, sys._getframe(2))
    secure(held, policy, owner.device, live.owner, {a: blocks[a].site for a in held})
    return Rescued(policy, blocks, held)


def _summary(held, blocks):
    """(holder, blocks, bytes, action) per holder (the outermost torch
    Module on the way to a tensor, else the object's own path) and action,
    largest first."""
    groups = {}
    for addr, h in held.items():
        root = next((r for r in h.roots if r), None) or h.name
        groups.setdefault((root, h.action), []).append(addr)
    out = [(root, len(a), sum(blocks[x].size for x in a), action)
           for (root, action), a in groups.items()]
    return sorted(out, key=lambda g: -g[2])


def merge(report, rescued):
    """The leak report of a release with what rescue() found: every block
    the owner left names its holder and what was done to it; blocks kept
    alive (policy "keep", CuPy arrays) are listed in report.kept, not among
    the blocks ebb freed."""
    if rescued is None:
        return report
    from . import LeakReport
    if report is None:
        report = LeakReport.__new__(LeakReport)
        report.owner, report.bytes, report.pinned_bytes = "?", 0, 0
        report.leaks, report.holders = [], []
    report.kept = getattr(report, "kept", [])
    freed = {k.addr for k in report.leaks}
    for addr, h in rescued.held.items():
        k = rescued.blocks[addr]
        k.holder, k.action = h.name, h.action
        if report.owner == "?":
            report.owner = k.owner
        if addr in freed:  # still live after the policy: something else held it too
            mine = next(x for x in report.leaks if x.addr == addr)
            mine.holder, mine.action = h.name, h.action + "; freed by ebb under another holder"
        elif h.action.startswith("kept"):
            report.kept.append(k)
        else:
            report.leaks.append(k)
            report.bytes += k.size
    report.leaks.sort(key=lambda x: -x.size)
    report.holders = _summary(rescued.held, rescued.blocks)
    return report if report.leaks or report.kept else None

"""The worker SDK: a Python stage run by ebb in a process of its own
(docs/worker-protocol.md), written as a class.

    from ebb.worker import Stage, StageError, serve

    class Gain(Stage):
        name = "gain"
        def load(self, options, ctx):
            self.gain = float(options.get("gain", 0.5))
        def run(self, items, ctx):
            a = items["audio"]                       # audio from shared memory, not copied
            out = ctx.new_audio("audio_gain", a.frames, a.channels, a.rate)
            out.data[:] = a.data * self.gain          # written in place in shared memory
            return [out, ctx.json("gain", {"gain": self.gain})]

    serve(Gain)

Items arrive as Item objects: .kind, .name, and for audio .frames,
.channels, .rate, .data (frames x channels float32), for tensors .shape,
.data, for JSON .value (parsed) and .text, for files .path. .data is a NumPy
array mapped read-only from shared memory when NumPy is importable, else a
memoryview of float32 (also mapped, never copied). The SDK answers the
protocol (hello, load, run, release, exit), dies with ebb, turns a StageError
(or any exception) into an error answer, and reports device memory when the
stage uses ebb's allocator (uses_gpu = True: an ebb owner named after the
stage is current during load/run/release, so Numba arrays made through
NUMBA_CUDA_MEMORY_MANAGER=ebb.numba are counted, leak-checked at exit and
given back, context included)."""
import ctypes
import json
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback

PROTOCOL = 1
MAX_FRAME = 16 << 20
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = range(4)
# The hot path's JSON: json.dumps/JSONEncoder.encode build a new C encoder
# on every call, and json.loads matches whitespace with a regex around the
# document; one C encoder made once (compact for frames, json.dumps's own
# separators for a stage's JSON items) and the C scanner alone do the same
# work. The pure-Python json module (no _json) keeps the plain calls.
try:
    from json.encoder import c_make_encoder as _c_encoder, encode_basestring_ascii as _ascii
except ImportError:  # pragma: no cover
    _c_encoder = None
if _c_encoder is not None:
    _FRAME = _c_encoder(None, json.JSONEncoder().default, _ascii, None, ":", ",", False, False,
                        True)
    _TEXT = _c_encoder(None, json.JSONEncoder().default, _ascii, None, ": ", ", ", False, False,
                       True)

    def _ENCODE(o):
        return "".join(_FRAME(o, 0))

    def _dumps(o):
        return "".join(_TEXT(o, 0))
else:  # pragma: no cover
    _ENCODE = json.JSONEncoder(separators=(",", ":")).encode
    _dumps = json.dumps
_SCAN = json.JSONDecoder().scan_once


def _loads(text):
    """json.loads for a frame's body: the scanner alone when the document
    fills the text (it always does from ebb), else json.loads (whitespace
    around it, or the error's message)."""
    try:
        obj, end = _SCAN(text, 0)
        if end == len(text):
            return obj
    except StopIteration:
        pass
    return json.loads(text)

try:
    import numpy as _np
except ImportError:  # the SDK works without NumPy (memoryviews)
    _np = None


class StageError(Exception):
    """An answer {"type": "error", "code": code, "message": message}.
    EBB_ECONFIG / EBB_EINPUT make `ebb run` exit 2 (bad usage or input)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


class Stage:
    """Subclass and override. name: the stage this worker runs (load's
    "stage" must match; None accepts any). uses_gpu: open ebb's device and
    make an owner current around load/run/release. framework = "torch":
    PyTorch allocates through ebb (ebb.torch.use() before load; implies
    uses_gpu); ctx.torch(item) is an item as a tensor on the stage's
    device, and the output makers take tensors."""
    name = None
    version = "1"
    uses_gpu = False
    framework = None  # "torch"

    def load(self, options, ctx):
        pass

    def run(self, items, ctx):
        return []

    def release(self, ctx):
        """Drop caches, keep the loaded state."""

    def unload(self, ctx):
        """Drop everything (the process exits next)."""


# --- items ------------------------------------------------------------------------
def _map(name, nbytes):
    """A read-only view of /dev/shm/NAME: no copy."""
    fd = os.open("/dev/shm/" + name, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < nbytes:
            raise StageError("EBB_EPROTO", "shared memory %s holds %d bytes, the item says %d"
                             % (name, size, nbytes))
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


def _floats(buf, shape, writable=False):
    if _np is not None:
        a = _np.frombuffer(buf, dtype="<f4") if buf is not None else _np.zeros(0, "<f4")
        return a.reshape(shape)
    mv = memoryview(buf if buf is not None else bytearray(0)).cast("B").cast("f")
    return mv


class Item:
    """One of the job's items (see the module doc)."""

    def __init__(self, d):
        self.raw = d
        kind = self.kind = d.get("kind")
        self.name = d.get("name")
        self.data = None
        if kind == "json":
            self.text = d.get("text", "null")
            self._value = None
            return
        if self.kind == "audio":
            self.frames, self.channels, self.rate = d["frames"], d["channels"], d["rate"]
            self.shape = (self.frames, self.channels)
        elif self.kind == "tensor":
            self.shape = tuple(d.get("shape", ()))
        if self.kind in ("audio", "tensor"):
            n = d.get("bytes", 0)
            self._mm = _map(d["shm"], n) if n else None
            self.data = _floats(self._mm, self.shape)
        elif self.kind == "file":
            self.path = d.get("path")

    @property
    def value(self):
        if self._value is None:
            self._value = json.loads(self.text)
        return self._value

    def __repr__(self):
        return "<Item %s %r>" % (self.kind, self.name)


class Items(list):
    """The job's items: a list, also indexable by name (items["vocals"])."""

    def __getitem__(self, k):
        if isinstance(k, str):
            for it in self:
                if it.name == k:
                    return it
            raise StageError("EBB_EINPUT", "no item named '%s' (items: %s)"
                             % (k, ", ".join(str(i.name) for i in self)))
        return list.__getitem__(self, k)

    def get(self, name, kind=None):
        for it in self:
            if it.name == name and (kind is None or it.kind == kind):
                return it
        return None


class Output:
    """An item the stage adds; its payload (if any) is already in shared memory."""

    def __init__(self, d, data=None):
        self.raw, self.data = d, data
        self.name, self.kind = d["name"], d["kind"]


class Context:
    """What a stage gets besides its items: the device ebb asked for, the
    output directory, logging, and the makers of output items."""

    def __init__(self, conn):
        self._conn = conn
        self.shm_prefix = "ebb-py-%d-" % os.getpid()
        self._seq = 0
        self.device = "cpu"
        self.output_dir = "."
        self.stage_name = None
        self.owner = None  # an ebb.Owner when the stage uses_gpu

    def log(self, message, level=LOG_INFO):
        self._conn.send({"type": "log", "level": level, "scope": self.stage_name,
                         "message": str(message)})

    def _new_shm(self, nbytes):
        self._seq += 1
        name = "%so%d" % (self.shm_prefix, self._seq)
        fd = os.open("/dev/shm/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        return name, mm

    def _new_floats(self, d, shape, count):
        nbytes = 4 * count
        if not nbytes:
            d["bytes"] = 0
            return Output(d, _floats(None, shape))
        name, mm = self._new_shm(nbytes)
        d["shm"], d["bytes"] = name, nbytes
        return Output(d, _floats(mm, shape))

    def new_audio(self, name, frames, channels, rate):
        """An audio output whose .data (frames x channels) lives in shared
        memory: fill it in place, return it from run."""
        d = {"kind": "audio", "name": name, "frames": int(frames), "channels": int(channels),
             "rate": int(rate)}
        return self._new_floats(d, (int(frames), int(channels)), int(frames) * int(channels))

    def new_tensor(self, name, shape):
        shape = tuple(int(s) for s in shape)
        count = 1
        for s in shape:
            count *= s
        return self._new_floats({"kind": "tensor", "name": name, "shape": list(shape)}, shape,
                                count)

    def _copy_in(self, out, data):
        if hasattr(data, "detach"):  # a torch tensor, maybe on the device
            data = data.detach().float().cpu().numpy()
        if _np is not None:
            out.data[...] = _np.asarray(data, dtype="<f4").reshape(out.data.shape)
        else:
            src = memoryview(data).cast("B") if not hasattr(data, "tobytes") else \
                memoryview(data.tobytes())
            out.data.cast("B")[:] = src
        return out

    def audio(self, name, data, rate, channels=1):
        """An audio output copied from data (a float32 array or buffer)."""
        if hasattr(data, "numel"):  # a torch tensor
            n = data.numel()
        else:
            n = data.size if hasattr(data, "size") else len(memoryview(data).cast("B")) // 4
        return self._copy_in(self.new_audio(name, n // channels, channels, rate), data)

    def tensor(self, name, data, shape=None):
        if shape is None:
            shape = tuple(data.shape)
        return self._copy_in(self.new_tensor(name, shape), data)

    def torch(self, item):
        """An audio or tensor item as a float32 tensor on the stage's device
        (ctx.device; copied once from shared memory to the device)."""
        import torch
        if item.data is None:
            raise StageError("EBB_EINPUT", "item '%s' (%s) has no data" % (item.name, item.kind))
        import warnings
        with warnings.catch_warnings():  # read-only shared memory: copied to the device
            warnings.simplefilter("ignore", UserWarning)
            return torch.as_tensor(_np.asarray(item.data) if _np is not None else item.data,
                                   device=self.device)

    def json(self, name, value):
        return Output({"kind": "json", "name": name, "text": _dumps(value)})

    def file(self, name, path):
        return Output({"kind": "file", "name": name, "path": os.fspath(path)})

    # device memory (uses_gpu stages)
    def memory(self):
        if self.owner is None:
            return {"peak_bytes": 0}
        st, dev = self.owner.stats(), self.owner.device.stats()
        return {"peak_bytes": st["bytes_peak"], "allocated_bytes": st["tree_bytes"],
                "reserved_bytes": dev["reserved"],
                "process_bytes": dev["driver_used_by_process"]}


# --- the protocol -----------------------------------------------------------------
_LEN = struct.Struct("<I")


def _spin_s():
    """How long a read busy-polls before it sleeps: EBB_WORKER_SPIN_US (ebb
    checked it before starting this worker), default 50 us."""
    try:
        v = int(os.environ.get("EBB_WORKER_SPIN_US", "50"))
    except ValueError:
        v = 50
    return min(max(v, 0), 10000) / 1e6


class _Conn:
    """Frames over the socket. Reads go into one buffer kept for the whole
    connection (recv_into: no new buffer per call); one recv usually brings
    a whole frame (length and body), and what follows it stays for the next.
    The body is decoded straight from the buffer. A frame is sent with one
    sendall. Before a read sleeps it busy-polls the socket (non-blocking
    recv) for up to EBB_WORKER_SPIN_US: a request that follows the last
    answer within it costs no wake-up of a sleeping process, as ebb does
    for the answer on its side."""

    def __init__(self, fd, size=65536):
        self.sock = socket.socket(fileno=fd)
        self._buf = bytearray(size)
        self._mv = memoryview(self._buf)
        self._start = self._end = 0
        self._spin = _spin_s()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def _recv_into(self, mv):
        if self._spin:
            ready, now = self._poll.poll, time.perf_counter
            until, yield_ = now() + self._spin, os.sched_yield
            while not ready(0):  # poll(0): no exception per empty try, unlike recv
                if now() > until:
                    break
                yield_()  # ebb, if it waits for this core, runs first
        return self.sock.recv_into(mv)

    def _fill(self, n):
        """Makes the buffer hold at least n unread bytes; False on EOF before any."""
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start + n > len(self._buf):  # move the unread part down, or grow
            unread = bytes(self._mv[self._start:self._end])
            if n > len(self._buf):
                self._mv.release()
                self._buf = bytearray(n)
                self._mv = memoryview(self._buf)
            self._buf[:len(unread)] = unread
            self._start, self._end = 0, len(unread)
        while self._end - self._start < n:
            k = self._recv_into(self._mv[self._end:])
            if not k:
                if self._end == self._start:
                    return False
                raise EOFError("ebb closed the connection in the middle of a frame")
            self._end += k
        return True

    def recv(self):
        if self._end - self._start < 4 and not self._fill(4):
            return None
        s = self._start
        (n,) = _LEN.unpack_from(self._buf, s)
        if n == 0 or n > MAX_FRAME:
            raise ValueError("bad frame length %d" % n)
        if self._end - s < 4 + n:
            if not self._fill(4 + n):
                raise EOFError("ebb closed the connection in the middle of a frame")
            s = self._start
        s += 4
        self._start = s + n
        return _loads(str(self._mv[s:s + n], "utf-8"))

    def send(self, msg):
        body = _ENCODE(msg).encode("utf-8")
        self.sock.sendall(_LEN.pack(len(body)) + body)


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    parent = os.environ.get("EBB_WORKER_PARENT")
    if parent and int(parent) != os.getppid():
        sys.exit(1)


class _Runner:
    def __init__(self, cls, conn):
        self.cls, self.conn = cls, conn
        self.ctx = Context(conn)
        self.stage = None
        self.load_dir = "."

    def _owned(self, fn, *args):
        if self.ctx.owner is None:
            return fn(*args)
        with self.ctx.owner:
            return fn(*args)

    def hello(self, msg):
        self.ctx.shm_prefix = msg.get("shm_prefix", self.ctx.shm_prefix)
        self.ctx.stage_name = msg.get("name") or msg.get("stage")
        gpu = self.cls.uses_gpu or self.cls.framework is not None
        devices = ["cpu", "cuda"] if gpu else ["cpu"]
        # a GPU stage's memory is its ebb owner's: it can sleep keeping it
        return {"type": "hello", "protocol": PROTOCOL,
                "worker": os.path.basename(sys.argv[0]) or "python",
                "version": str(self.cls.version), "pid": os.getpid(),
                "capabilities": {"items": ["audio", "tensor", "json", "file"],
                                 "devices": devices, "sleep": gpu}}

    def load(self, msg):
        want = self.cls.name
        if want is not None and msg.get("stage") != want:
            raise StageError("EBB_ENOTFOUND", "%s runs stage '%s', not '%s'"
                             % (os.path.basename(sys.argv[0]), want, msg.get("stage")))
        self.ctx.device = msg.get("device", "cpu")
        # load's directory (a private one under ebb): between runs, at release and exit
        self.load_dir = self.ctx.output_dir = msg.get("output_dir", ".")
        fw = self.cls.framework
        if fw not in (None, "torch"):
            raise StageError("EBB_ECONFIG", "%s: framework %r: ebb.worker knows 'torch' (or None)"
                             % (type(self.cls).__name__, fw))
        if (self.cls.uses_gpu or fw) and self.ctx.device.startswith("cuda"):
            import ebb
            if fw == "torch":  # before the stage's first CUDA tensor
                import ebb.torch
                import torch
                ebb.torch.use()
                torch.cuda.set_device(int(self.ctx.device.partition(":")[2] or 0))
            dev = ebb.Device(self.ctx.device)
            self.ctx.owner = dev.owner(self.ctx.stage_name or want or "stage")
        self.stage = self.cls()
        self._owned(self.stage.load, msg.get("options") or {}, self.ctx)
        return {"type": "loaded", "memory": self.ctx.memory()}

    def run(self, msg):
        if self.stage is None:
            raise StageError("EBB_ESTATE", "run before load")
        items = Items([Item(d) for d in msg.get("items", ())])
        ctx = self.ctx
        ctx.output_dir = msg.get("output_dir") or self.load_dir  # this job's, not the first's
        try:
            if ctx.owner is None:  # (_owned, without the call: this is the hot path)
                outs = self.stage.run(items, ctx) or ()
            else:
                with ctx.owner:
                    outs = self.stage.run(items, ctx) or ()
        finally:
            ctx.output_dir = self.load_dir  # the job's directory is not the stage's after it
        return {"type": "result", "items": [o.raw if isinstance(o, Output) else o for o in outs],
                "memory": ctx.memory()}

    def release(self, msg):
        if self.stage is not None:
            self._owned(self.stage.release, self.ctx)
        got = 0
        if self.ctx.owner is not None:
            import ebb
            got = int(ebb.release(device=self.ctx.owner.device))
        return {"type": "released", "released_bytes": got, "memory": self.ctx.memory()}

    def sleep(self, msg):
        """Caches dropped (the stage's release), then the owner's blocks
        copied to host memory at their addresses and the device memory given
        back; the process and its context stay (docs/worker-protocol.md)."""
        if self.ctx.owner is None:
            raise StageError("EBB_ESTATE", "sleep: this stage holds no ebb device memory")
        import ebb
        self._owned(self.stage.release, self.ctx)
        self._sync()
        kept = self.ctx.owner.stats()["bytes"]
        parked = self.ctx.owner.park()
        got = int(ebb.release(device=self.ctx.owner.device))
        return {"type": "asleep", "released_bytes": parked + got, "backup_bytes": kept,
                "memory": self.ctx.memory()}

    def wake(self, msg):
        if self.ctx.owner is None:
            raise StageError("EBB_ESTATE", "wake: this stage holds no ebb device memory")
        self.ctx.owner.wake()
        return {"type": "awake", "restored_bytes": self.ctx.owner.stats()["bytes"],
                "memory": self.ctx.memory()}

    def _sync(self):
        """Work still queued on the device finishes before its memory moves."""
        if self.cls.framework == "torch":
            import torch
            torch.cuda.synchronize()

    def exit(self, msg):
        if self.stage is not None:
            self._owned(self.stage.unload, self.ctx)
            self.stage = None
        got = leaked = 0
        o = self.ctx.owner
        if o is not None:
            import warnings

            import ebb
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = o.release()
            if r.leaks:  # the fixed leak lines, through ebb's log
                for line in r.leaks.lines():
                    tag = "[%s] " % r.leaks.owner
                    self.conn.send({"type": "log", "level": LOG_WARN, "scope": r.leaks.owner,
                                    "message": line[len(tag):] if line.startswith(tag) else line})
                leaked = r.leaks.bytes
            # PyTorch keeps its context for the life of the process: the
            # exit gives it back, not ebb
            ctx_too = self.cls.framework != "torch"
            got = int(r) + int(ebb.release(context=ctx_too, device=o.device))
        return {"type": "bye", "released_bytes": got, "leaked_bytes": leaked}


def _error_answer(e, stage):
    if isinstance(e, StageError):
        return {"type": "error", "code": e.code, "message": e.message}
    tb = traceback.extract_tb(e.__traceback__)
    where = "%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else "?"
    return {"type": "error", "code": "EBB_ESTAGE",
            "message": "%s: %s: %s (at %s)" % (stage or "stage", type(e).__name__, e, where)}


def serve(stage_class, fd=None):
    """Runs the protocol on $EBB_WORKER_FD until ebb says exit or closes the
    socket; returns the process exit status (use sys.exit(serve(Cls)))."""
    if fd is None:
        env = os.environ.get("EBB_WORKER_FD")
        if env is None:
            print("%s: EBB_WORKER_FD is not set: ebb starts this program itself (a stage "
                  "entry with \"worker\": PATH)" % os.path.basename(sys.argv[0]), file=sys.stderr)
            return 2
        fd = int(env)
        _die_with_parent()
    conn = _Conn(fd)
    r = _Runner(stage_class, conn)
    handlers = {"hello": r.hello, "load": r.load, "run": r.run, "release": r.release,
                "sleep": r.sleep, "wake": r.wake, "exit": r.exit}
    while True:
        msg = conn.recv()
        if msg is None:
            return 0
        t = msg.get("type")
        try:
            h = handlers.get(t)
            if h is None:
                raise StageError("EBB_EPROTO", "unknown message type %r" % t)
            conn.send(h(msg))
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            conn.send(_error_answer(e, r.ctx.stage_name))
        if t == "exit":
            if r.cls.framework == "torch":
                # everything is given back (bye said so) and the process
                # ends now: PyTorch's own teardown took longer than ebb's
                # 5 s grace on a loaded machine, which then killed it
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            return 0

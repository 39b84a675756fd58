"""phasemark -- default-off semantic phase ranges for Python programs.

A pure-Python binding (ctypes, standard library only) over libphasemark,
the marker layer whose contract is include/phasemark/mark.h. The same
library decides, formats and pushes, so a Python server and a C engine in
one process share one decision, one identity and one grammar:

    import phasemark as pm

    with pm.prefill(req=3, pos=0, tokens=11):       # pm.prefill mode=exact ...
        with pm.layer_range(0, 11, shard=0, backend="cuda:0", req=3, tokens=11):
            model(...)

    @pm.decode(req=3, pos=11)                         # a decorator too
    def step(): ...

Every kind of mark.h is here: prefill, decode, spec_decode, draft,
layer_range, batch, a generic named range (range) and a phase scope
without a range (phase). Each call returns a scope that is a context
manager and a decorator; the range pops on every exit, exceptions
included, and only a push the backend accepted is ever popped.

Markers are off unless the library's variable (PHASEMARK unless the
embedder chose another) enables them, or enable() does. configure() and
enable() must come before the first marker call of the process, as in C;
afterwards they raise PhasemarkError (code PM_ERR_DECIDED). Off, a scope
costs a Python call and one read of the library's gate; no text is built.

Threading: scopes may be used from any thread; pop on the thread that
pushed, which a with-block or a decorated call does by construction.

The library is found, in order: the PHASEMARK_LIBRARY environment
variable (a path), the installed tree this package was installed with
(cmake --install), then the loader's search for libphasemark.so.0.
"""

import ctypes
import os
import threading

__all__ = [
    "PhasemarkError", "configure", "enable", "enabled", "backend_name",
    "current_phase", "range", "prefill", "decode", "spec_decode", "draft",
    "layer_range", "batch", "phase", "PM_OK", "PM_ERR_DECIDED",
    "PM_ERR_INVALID",
]

# Status codes of mark.h (never renumbered).
PM_OK = 0
PM_ERR_DECIDED = -1
PM_ERR_INVALID = -2

# pm_mode values of mark.h, by the names the environment variable takes.
_MODES = {"off": 0, "auto": 1, "roctx": 2, "nvtx": 3}

# pm_phase values of phasemark/phase.h, by the names ranges carry.
_PHASES = {"none": 0, "exact": 1, "decode": 2, "verify": 3, "batched": 4}
_PHASE_NAMES = {v: k for k, v in _PHASES.items()}

_WHERE = {"local": 0, "remote": 1}

# mark.h's PM_LAYER_ATTR_VERSION, PM_CONFIG_VERSION, PM_BATCH_MAX.
_LAYER_ATTR_VERSION = 2
_CONFIG_VERSION = 1
_BATCH_MAX = 64


class PhasemarkError(Exception):
    """A configuration call the library refused; .code is its status."""

    def __init__(self, code, what):
        self.code = code
        super().__init__("phasemark: %s: %s" % (what, _lib.pm_strerror(code).decode()))


# ---- the library's types, as mark.h lays them out -------------------------

class _Range(ctypes.Structure):
    _fields_ = [("depth", ctypes.c_int32), ("restores_phase", ctypes.c_uint8),
                ("prev_phase", ctypes.c_uint8)]


class _Config(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16),
                ("env_name", ctypes.c_char_p), ("prefix", ctypes.c_char_p),
                ("nvtx_domain", ctypes.c_char_p)]


class _LayerAttr(ctypes.Structure):
    # pm_phase and pm_where are C enums: int on every ABI we build for.
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16),
                ("phase", ctypes.c_int), ("first_layer", ctypes.c_int32),
                ("last_layer", ctypes.c_int32), ("shard", ctypes.c_int32),
                ("where", ctypes.c_int), ("backend", ctypes.c_char_p),
                ("req", ctypes.c_uint64), ("tokens", ctypes.c_uint32),
                ("batch", ctypes.c_uint64)]


class _BatchReq(ctypes.Structure):
    _fields_ = [("req", ctypes.c_uint64), ("tokens", ctypes.c_uint32)]


def _library_path():
    explicit = os.environ.get("PHASEMARK_LIBRARY")
    if explicit:
        return explicit
    try:
        from . import _install  # written by cmake --install
    except ImportError:
        return "libphasemark.so.0"
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, _install.LIBDIR_FROM_PACKAGE,
                                         _install.LIBRARY_NAME))


def _load():
    path = _library_path()
    lib = ctypes.CDLL(path)
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    protos = {
        "pm_configure": (ctypes.c_int, [ctypes.POINTER(_Config)]),
        "pm_enable": (ctypes.c_int, [ctypes.c_int]),
        "pm_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "pm_enabled": (ctypes.c_int, []),
        "pm_backend_name": (ctypes.c_char_p, []),
        "pm_current_phase": (ctypes.c_int, []),
        "pm__push_text": (_Range, [ctypes.c_char_p]),
        "pm__push_prefill": (_Range, [u64, u32, u32]),
        "pm__push_decode": (_Range, [u64, u32]),
        "pm__push_spec_decode": (_Range, [u64, u32]),
        "pm__push_draft": (_Range, [u64, u32]),
        "pm__push_layer_range": (_Range, [ctypes.POINTER(_LayerAttr)]),
        "pm__push_batch": (_Range, [u64, ctypes.c_int, ctypes.POINTER(_BatchReq), u32]),
        "pm__phase_enter": (_Range, [ctypes.c_int]),
        "pm__pop": (None, [ctypes.POINTER(_Range)]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib, path


_lib, library_path = _load()
# The gate of mark.h: 0 off (decided), 1 on, 2 undecided. Read as the C
# inline functions read it, so an off process never calls into the library
# per range; the library's entry points decide on first use.
_gate = ctypes.c_int.in_dll(_lib, "pm__gate")


def _bytes(s, what):
    if s is None:
        return None
    if not isinstance(s, str):
        raise TypeError("phasemark: %s must be a str" % what)
    return s.encode("ascii")


# ---- configuration --------------------------------------------------------

def configure(env_name=None, prefix=None, nvtx_domain=None):
    """Replaces the build's names for this process (pm_configure): the
    variable read once, the range prefix ([a-z0-9_]+), the NVTX domain.
    None keeps a name. Call before the first marker call. Raises
    PhasemarkError (PM_ERR_DECIDED, PM_ERR_INVALID) with nothing changed."""
    cfg = _Config(_CONFIG_VERSION, ctypes.sizeof(_Config), _bytes(env_name, "env_name"),
                  _bytes(prefix, "prefix"), _bytes(nvtx_domain, "nvtx_domain"))
    rc = _lib.pm_configure(ctypes.byref(cfg))
    if rc != PM_OK:
        raise PhasemarkError(rc, "configure")


def enable(mode="auto"):
    """Makes the one-time decision from mode ("off", "auto", "roctx",
    "nvtx"), bypassing the environment (pm_enable). Raises PhasemarkError
    when already decided (the earlier decision stands); enabled() tells
    whether a backend resolved."""
    if mode not in _MODES:
        raise PhasemarkError(PM_ERR_INVALID, "enable(%r)" % (mode,))
    rc = _lib.pm_enable(_MODES[mode])
    if rc != PM_OK:
        raise PhasemarkError(rc, "enable")


def enabled():
    """Decides now if undecided; True when markers are on."""
    return bool(_lib.pm_enabled())


def backend_name():
    """"roctx", "nvtx" or "off"."""
    return _lib.pm_backend_name().decode()


def current_phase():
    """The calling thread's current phase name ("none" when markers are
    off or outside any phase)."""
    return _PHASE_NAMES.get(_lib.pm_current_phase(), "invalid")


def _phase_value(name, what):
    if name not in _PHASES:
        raise ValueError("phasemark: %s: unknown phase %r" % (what, name))
    return _PHASES[name]


# ---- scopes ---------------------------------------------------------------

class _Scope:
    """One kind of range with its arguments fixed: a context manager (each
    enter pushes, each exit pops what that enter pushed, so one scope may
    be nested, re-entered recursively or shared by threads) and a
    decorator (each call of the function is one range)."""

    __slots__ = ("_push", "_args", "_local")

    def __init__(self, push, *args):
        self._push = push
        self._args = args
        self._local = threading.local()

    def __enter__(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        # Off (decided): nothing to pop. Else the library pushes (deciding
        # first when undecided); a token that neither lives nor restores a
        # phase is not kept, exactly as pm_range_pop() would skip it.
        r = None
        if _gate.value != 0:
            r = self._push(*self._args)
            if r.depth < 0 and not r.restores_phase:
                r = None
        stack.append(r)
        return self

    def __exit__(self, *exc):
        r = self._local.stack.pop()
        if r is not None:
            _lib.pm__pop(ctypes.byref(r))
        return False

    def __call__(self, fn):
        scope = self

        def wrapped(*a, **kw):
            with scope:
                return fn(*a, **kw)

        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__qualname__ = getattr(fn, "__qualname__", wrapped.__name__)
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        wrapped.__wrapped__ = fn
        return wrapped


def range(text):
    """A generic named range; text is handed to the backend as is and
    should follow the range grammar ("<prefix>.<kind> key=value ...")."""
    return _Scope(_lib.pm__push_text, _bytes(text, "text"))


def prefill(req, pos, tokens):
    """"pm.prefill mode=exact req=R pos=P tokens=N"; current phase exact."""
    return _Scope(_lib.pm__push_prefill, req, pos, tokens)


def decode(req, pos):
    """"pm.decode mode=decode req=R pos=P"; current phase decode."""
    return _Scope(_lib.pm__push_decode, req, pos)


def spec_decode(req, draft):
    """"pm.spec_decode mode=batched req=R draft=K"; current phase batched."""
    return _Scope(_lib.pm__push_spec_decode, req, draft)


def draft(req, tokens):
    """"pm.draft req=R tokens=K": a leaf around a drafter's proposal."""
    return _Scope(_lib.pm__push_draft, req, tokens)


def layer_range(first_layer, last_layer, shard=0, where="local", backend=None,
                req=0, tokens=0, phase=None, batch=0):
    """A leaf "pm.layer_range mode=M layers=A-B shard=S where=W backend=B
    req=R tokens=N" (batch=B instead of req=R when batch is set). phase
    (a phase name) wins over the thread's current phase."""
    if where not in _WHERE:
        raise ValueError("phasemark: layer_range: where must be 'local' or 'remote'")
    attr = _LayerAttr(_LAYER_ATTR_VERSION, ctypes.sizeof(_LayerAttr),
                      0 if phase is None else _phase_value(phase, "layer_range"),
                      first_layer, last_layer, shard, _WHERE[where],
                      _bytes(backend, "backend"), req, tokens, batch)
    return _Scope(_lib.pm__push_layer_range, ctypes.byref(attr))


def batch(batch_id, mode, reqs):
    """"pm.batch mode=M batch=B tokens=N reqs=R:T,...": one forward serving
    several requests; reqs is a sequence of (request id, tokens) pairs
    (1..64 of them), mode the phase of every request in it (exact, decode,
    verify), which is the current phase inside."""
    reqs = list(reqs)
    if not 1 <= len(reqs) <= _BATCH_MAX:
        raise ValueError("phasemark: batch: 1..%d requests" % _BATCH_MAX)
    arr = (_BatchReq * len(reqs))(*[_BatchReq(r, t) for r, t in reqs])
    return _Scope(_lib.pm__push_batch, batch_id, _phase_value(mode, "batch"), arr,
                     len(reqs))


def phase(name):
    """Sets the thread's current phase without a range (pm_phase_enter)."""
    return _Scope(_lib.pm__phase_enter, _phase_value(name, "phase"))

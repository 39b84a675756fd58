"""test_binding.py -- the Python binding against the C tests' ROCTX fake.

    python3 test_binding.py CASE --lib LIB --interposer FAKE --pkg DIR
                            [--asan PRELOAD] [--cmake CMAKE --build BUILD]

Each case runs in its own child python3 (a marker decision is once per
process) with tests/mark's fake interposer preloaded and echoing
(FAKE_ROCTX_ECHO=1: "interposer push <text>" and "interposer pop" lines as
they happen, and "interposer: push=N pop=M rejected=R underflow=U" at
exit). The child writes its own observations as "py ..." lines with
os.write on the same descriptor, so the order is exact. The parent
compares the child's whole stdout with the expected lines, written here by
hand from the grammar in docs/markers.md, and fails on any difference, a
nonzero exit or a 20 s timeout. Exit 0 pass, 1 fail, 77 skip.
"""

import argparse
import os
import subprocess
import sys
import tempfile

P, POP = "interposer push ", "interposer pop"


def counts(n):
    return "interposer: push=%d pop=%d rejected=0 underflow=0" % (n, n)


KINDS_EXPECTED = [
    P + "pm.prefill mode=exact req=3 pos=0 tokens=11",
    P + "pm.layer_range mode=exact layers=0-11 shard=0 where=local backend=cpu req=3 tokens=11",
    POP, POP,
    P + "pm.decode mode=decode req=3 pos=11",
    P + "pm.layer_range mode=decode layers=0-11 shard=1 where=remote backend=cuda:0 req=3 tokens=1",
    POP, POP,
    P + "pm.spec_decode mode=batched req=3 draft=4",
    P + "pm.draft req=3 tokens=4",
    POP,
    P + "pm.layer_range mode=verify layers=0-11 shard=0 where=local backend=cpu req=3 tokens=5",
    POP, POP,
    P + "pm.batch mode=decode batch=7 tokens=3 reqs=3:1,9:2",
    P + "pm.layer_range mode=decode layers=0-11 shard=0 where=local backend=cpu tokens=3 batch=7",
    POP, POP,
    P + "pm.custom step=1",
    POP,
    "py enabled=1 backend=roctx phase=none",
    counts(10),
]

# case: (environment overrides, expected stdout lines). None unsets.
CASES = {
    "kinds": ({"PHASEMARK": "roctx"}, KINDS_EXPECTED),
    "installed": ({"PHASEMARK": "roctx"}, KINDS_EXPECTED + []),
    "decorator": ({"PHASEMARK": "1"}, [
        P + "pm.decode mode=decode req=5 pos=1",
        "py step=1 phase=decode",
        P + "pm.decode mode=decode req=5 pos=1",
        "py step=0 phase=decode",
        POP, POP,
        "py result=step-done name=step",
        P + "pm.prefill mode=exact req=5 pos=0 tokens=2",
        POP,
        "py raised=1 phase=none",
        counts(3),
    ]),
    "phase": ({"PHASEMARK": "roctx"}, [
        P + "pm.batch mode=verify batch=1 tokens=3 reqs=2:3",
        "py in_batch=verify",
        "py in_scope=exact",
        "py back=verify",
        P + "pm.layer_range mode=verify layers=4-7 shard=2 where=local backend=cpu tokens=3 batch=1",
        POP, POP,
        "py after=none",
        counts(2),
    ]),
    "off": ({"PHASEMARK": None}, [
        "py enabled=0 backend=off phase=none",
        counts(0),
    ]),
    "off_zero": ({"PHASEMARK": "0"}, [
        "py enabled=0 backend=off phase=none",
        counts(0),
    ]),
    "identity": ({"PHASEMARK": None, "DFLASH_DS4_ROCTX": "roctx"}, [
        P + "ds4.prefill mode=exact req=3 pos=0 tokens=11",
        P + "ds4.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3 tokens=5",
        POP, POP,
        "py late=-1",
        counts(2),
    ]),
    "identity_off": ({"PHASEMARK": "1", "DFLASH_DS4_ROCTX": None}, [
        "py enabled=0 backend=off",
        counts(0),
    ]),
    "enable": ({"PHASEMARK": "0"}, [
        P + "pm.draft req=1 tokens=2",
        POP,
        "py again=-1 enabled=1",
        counts(1),
    ]),
    "invalid": ({"PHASEMARK": "1"}, [
        "py prefix=-2 env=-2 mode=-2 where=ValueError",
        P + "pm.prefill mode=exact req=1 pos=0 tokens=1",
        POP,
        counts(1),
    ]),
}


def say(text):
    os.write(1, (text + "\n").encode())


def child(case):
    import phasemark as pm

    if case in ("kinds", "installed"):
        if case == "installed":
            prefix = os.environ["PM_TEST_PREFIX"]
            assert pm.__file__.startswith(prefix), pm.__file__
            assert pm.library_path.startswith(prefix), pm.library_path
        with pm.prefill(3, 0, 11):
            with pm.layer_range(0, 11, shard=0, backend="cpu", req=3, tokens=11):
                pass
        with pm.decode(3, 11):
            with pm.layer_range(0, 11, shard=1, where="remote", backend="cuda:0", req=3,
                                tokens=1):
                pass
        with pm.spec_decode(req=3, draft=4):
            with pm.draft(3, 4):
                pass
            with pm.layer_range(0, 11, backend="cpu", req=3, tokens=5, phase="verify"):
                pass
        with pm.batch(7, "decode", [(3, 1), (9, 2)]):
            with pm.layer_range(0, 11, backend="cpu", tokens=3, batch=7):
                pass
        with pm.range("pm.custom step=1"):
            pass
        say("py enabled=%d backend=%s phase=%s"
            % (pm.enabled(), pm.backend_name(), pm.current_phase()))
    elif case == "decorator":
        @pm.decode(req=5, pos=1)
        def step(n):
            say("py step=%d phase=%s" % (n, pm.current_phase()))
            return step(n - 1) if n else "step-done"

        say("py result=%s name=%s" % (step(1), step.__name__))
        raised = 0
        try:
            with pm.prefill(5, 0, 2):
                raise RuntimeError("inside")
        except RuntimeError:
            raised = 1
        say("py raised=%d phase=%s" % (raised, pm.current_phase()))
    elif case == "phase":
        with pm.batch(1, "verify", [(2, 3)]):
            say("py in_batch=" + pm.current_phase())
            with pm.phase("exact"):
                say("py in_scope=" + pm.current_phase())
            say("py back=" + pm.current_phase())
            with pm.layer_range(4, 7, shard=2, backend="cpu", tokens=3, batch=1):
                pass
        say("py after=" + pm.current_phase())
    elif case in ("off", "off_zero"):
        with pm.prefill(1, 0, 1), pm.decode(1, 1), pm.spec_decode(1, 2), pm.draft(1, 2):
            with pm.layer_range(0, 1, backend="cpu", req=1, tokens=1):
                pass
        with pm.batch(2, "exact", [(1, 1)]), pm.range("pm.custom"), pm.phase("decode"):
            pass
        say("py enabled=%d backend=%s phase=%s"
            % (pm.enabled(), pm.backend_name(), pm.current_phase()))
    elif case == "identity":
        pm.configure(env_name="DFLASH_DS4_ROCTX", prefix="ds4", nvtx_domain="ds4")
        with pm.prefill(3, 0, 11):
            with pm.layer_range(12, 23, shard=1, where="remote", backend="cuda:0", req=3,
                                tokens=5, phase="verify"):
                pass
        try:
            pm.configure(prefix="pm")
            late = 0
        except pm.PhasemarkError as e:
            late = e.code
        say("py late=%d" % late)
    elif case == "identity_off":
        pm.configure(env_name="DFLASH_DS4_ROCTX")
        with pm.prefill(3, 0, 11):
            pass
        say("py enabled=%d backend=%s" % (pm.enabled(), pm.backend_name()))
    elif case == "enable":
        pm.enable("roctx")
        with pm.draft(1, 2):
            pass
        try:
            pm.enable("off")
            again = 0
        except pm.PhasemarkError as e:
            again = e.code
        say("py again=%d enabled=%d" % (again, pm.enabled()))
    elif case == "invalid":
        codes = []
        for kw in ({"prefix": "Bad.Prefix"}, {"env_name": "1BAD"}):
            try:
                pm.configure(**kw)
                codes.append(0)
            except pm.PhasemarkError as e:
                codes.append(e.code)
        try:
            pm.enable("sometimes")
            codes.append(0)
        except pm.PhasemarkError as e:
            codes.append(e.code)
        try:
            pm.layer_range(0, 1, where="elsewhere")
            where = "accepted"
        except ValueError:
            where = "ValueError"
        say("py prefix=%d env=%d mode=%d where=%s" % (codes[0], codes[1], codes[2], where))
        with pm.prefill(1, 0, 1):
            pass
    else:
        raise SystemExit("unknown case " + case)


def install(cmake, build, prefix):
    r = subprocess.run([cmake, "--install", build, "--prefix", prefix, "--component",
                        "phasemark"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode(errors="replace"))
        raise SystemExit(1)
    pkg = os.path.join(prefix, "lib", "python3", "dist-packages")
    if not os.path.isfile(os.path.join(pkg, "phasemark", "__init__.py")):
        print("not installed: %s/phasemark/__init__.py" % pkg)
        raise SystemExit(1)
    return pkg


def parent(args):
    overrides, expected = CASES[args.case]
    env = dict(os.environ)
    preload = [p for p in (args.asan, args.interposer) if p]
    env.update({"LD_PRELOAD": " ".join(preload), "FAKE_ROCTX_ECHO": "1",
                "PYTHONPATH": args.pkg, "PHASEMARK_LIBRARY": args.lib,
                "PYTHONDONTWRITEBYTECODE": "1",
                # python3 itself is not instrumented; its allocations are
                # not ours to report.
                "ASAN_OPTIONS": "detect_leaks=0"})
    for k in ("PHASEMARK", "DFLASH_DS4_ROCTX"):
        env.pop(k, None)
    for k, v in overrides.items():
        if v is not None:
            env[k] = v
    tmp = None
    if args.case == "installed":
        tmp = tempfile.TemporaryDirectory(prefix="pm_py_install.")
        env["PYTHONPATH"] = install(args.cmake, args.build, tmp.name)
        env["PM_TEST_PREFIX"] = tmp.name
        del env["PHASEMARK_LIBRARY"]
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", args.case],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=20)
    except subprocess.TimeoutExpired:
        print("FAIL %s: child ran past 20 s" % args.case)
        return 1
    finally:
        if tmp:
            tmp.cleanup()
    got = r.stdout.decode(errors="replace").splitlines()
    ok = r.returncode == 0 and got == expected
    if not ok:
        print("FAIL %s: exit %d" % (args.case, r.returncode))
        print("stderr:\n" + r.stderr.decode(errors="replace"))
        for i in range(max(len(got), len(expected))):
            g = got[i] if i < len(got) else "<missing>"
            e = expected[i] if i < len(expected) else "<missing>"
            print("%s %2d expected: %s\n      got:      %s" % ("  " if g == e else "!!", i, e, g))
        return 1
    print("ok %s: %d lines as expected" % (args.case, len(expected)))
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--lib", required=True)
    ap.add_argument("--interposer", required=True)
    ap.add_argument("--pkg", required=True)
    ap.add_argument("--asan", default="")
    ap.add_argument("--cmake", default="cmake")
    ap.add_argument("--build", default="")
    return parent(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())

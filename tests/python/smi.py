"""What fakegpu-smi ($FAKEGPU_SMI, a separate process) says this process
holds, in MiB (context included); 0 when it is not listed."""
import os
import subprocess
import warnings


def used_mib(pid=None):
    pid = os.getpid() if pid is None else pid
    out = subprocess.run([os.environ["FAKEGPU_SMI"], "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        p, _, mib = line.partition(",")
        if p.strip() == str(pid):
            return int(mib)
    return 0


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, cond, msg):
        if not cond:
            self.failed += 1
            print("FAIL: " + msg, flush=True)

    def near(self, a, b, tol, msg):
        self.check(abs(a - b) <= tol, "%s: %s vs %s (tolerance %s)" % (msg, a, b, tol))

    def release(self, o, label, want_mib):
        """o.release(), checked: fakegpu-smi's drop is what it answers and it
        answers want_mib (both within 2 MiB), with no leak. Returns it."""
        before = used_mib()
        got = o.release()
        after = used_mib()
        print("%s: released %d MiB, fakegpu-smi %d -> %d MiB" % (label, got.mib, before, after))
        self.near(before - after, got / (1 << 20), 2, "%s: o.release() vs fakegpu-smi" % label)
        self.near(got / (1 << 20), want_mib, 2, "%s: released" % label)
        self.check(got.leaks is None, "%s leaked %s" % (label, got.leaks))
        return got

    def one_leak(self, o):
        """o.release() of an owner that forgot one block, checked: exactly one
        leak reported and an ebb.LeakWarning issued. Returns the leak report
        (falsy when there is none)."""
        import ebb
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            leaks = o.release().leaks
        self.check(leaks is not None and len(leaks) == 1, "leaks: %r" % leaks)
        self.check(any(isinstance(x.message, ebb.LeakWarning) for x in w), "no LeakWarning issued")
        return leaks

    def end(self, name):
        print("%s: %s" % (name, "ok" if not self.failed else "%d failed" % self.failed))
        return 1 if self.failed else 0

"""Run fuzz cases in child processes and classify every outcome.

A ``Worker`` is one child interpreter running ``worker.py``: it takes one case at a time and
answers with one JSON line.  When the child dies (a signal, an abort from the allocator, an
exit without a Python exception) the case is a crash; when it does not answer within the
case's timeout it is killed and the case is a hang; either way a fresh child takes the next
case.  A crash that does not happen again when its case runs alone in a fresh child (a
corruption left by an earlier case that surfaced later) is traced back: the cases the dead
child had run are replayed one by one, each alone, and the first that crashes is reported.

Outcomes (``classify``):

    ok        returned, and the answer has its property
    clean     raised ValueError/TypeError/MemoryError/OverflowError (or a subclass, such as
              scikit-learn's NotFittedError) whose message names the offending argument
    unclear   raised, but the message does not name the argument, or the exception is of
              another type (IndexError, ZeroDivisionError, ...)
    refused   a valid input (a read-only or non-contiguous array, 0 patterns, ...) raised
    bad       returned a silently bad result (NaN/inf, a bound above 0 or above the exact
              ln P(v), a probability outside [0, 1], a decreasing history, a modified input)
    crash     the child died
    hang      no answer within the timeout
"""
import collections
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")

CLEAN_TYPES = ("ValueError", "TypeError", "MemoryError", "OverflowError")
OUTCOMES = ("ok", "clean", "unclear", "refused", "bad", "crash", "hang")
#: Outcomes that are defects whatever the message.
FAILURES = ("bad", "crash", "hang")

#: Address-space limit of a child: an allocation the size of a hostile integer fails at once
#: (MemoryError, or a compiled kernel's MF_ENOMEM) instead of taking the machine's memory.
ADDRESS_SPACE = 4 * 2**30


def child_env(malloc_check=True, bare=False):
    """The environment of a child: one thread each (the machine is shared), glibc's heap
    checks on (an inconsistency aborts at once instead of much later), freed memory
    scribbled over so that a use after free reads garbage."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               MFENGINE_PROGRESS_DELAY="3600", PYTHONHASHSEED="0", MALLOC_PERTURB_="165",
               PYTHONFAULTHANDLER="1")
    if bare:
        env["MFENGINE_FUZZ_BARE"] = "1"
    if malloc_check:
        lib = "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"
        if os.path.exists(lib):
            env["LD_PRELOAD"] = (lib + " " + env.get("LD_PRELOAD", "")).strip()
            env["MALLOC_CHECK_"] = "3"
    return env


def _limit_memory():  # runs in the child before exec
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    except (ValueError, OSError):
        pass


class Worker:
    """One child interpreter; ``run(case, timeout)`` returns the child's answer or a
    crash/hang record."""

    def __init__(self, malloc_check=True, start_timeout=120, bare=False):
        self.malloc_check = malloc_check
        self.bare = bare
        self.start_timeout = start_timeout
        self.proc = None
        self.history = []        # cases this child has run
        self.n_started = 0

    def _start(self):
        self.stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            [sys.executable, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=child_env(self.malloc_check, self.bare), preexec_fn=_limit_memory,
            cwd=tempfile.gettempdir())
        self.history = []
        self.n_started += 1
        line = self._readline(self.start_timeout)
        if line is None or "ready" not in line:
            err = self._stderr_tail()
            self.close()
            raise RuntimeError(f"the fuzz worker did not start: {line!r}\n{err}")

    def _readline(self, timeout):
        """One line from the child, or None if it closed its end or timed out (sets
        ``self.timed_out``)."""
        self.timed_out = False
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
            if buf.endswith(b"\n"):
                return buf.decode("utf-8", "replace")

    def _stderr_tail(self, n=2500):
        try:
            self.stderr.flush()
            self.stderr.seek(0)
            text = self.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        # the part after the last case marker: what this case printed
        cut = text.rfind("\n=== case ")
        return text[cut:][-n:] if cut >= 0 else text[-n:]

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.kill()
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            self.stderr.close()
        self.proc = None

    def run(self, case, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.history.append(case)
        try:
            self.proc.stdin.write((json.dumps(case) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        line = self._readline(timeout)
        if line is not None:
            return json.loads(line)
        if self.timed_out:
            err = self._stderr_tail()
            self.close()
            return {"id": case["id"], "outcome": "hang", "msg": f"no answer in {timeout} s",
                    "stderr": err}
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        err = self._stderr_tail()
        self.close()
        sig = ""
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = str(-rc)
        return {"id": case["id"], "outcome": "crash", "returncode": rc, "signal": sig,
                "msg": f"child died (exit code {rc}{', ' + sig if sig else ''})", "stderr": err}


def names_argument(msg, names):
    """Whether ``msg`` contains one of ``names`` as a word (``X`` in "X[0, 1] = nan" or
    "X must be", not in "max_iter"; ``weights_`` in "weights_[0] has shape")."""
    return any(re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", msg)
               for n in names)


def classify(case, res):
    """One of OUTCOMES for a case and the child's answer."""
    out = res["outcome"]
    if out in ("ok", "bad", "crash", "hang"):
        return out
    if out == "setup_error":
        return "setup_error"
    if case.get("valid"):
        return "refused"
    mro = res.get("exc_mro") or [res.get("exc_type")]
    if not any(t in CLEAN_TYPES + tuple(case.get("clean_types") or ()) for t in mro):
        return "unclear"
    return "clean" if names_argument(res.get("msg", ""), case.get("names", [])) else "unclear"


def run_sequence(seq, timeout, malloc_check=True, bare=False):
    """Run ``seq`` in one fresh child; the answer to its last case (or the crash/hang)."""
    w = Worker(malloc_check, bare=bare)
    try:
        for case in seq:
            res = w.run(case, case.get("timeout", timeout))
            if res["outcome"] in ("crash", "hang"):
                return res if case is seq[-1] else {"id": case["id"], "outcome": "early_" + res["outcome"]}
        return res
    finally:
        w.close()


def run_cases(cases, timeout=20.0, malloc_check=True, progress=None, trace_crashes=True,
              session=400, bare=False):
    """Run every case; returns a list of (case, answer, outcome).

    ``session``: cases per child before a fresh one starts (bounds how far back a delayed
    crash has to be traced).
    """
    results = []
    w = Worker(malloc_check, bare=bare)
    try:
        for k, case in enumerate(cases):
            if w.proc is not None and len(w.history) >= session:
                w.close()
            history = list(w.history)
            res = w.run(case, case.get("timeout", timeout))
            if res["outcome"] == "crash" and trace_crashes:
                res = _trace_crash(case, res, history, timeout, malloc_check, bare)
            results.append((case, res, classify(case, res)))
            if progress is not None:
                progress(k + 1, len(cases), results[-1])
    finally:
        w.close()
    return results


def _trace_crash(case, res, history, timeout, malloc_check, bare=False):
    """A crash that recurs when its case runs alone is the case's own.  Otherwise an earlier
    case of the same child left the damage: bisect for the shortest tail of the child's
    history that, run before the case in a fresh child, still makes it crash; the first case
    of that tail is the culprit."""
    if run_sequence([case], timeout, malloc_check, bare)["outcome"] == "crash":
        res["reproduced_alone"] = True
        return res
    res["reproduced_alone"] = False

    def crashes(start):
        seq = history[start:] + [case]
        return run_sequence(seq, timeout, malloc_check, bare)["outcome"] == "crash"

    lo, hi = 0, len(history)            # history[lo:] + case crashed; history[hi:] did not
    if not history or not crashes(0):
        return res                      # not reproducible: a flaky crash
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if crashes(mid):
            lo = mid
        else:
            hi = mid
    culprit = history[lo]
    res["culprit"] = culprit["id"]
    res["culprit_repro"] = reproducer(culprit)
    return res


# ------------------------------------------------------------------------------- reports
def reproducer(case):
    """A one-line shell command that replays the case (setup, then call)."""
    code = "import numpy as np, mfengine as mf; " + "; ".join(
        s for s in (case["setup"].strip().replace("\n", "; "),
                    case["call"].strip().replace("\n", "; ")) if s)
    return f"python -c {_shell_quote(code)}"


def _shell_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def summarize(results):
    """Per family: counts of every outcome and up to 3 examples of each failure kind."""
    table = collections.OrderedDict()
    for case, res, outcome in results:
        fam = case["family"]
        row = table.setdefault(fam, {"calls": 0, **{o: 0 for o in OUTCOMES}, "setup_error": 0,
                                     "examples": collections.defaultdict(list)})
        row["calls"] += 1
        row[outcome] = row.get(outcome, 0) + 1
        if outcome not in ("ok", "clean"):
            ex = row["examples"][outcome]
            if len(ex) < 3:
                ex.append(describe(case, res))
    return table


def describe(case, res):
    what = res.get("problem") or (f"{res.get('exc_type')}: {res.get('msg')}"
                                  if res.get("exc_type") else res.get("msg"))
    d = {"id": case["id"], "entry": case.get("entry"), "edit": case.get("edit"),
         "names": case.get("names"), "what": (what or "")[:400], "repro": reproducer(case)}
    if res.get("outcome") == "crash":
        d["stderr"] = (res.get("stderr") or "")[-800:]
        if res.get("culprit"):
            d["culprit_repro"] = res["culprit_repro"]
    return d


def format_table(table, examples=True):
    cols = ("calls", "crash", "hang", "bad", "unclear", "refused", "clean", "ok")
    head = f"{'family':<16}" + "".join(f"{c:>9}" for c in cols)
    lines = [head, "-" * len(head)]
    total = collections.Counter()
    for fam, row in table.items():
        lines.append(f"{fam:<16}" + "".join(f"{row.get(c, 0):>9}" for c in cols))
        for c in cols:
            total[c] += row.get(c, 0)
    lines.append("-" * len(head))
    lines.append(f"{'total':<16}" + "".join(f"{total[c]:>9}" for c in cols))
    if examples:
        for fam, row in table.items():
            for outcome in ("crash", "hang", "bad", "unclear", "refused", "setup_error"):
                for ex in row["examples"].get(outcome, []):
                    lines.append(f"\n[{fam}] {outcome}: {ex['entry']} / {ex['edit']} "
                                 f"(names {ex['names']})\n    {ex['what']}\n    {ex['repro']}")
                    if ex.get("culprit_repro"):
                        lines.append(f"    (crash left by an earlier case: {ex['culprit_repro']})")
    return "\n".join(lines)

"""Run XGrammar in a child process, so that a crash in its C++ code is a reported event.

XGrammar 0.2.9 dies with SIGSEGV on some grammars (the known defect, see
:func:`matches_known_crash`).  Tests that feed it random grammars ask a long-lived worker
process instead of calling it inside pytest: the worker answers each request with verdicts,
XGrammar's error message, or (when XGrammar dies) a :class:`Crash` naming the call that was
running.  Texts that match the known crash pattern run in a ``fork`` of the worker (about
20 ms), so the expected crash costs no worker restart (about 3 s: importing xgrammar pulls in
torch); any other crash kills the worker, which the next request starts again, and from then
on every request runs in a fork (so Hypothesis shrinks a new crash quickly).

The parent side needs only the standard library (pytest only in :func:`verdicts_or_known_crash`);
the worker side imports xgrammar.

Protocol, one request at a time: the parent writes one JSON line
``{"text", "root", "data": [hex, ...], "isolate": bool, "timeout": seconds}`` (with
``"regex": true`` the text is a regular expression for ``Grammar.from_regex``).  Whoever runs the
request writes ``S <stage>`` before each XGrammar call and ``R <json>`` at the end, with
``{"ok": [[member, viable], ...]}`` or ``{"error": message}``.  With ``"lark": true`` the text
is a Lark grammar for ``Grammar.from_lark``.  For an isolated request the
worker then writes ``E <returncode>`` (or ``E timeout``) once the forked child has ended.  A
worker that stops writing without an answer has crashed in the last stage named.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Any

from formalgram_cfgzip.engines._xgrammar_guard import matches_known_crash


@dataclass(frozen=True)
class Crash:
    """XGrammar died (or hung) while running ``stage`` on ``text``.

    ``stage`` is the call that was running: from_ebnf or from_regex, compile_grammar, matcher (constructing
    the GrammarMatcher), accept_string, or start (the worker died before answering anything).
    """

    text: str
    stage: str
    returncode: int | None  # -11 for SIGSEGV; None when killed after a timeout
    stderr_tail: str

    def describe(self) -> str:
        how = "timed out" if self.returncode is None else f"died with exit status {self.returncode}"
        tail = f"\nstderr:\n{self.stderr_tail}" if self.stderr_tail.strip() else ""
        return f"xgrammar {how} in {self.stage} on the grammar:\n{self.text}{tail}"


@dataclass(frozen=True)
class Refused:
    """XGrammar raised an exception (an ordinary refusal, e.g. a syntax error)."""

    message: str


Verdicts = list[tuple[bool, bool]]  # (member, viable prefix) per input string
Result = Verdicts | Refused | Crash


# ---------------------------------------------------------------------------------------
# the known XGrammar 0.2.9 defect: described and detected in formalgram_cfgzip.engines._xgrammar_guard


def is_known_crash(result: Result) -> bool:
    """Whether ``result`` is the known defect: SIGSEGV in compile_grammar on the known shape."""
    return (
        isinstance(result, Crash)
        and result.stage == "compile_grammar"
        and result.returncode == -signal.SIGSEGV
        and matches_known_crash(result.text)
    )


# ---------------------------------------------------------------------------------------
# parent side


class XGrammarWorker:
    """A restartable child process answering XGrammar requests.

    Parameters
    ----------
    timeout : float
        Seconds XGrammar may spend on one request before it is killed and the request is
        reported as a :class:`Crash` with ``returncode=None``.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.starts = 0
        # after an unexpected crash every request runs in a fork, so that Hypothesis can shrink
        # the failing grammar without paying a worker restart per attempt
        self.isolate_all = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = b""

    def _start(self) -> subprocess.Popen[bytes]:
        self.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the worker; closed in close()
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,  # own process group: a hung fork is killed with it
        )
        self._buffer = b""
        self.starts += 1
        return self._proc

    def start(self) -> None:
        """Start the worker now unless it runs already (it imports xgrammar: ~3 s)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()

    def close(self) -> None:
        """Stop the worker: close its stdin (it exits), and kill it if it is still busy."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                self._kill(proc)
            assert proc.stdout is not None
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.wait()

    def _stderr_tail(self, since: int) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(since)
        return self._stderr.read()[-2000:].decode("utf-8", "replace")

    def _read_line(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
        """One line from the worker; None at end of file; TimeoutError past ``deadline``."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise TimeoutError
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def run(
        self,
        text: str,
        data: list[bytes],
        root: str = "root",
        isolate: bool | None = None,
        regex: bool = False,
        lark: bool = False,
    ) -> Result:
        """XGrammar's verdicts on ``data`` for the grammar ``text`` with start rule ``root``.

        ``isolate`` (default: ``isolate_all`` or :func:`matches_known_crash`) runs the request
        in a fork of the worker, so that a crash leaves the worker alive.  ``regex``: ``text``
        is a regular expression, compiled with ``Grammar.from_regex``; ``lark``: a Lark grammar,
        compiled with ``Grammar.from_lark``.
        """
        if isolate is None:
            isolate = self.isolate_all or (not regex and not lark and matches_known_crash(text))
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert self._stderr is not None
        stderr_at = self._stderr.seek(0, os.SEEK_END)
        request = {
            "text": text,
            "root": root,
            "data": [d.hex() for d in data],
            "isolate": isolate,
            "timeout": self.timeout,
            "regex": regex,
            "lark": lark,
        }
        deadline = time.monotonic() + self.timeout + 30  # backstop: the worker times out first
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died already; reported below
        stage = "start"
        answer: Result | None = None
        returncode: int | None = None
        while True:
            try:
                line = self._read_line(proc, deadline)
            except TimeoutError:
                line = None
            if line is None:  # the worker itself died or hung
                if proc.poll() is None:
                    self._kill(proc)
                returncode = proc.returncode if proc.returncode is not None and proc.returncode < 0 else None
                crash = Crash(text, stage, returncode, self._stderr_tail(stderr_at))
                self.close()
                self.isolate_all = True
                return crash
            kind, _, rest = line.decode().partition(" ")
            if kind == "S":
                stage = rest
            elif kind == "R":
                got = json.loads(rest)
                answer = (
                    Refused(got["error"]) if "error" in got else [(bool(m), bool(v)) for m, v in got["ok"]]
                )
                if not isolate:
                    return answer
            elif kind == "E":
                returncode = None if rest == "timeout" else int(rest)
                if answer is not None and returncode == 0:
                    return answer
                return Crash(text, stage, returncode, self._stderr_tail(stderr_at))


_SHARED: XGrammarWorker | None = None


def shared_worker() -> XGrammarWorker:
    """The worker shared by every test of this pytest process (stopped at exit)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = XGrammarWorker()
        atexit.register(_SHARED.close)
    return _SHARED


def prestart_shared_worker() -> None:
    """Start the shared worker at collection time when xgrammar is installed.

    Its import of xgrammar (about 3 s, mostly torch) then overlaps with the tests that run
    before the first XGrammar request instead of delaying that request.
    """
    if importlib.util.find_spec("xgrammar") is not None:
        shared_worker().start()


def verdicts_or_known_crash(text: str, data: list[bytes], root: str = "root") -> Verdicts | None:
    """XGrammar's ``(member, viable)`` verdicts, or None on the known crash; fails the test otherwise.

    Any other crash, hang or refusal fails the calling test with the grammar text.
    """
    import pytest

    result = shared_worker().run(text, data, root)
    if isinstance(result, list):
        return result
    if is_known_crash(result):
        return None
    if isinstance(result, Crash):
        pytest.fail(f"unexpected XGrammar crash (not the known pattern): {result.describe()}")
    pytest.fail(f"XGrammar refused the grammar: {result.message}\n{text}")


# ---------------------------------------------------------------------------------------
# worker side


def _handle(xgr: Any, compiler: Any, request: dict[str, Any], say: Any) -> None:
    stage = "from_ebnf"
    try:
        if request.get("regex"):
            stage = "from_regex"
            say("S from_regex")
            grammar = xgr.Grammar.from_regex(request["text"])
        elif request.get("lark"):
            stage = "from_lark"
            say("S from_lark")
            grammar = xgr.Grammar.from_lark(request["text"])
        else:
            say("S from_ebnf")
            grammar = xgr.Grammar.from_ebnf(request["text"], root_rule_name=request["root"])
        stage = "compile_grammar"
        say("S compile_grammar")
        compiled = compiler.compile_grammar(grammar)
        stage = "matcher"
        say("S matcher")
        matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
        stage = "accept_string"
        say("S accept_string")
        verdicts = []
        for item in request["data"]:
            matcher.reset()
            if matcher.accept_string(bytes.fromhex(item)):
                verdicts.append((bool(matcher.is_terminated()), True))
            else:
                verdicts.append((False, False))
    except Exception as exc:  # XGrammar's refusal (its own error types)
        say("R " + json.dumps({"error": f"{stage}: {type(exc).__name__}: {exc}"}))
    else:
        say("R " + json.dumps({"ok": verdicts}))


def _wait(pid: int, timeout: float) -> str:
    """Wait for the forked child ``pid``; its exit status as a returncode string, or ``timeout``."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd >= 0:
        with selectors.DefaultSelector() as sel:
            sel.register(pidfd, selectors.EVENT_READ)
            ready = sel.select(timeout)
        os.close(pidfd)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
    _, status = os.waitpid(pid, 0)
    return str(os.waitstatus_to_exitcode(status))


def _serve() -> None:
    import xgrammar as xgr

    out = sys.stdout.buffer
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)

    def say(line: str) -> None:
        out.write(line.encode() + b"\n")
        out.flush()

    for raw in sys.stdin.buffer:
        request: dict[str, Any] = json.loads(raw)
        if not request["isolate"]:
            _handle(xgr, compiler, request, say)
            continue
        pid = os.fork()
        if pid == 0:  # the forked child: answer, then leave without running any cleanup
            try:
                fresh = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
                _handle(xgr, fresh, request, say)
            finally:
                os._exit(0)
        say("E " + _wait(pid, float(request["timeout"])))


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: _xgrammar_child.py --serve  (started by XGrammarWorker)")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in pytest stops the parent, which closes us
    _serve()

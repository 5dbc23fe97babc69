"""Compression in a worker process: classes computed beside a server's threads, under a hard time limit.

The compression pipeline holds the interpreter (mypyc code and the C search kernel release it
rarely), so a compression on a thread of a serving process stalls that process's other threads
(the mask fills of the requests being decoded) for as long as it runs, and a thread cannot be
stopped when it runs too long.  :class:`BackgroundCompressor` runs a
:class:`~formalgram_cfgzip.compress.Compressor` in a worker process of its own instead: the
caller's threads only wait on a pipe (the interpreter free), a compression past its time limit
is stopped by ending its worker (a fresh one is started), and a crash of a worker fails that
job, not the server.  A few workers are kept started (preparing a vocabulary takes about a
second), so that a job given up while it runs (:meth:`CompressionJob.cancel`: its grammar is
no longer needed) may finish on its worker while the next job runs on another.

The classes travel back as the cache format (:meth:`TokenClasses.save
<formalgram_cfgzip.classes.TokenClasses.save>` into a private temporary directory, signed with
a key only this object and its worker know, and :meth:`TokenClasses.load
<formalgram_cfgzip.classes.TokenClasses.load>` with every fingerprint and invariant checked):
a few milliseconds for a 128k-token vocabulary.  Nothing the worker sends is unpickled.  A job
may also ask for the native engine's tables (``submit(..., native_tables=True)``): the worker
builds them from the classes and the GNF its search used, and they travel the same way
(:meth:`NativeTables.save <formalgram_cfgzip.engines.native.tables.NativeTables.save>`,
signed, loaded with every index checked), so the caller's process does not convert the
grammar to GNF a second time (beside XGrammar's compile of the same grammar that took it
0.5-0.7 s on large MaskBench schemas instead of 0.1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import multiprocessing as mp
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.engines.native.tables import NativeTables
from formalgram_cfgzip.errors import EngineError, without_frames
from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = ["BackgroundCompressor", "CompressionJob"]


@dataclass
class CompressionJob:
    """One grammar handed to a :class:`BackgroundCompressor`.

    Attributes
    ----------
    text : str
        The grammar text.
    timeout : float or None
        Seconds the worker may spend on it.
    native_tables : bool
        Whether the native engine's tables were asked for.
    classes : TokenClasses or None
        The result, once done.
    tables : NativeTables or None
        The native engine's tables of :attr:`classes`, once done (``native_tables`` only).
    error : BaseException or None
        Why it failed, once done.
    seconds : float or None
        From submission to the result (queueing, the compression and the transfer).
    """

    text: str
    timeout: float | None
    native_tables: bool = False
    classes: TokenClasses | None = None
    tables: NativeTables | None = None
    error: BaseException | None = None
    seconds: float | None = None
    submitted: float = field(default_factory=time.perf_counter)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _owner: BackgroundCompressor | None = field(default=None, repr=False)
    _cancelled: bool = field(default=False, repr=False)
    _cancelled_at: float | None = field(default=None, repr=False)

    def done(self) -> bool:
        """Whether the job has finished (with classes or an error)."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Give the job up: it fails at once with a "cancelled" error.  A queued job is
        dropped; a running one is left to finish on its worker for at most the compressor's
        ``abandon_after`` seconds more (then the worker is ended), its result unused, while
        the other workers take the next jobs.  Nothing happens to a finished job."""
        owner = self._owner
        if owner is not None and not self.done():
            owner._cancel(self)

    def result(self, timeout: float | None = None) -> TokenClasses:
        """The classes, waiting up to ``timeout`` seconds.

        Raises
        ------
        TimeoutError
            If the job is not done in time.
        EngineError, FormalgramError
            Why the job failed.
        """
        if not self._done.wait(timeout):
            raise TimeoutError("the compression has not finished")
        error = self.error
        if error is not None:
            try:
                raise error
            finally:
                # the frame raising it, held by the error's traceback, holds the job
                del error, self
        assert self.classes is not None
        return self.classes

    def _finish(
        self, classes: TokenClasses | None, error: BaseException | None, tables: NativeTables | None = None
    ) -> None:
        if self._done.is_set():  # a cancelled job keeps its "cancelled" error
            return
        self.classes, self.tables = classes, tables
        self.error = None if error is None else without_frames(error)
        self.seconds = time.perf_counter() - self.submitted
        self._done.set()


def _end_with_parent(parent: int, interval: float = 0.25) -> None:
    """A worker's watch: end the worker's process once its parent is gone.

    The parent enforces every job's time limit; a worker whose parent died (killed, or ended
    without :meth:`BackgroundCompressor.close`) would otherwise compress on, unbounded, as an
    orphan.  The check needs the interpreter, so a kernel call that holds it delays the end
    until the call returns."""
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(3)


def _worker(
    conn: Connection, vocab: Vocabulary, options: dict[str, Any], key: bytes, nice: int, preload: bool
) -> None:
    """The worker loop: (text, directory, native tables wanted) in, ``("ok", "")`` or
    ``("error", message)`` out."""
    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.engines.native.matcher import TABLES_SUBDIR
    from formalgram_cfgzip.engines.native.tables import build_tables
    from formalgram_cfgzip.xgrammar_regex import preload as preload_xgrammar

    if nice and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)

    threading.Thread(
        target=_end_with_parent, args=(os.getppid(),), daemon=True, name="formalgram-orphan-watch"
    ).start()
    compressor = Compressor(vocab, cache_size=0, **options)
    if preload:
        preload_xgrammar()
    conn.send(("ready", ""))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        text, directory, want_tables = job
        try:
            classes = compressor.compress(text)
            classes.save(directory, key=key)
            if want_tables:
                tables = build_tables(classes, text, check=False)
                tables.save(os.path.join(directory, TABLES_SUBDIR), key=key)
        except Exception as exc:  # every failure goes back as text
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", ""))


class BackgroundCompressor:
    """A :class:`~formalgram_cfgzip.compress.Compressor` in worker processes, jobs served in order.

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary (sent to each worker when it starts).
    timeout : float or None
        Default time limit of a job, in seconds (its worker is ended past it).
    workers : int
        Worker processes kept started (at least 1).  One job runs on each at a time; with two
        or more, a job given up while it runs does not hold up the next.
    abandon_after : float
        Seconds a cancelled job may go on running on its worker before the worker is ended.
    nice : int
        How much lower the workers' scheduling priority is than the caller's (``os.nice``;
        0 keeps it; ignored where the platform has no ``nice``).  A compression then takes the
        processor only when the caller's threads (XGrammar's compile of the same grammar, the
        masks of the requests being decoded) leave it idle: on a loaded 2-core machine a
        worker at the caller's priority made XGrammar's compile of the same schema twice as
        slow, at ``nice=10`` it was as fast as alone.
    preload_xgrammar : bool or None
        Whether each worker imports XGrammar when it starts, before it is ready (a grammar's
        ``Regex`` macros need it, and the import takes seconds: without it, the first such
        grammar on each worker took 4 s instead of 0.4).  ``None`` (default): when XGrammar
        is installed.
    **options
        The compressor's options (``specialize``, ``domains``, budgets; see
        :class:`~formalgram_cfgzip.compress.Compressor`).

    Attributes
    ----------
    vocab : Vocabulary
    restarts : int
        Workers ended and replaced (time limits, cancellations past ``abandon_after``, crashes).

    Notes
    -----
    A worker prepares the vocabulary when it starts (about a second for 128k tokens, in the
    background from the construction on: the first job waits for the first worker).  Jobs
    are taken in the order they came, one per idle worker.  A job's time counts from when a
    worker takes it.  The caller's threads hold the interpreter only to send a job and to
    load its result.  :meth:`close` (or the end of the process) ends the workers.  A daemonic
    process cannot start processes (``multiprocessing`` forbids it): there the jobs fail with
    that reason, and a progressive grammar stays on XGrammar's masks.

    Examples
    --------
    >>> bg = BackgroundCompressor(Vocabulary([b"(", b")", b"x"]), timeout=60, workers=1)
    >>> bg.wait_ready(timeout=60)
    True
    >>> classes = bg.submit('root ::= "(" root ")" | "x"').result()
    >>> classes.num_classes, bg.restarts
    (3, 0)
    >>> job = bg.submit('root ::= "(" root ")" | "x"', native_tables=True)  # the native engine's too
    >>> job.result().num_classes == job.tables.num_classes
    True
    >>> bg.close()
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        timeout: float | None = 60.0,
        workers: int = 2,
        abandon_after: float = 2.0,
        nice: int = 10,
        preload_xgrammar: bool | None = None,
        **options: Any,
    ) -> None:
        if workers < 1:
            raise EngineError(f"workers must be at least 1, got {workers}")
        self.vocab = vocab
        self.timeout = timeout
        self.workers = workers
        self.abandon_after = abandon_after
        self.nice = nice
        if preload_xgrammar is None:
            preload_xgrammar = importlib.util.find_spec("xgrammar") is not None
        self.preload_xgrammar = preload_xgrammar
        self.options = options
        self.restarts = 0
        self._key = secrets.token_bytes(32)
        self._root = tempfile.mkdtemp(prefix="formalgram-bg-")
        self._ctx = mp.get_context("spawn")
        self._lock = threading.Condition()
        self._waiting: list[CompressionJob] = []  # submitted, not yet on a worker (in order)
        self._idle: list[tuple[Any, Connection]] = []
        self._live: set[Any] = set()  # every started worker process
        self._starting = 0
        self._spawn_error: BaseException | None = None
        self._closed = False
        self._serial = 0
        for _ in range(workers):
            self._replace_worker()

    def submit(
        self, text: str, *, timeout: float | None = None, native_tables: bool = False
    ) -> CompressionJob:
        """Queue the compression of ``text``; returns at once.

        Parameters
        ----------
        text : str
            GBNF / XGrammar EBNF text (start rule ``root``).
        timeout : float or None
            This job's time limit (default: the compressor's).
        native_tables : bool
            Also build the native engine's tables in the worker
            (:func:`~formalgram_cfgzip.engines.native.tables.build_tables`, within the same
            time limit) and return them in :attr:`CompressionJob.tables`, for
            ``compile_grammar(..., engine="native", tables=job.tables)``.  Cheap in the
            worker when the compressor's options include ``domains=True`` (the classes then
            carry the search's domains and GNF); a failure to build them fails the job.

        Returns
        -------
        CompressionJob

        Raises
        ------
        EngineError
            If the compressor is closed.
        """
        job = CompressionJob(
            text, self.timeout if timeout is None else timeout, native_tables=native_tables, _owner=self
        )
        with self._lock:
            if self._closed:
                raise EngineError("the background compressor is closed")
            self._waiting.append(job)
        threading.Thread(target=self._run, args=(job,), daemon=True, name="formalgram-background-job").start()
        return job

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until no worker is still starting (each has prepared the vocabulary and, with
        :attr:`preload_xgrammar`, imported XGrammar); whether every start succeeded.

        A server calls it once after the construction, so that its first requests do not
        wait for the workers.

        Parameters
        ----------
        timeout : float or None
            Seconds to wait at most (``None``: until the starts end).

        Returns
        -------
        bool
            ``False`` if a start failed, the wait ran out, or the compressor is closed.

        Notes
        -----
        Waits on the compressor's condition; no work of its own.
        """
        with self._lock:
            done = self._lock.wait_for(lambda: self._starting == 0 or self._closed, timeout)
            return bool(done) and not self._closed and self._spawn_error is None

    def _cancel(self, job: CompressionJob) -> None:
        with self._lock:
            job._cancelled = True
            job._cancelled_at = time.monotonic()
            if job in self._waiting:
                self._waiting.remove(job)
            self._lock.notify_all()
        job._finish(None, EngineError("the compression was cancelled"))

    def close(self) -> None:
        """End the workers and fail the jobs not finished; idempotent."""
        with self._lock:
            self._closed = True
            pending = list(self._waiting)
            self._waiting.clear()
            idle, self._idle = self._idle, []
            live = list(self._live)
            self._lock.notify_all()
        for job in pending:
            job._finish(None, EngineError("the background compressor was closed"))
        for _, conn in idle:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for proc in live:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        shutil.rmtree(self._root, ignore_errors=True)

    # -- workers ------------------------------------------------------------------------------------

    def _spawn(self) -> tuple[Any, Connection]:
        """A new worker, once it has prepared the vocabulary."""
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker,
            args=(child, self.vocab, self.options, self._key, self.nice, self.preload_xgrammar),
            daemon=True,
            name="formalgram-compress",
        )
        proc.start()
        child.close()
        with self._lock:
            self._live.add(proc)
        kind, _ = parent.recv()
        if kind != "ready":  # pragma: no cover - the worker only ever says ready first
            raise EngineError("the compression worker did not start")
        return proc, parent

    def _replace_worker(self) -> None:
        """Start a worker in the background; it joins the idle ones when ready."""
        with self._lock:
            if self._closed:
                return
            self._starting += 1

        def make() -> None:
            made: tuple[Any, Connection] | None
            try:
                made = self._spawn()
            except BaseException as exc:  # the jobs waiting for a worker fail with it (see _take)
                made = None
                self._spawn_error = without_frames(exc)
            with self._lock:
                self._starting -= 1
                if made is not None and not self._closed:
                    self._idle.append(made)
                    made = None
                self._lock.notify_all()
            if made is not None:  # closed meanwhile
                self._end(made, kill=True)

        threading.Thread(target=make, daemon=True, name="formalgram-background-start").start()

    def _end(self, worker: tuple[Any, Connection], kill: bool) -> None:
        proc, conn = worker
        if kill:
            proc.kill()
        proc.join(5)
        conn.close()
        with self._lock:
            self._live.discard(proc)

    def _take(self, job: CompressionJob) -> tuple[Any, Connection] | None:
        """An idle worker for ``job`` once it is first in line (None: cancelled or closed).

        Raises
        ------
        EngineError
            If no worker can be started (the reason of the last failed start).
        """
        with self._lock:
            while True:
                if job._cancelled or self._closed:
                    return None
                if self._idle and self._waiting and self._waiting[0] is job:
                    self._waiting.pop(0)
                    return self._idle.pop()
                if not self._idle and self._starting == 0 and not self._live_workers():
                    if job in self._waiting:
                        self._waiting.remove(job)
                    self._lock.notify_all()
                    raise EngineError(f"no compression worker could be started: {self._spawn_error!r}")
                self._lock.wait(1.0)

    def _live_workers(self) -> int:
        """Workers started and not ended (under the lock)."""
        return sum(1 for proc in self._live if proc.is_alive())

    def _run(self, job: CompressionJob) -> None:
        from formalgram_cfgzip.engines.native.matcher import TABLES_SUBDIR

        try:
            worker = self._take(job)
        except EngineError as exc:
            job._finish(None, exc)
            return
        if worker is None:
            job._finish(None, EngineError("the compression was cancelled"))
            return
        with self._lock:
            self._serial += 1
            directory = os.path.join(self._root, f"job{self._serial}")
        conn = worker[1]
        try:
            conn.send((job.text, directory, job.native_tables))
            deadline = None if job.timeout is None else time.monotonic() + job.timeout
            why = ""
            # the answer ends a wait at once: the quarter second only paces the checks
            while not conn.poll(0.25):
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    why = f"the compression ran past its time limit of {job.timeout} s"
                elif job._cancelled_at is not None and now >= job._cancelled_at + self.abandon_after:
                    why = "the compression was cancelled"
                if why:
                    self._end(worker, kill=True)
                    self.restarts += 1
                    self._replace_worker()
                    job._finish(None, EngineError(why))
                    return
            kind, message = conn.recv()
        except (EOFError, OSError) as exc:
            self._end(worker, kill=True)
            self.restarts += 1
            self._replace_worker()
            job._finish(None, EngineError(f"the compression worker died ({exc or type(exc).__name__})"))
            return
        with self._lock:
            if self._closed:
                worker_back = False
            else:
                self._idle.append(worker)
                worker_back = True
            self._lock.notify_all()
        if not worker_back:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        try:
            if kind != "ok":
                job._finish(None, EngineError(f"the compression failed: {message}"))
            elif not job._cancelled:
                loaded = TokenClasses.load(directory, grammar=job.text, vocab=self.vocab, key=self._key)
                tables = (
                    NativeTables.load(os.path.join(directory, TABLES_SUBDIR), loaded, key=self._key)
                    if job.native_tables
                    else None
                )
                # the job's directory goes below: the classes must not name it as their cache
                job._finish(dataclasses.replace(loaded, cache_dir=""), None, tables)
        except BaseException as exc:
            job._finish(None, exc)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

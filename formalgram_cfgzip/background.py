"""Compression in a worker process: classes computed beside a server's threads, under a hard time limit.

The compression pipeline holds the interpreter (mypyc code and the C search kernel release it
rarely), so a compression on a thread of a serving process stalls that process's other threads
(the mask fills of the requests being decoded) for as long as it runs, and a thread cannot be
stopped when it runs too long.  :class:`BackgroundCompressor` runs a
:class:`~formalgram_cfgzip.compress.Compressor` in a worker process of its own instead: the
caller's threads only wait on a pipe (the interpreter free), a compression past its time limit
is stopped by ending the worker (a fresh one is started for the next job), and a crash of the
worker fails that job, not the server.

The classes travel back as the cache format (:meth:`TokenClasses.save
<formalgram_cfgzip.classes.TokenClasses.save>` into a private temporary directory, signed with
a key only this object and its worker know, and :meth:`TokenClasses.load
<formalgram_cfgzip.classes.TokenClasses.load>` with every fingerprint and invariant checked):
a few milliseconds for a 128k-token vocabulary.  Nothing the worker sends is unpickled.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from formalgram_cfgzip.classes import TokenClasses
from formalgram_cfgzip.errors import EngineError
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
    classes : TokenClasses or None
        The result, once done.
    error : BaseException or None
        Why it failed, once done.
    seconds : float or None
        From submission to the result (queueing, the compression and the transfer).
    """

    text: str
    timeout: float | None
    classes: TokenClasses | None = None
    error: BaseException | None = None
    seconds: float | None = None
    submitted: float = field(default_factory=time.perf_counter)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _owner: BackgroundCompressor | None = field(default=None, repr=False)

    def done(self) -> bool:
        """Whether the job has finished (with classes or an error)."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Give the job up: dropped from the queue, or its worker ended if it is running (a
        fresh worker takes the next job).  Nothing happens to a finished job."""
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
        if self.error is not None:
            raise self.error
        assert self.classes is not None
        return self.classes

    def _finish(self, classes: TokenClasses | None, error: BaseException | None) -> None:
        self.classes, self.error = classes, error
        self.seconds = time.perf_counter() - self.submitted
        self._done.set()


def _worker(conn: Connection, vocab: Vocabulary, options: dict[str, Any], key: bytes) -> None:
    """The worker loop: (text, directory) in, ``("ok", "")`` or ``("error", message)`` out."""
    from formalgram_cfgzip.compress import Compressor

    compressor = Compressor(vocab, cache_size=0, **options)
    conn.send(("ready", ""))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        text, directory = job
        try:
            compressor.compress(text).save(directory, key=key)
        except Exception as exc:  # every failure goes back as text
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", ""))


class BackgroundCompressor:
    """A :class:`~formalgram_cfgzip.compress.Compressor` in a worker process, jobs served in order.

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary (sent to the worker once per worker start).
    timeout : float or None
        Default time limit of a job, in seconds (the worker is ended past it).
    spare : bool
        Keep a second worker started and ready, which takes over at once when a worker is
        ended (a time limit, :meth:`CompressionJob.cancel`) or dies.
    **options
        The compressor's options (``specialize``, ``domains``, budgets; see
        :class:`~formalgram_cfgzip.compress.Compressor`).

    Attributes
    ----------
    vocab : Vocabulary
    restarts : int
        Workers started after the first (time limits and crashes).

    Notes
    -----
    A worker prepares the vocabulary when it starts (about a second for 128k tokens, in the
    background: the first job waits for it; with ``spare``, the spare is being prepared from
    the construction on).  One worker serves one job at a time; jobs queue.
    A job's time counts from when the worker takes it.  The caller's threads hold the
    interpreter only to send a job and to load its result.  :meth:`close` (or the end of the
    process) ends the worker.

    Examples
    --------
    >>> bg = BackgroundCompressor(Vocabulary([b"(", b")", b"x"]), timeout=60)
    >>> classes = bg.submit('root ::= "(" root ")" | "x"').result()
    >>> classes.num_classes, bg.restarts
    (3, 0)
    >>> bg.close()
    """

    def __init__(
        self, vocab: Vocabulary, *, timeout: float | None = 60.0, spare: bool = True, **options: Any
    ) -> None:
        self.vocab = vocab
        self.timeout = timeout
        self.options = options
        self.restarts = 0
        self._key = secrets.token_bytes(32)
        self._root = tempfile.mkdtemp(prefix="formalgram-bg-")
        self._ctx = mp.get_context("spawn")
        self._queue: deque[CompressionJob] = deque()
        self._wake = threading.Condition()
        self._closed = False
        self._proc: Any = None
        self._conn: Connection | None = None
        self._serial = 0
        self._running: CompressionJob | None = None
        self._cancelled: CompressionJob | None = None
        # a started worker kept ready: a job that follows a time limit or a cancellation (its
        # worker ended) does not wait for a fresh worker to prepare the vocabulary
        self._spare_wanted = spare
        self._spare: tuple[Any, Connection] | None = None
        self._spare_starting = False
        self._thread = threading.Thread(target=self._serve, daemon=True, name="formalgram-background")
        self._thread.start()
        self._want_spare()

    def submit(self, text: str, *, timeout: float | None = None) -> CompressionJob:
        """Queue the compression of ``text``; returns at once.

        Parameters
        ----------
        text : str
            GBNF / XGrammar EBNF text (start rule ``root``).
        timeout : float or None
            This job's time limit (default: the compressor's).

        Returns
        -------
        CompressionJob

        Raises
        ------
        EngineError
            If the compressor is closed.
        """
        job = CompressionJob(text, self.timeout if timeout is None else timeout, _owner=self)
        with self._wake:
            if self._closed:
                raise EngineError("the background compressor is closed")
            self._queue.append(job)
            self._wake.notify()
        return job

    def _cancel(self, job: CompressionJob) -> None:
        with self._wake:
            if job in self._queue:
                self._queue.remove(job)
                queued = True
            else:
                queued = False
                self._cancelled = job if self._running is job else None
        if queued:
            job._finish(None, EngineError("the compression was cancelled"))
        elif self._cancelled is job:
            proc = self._proc
            if proc is not None:
                proc.kill()  # the serving thread sees the pipe close, and cleans up

    def close(self) -> None:
        """End the worker and fail the queued jobs; idempotent."""
        with self._wake:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._wake.notify()
        for job in pending:
            job._finish(None, EngineError("the background compressor was closed"))
        self._thread.join(timeout=5)
        self._stop_worker(kill=False)
        with self._wake:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare[0].kill()
            spare[0].join(5)
            spare[1].close()
        shutil.rmtree(self._root, ignore_errors=True)

    # -- the serving thread ---------------------------------------------------------------------

    def _spawn(self) -> tuple[Any, Connection]:
        """A new worker, once it has prepared the vocabulary."""
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker,
            args=(child, self.vocab, self.options, self._key),
            daemon=True,
            name="formalgram-compress",
        )
        proc.start()
        child.close()
        kind, _ = parent.recv()
        if kind != "ready":  # pragma: no cover - the worker only ever says ready first
            raise EngineError("the compression worker did not start")
        return proc, parent

    def _want_spare(self) -> None:
        """Start preparing a spare worker in the background, unless one is there or coming."""
        with self._wake:
            if not self._spare_wanted or self._closed or self._spare is not None or self._spare_starting:
                return
            self._spare_starting = True

        def make() -> None:
            try:
                made: tuple[Any, Connection] | None = self._spawn()
            except BaseException:  # the job that needs a worker starts one itself
                made = None
            with self._wake:
                self._spare_starting = False
                if made is not None and not self._closed:
                    self._spare, made = made, None
                self._wake.notify_all()
            if made is not None:  # closed meanwhile
                made[0].kill()
                made[0].join(5)
                made[1].close()

        threading.Thread(target=make, daemon=True, name="formalgram-background-spare").start()

    def _start_worker(self) -> Connection:
        """The worker for the next job: the spare (waiting for it while it is being made), else
        a new one; a new spare is then started."""
        with self._wake:
            while self._spare is None and self._spare_starting:
                self._wake.wait()
            taken, self._spare = self._spare, None
        proc, conn = taken if taken is not None else self._spawn()
        self._proc, self._conn = proc, conn
        self._want_spare()
        return conn

    def _stop_worker(self, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            elif conn is not None:
                conn.send(None)
        except (OSError, ValueError):
            pass
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        if conn is not None:
            conn.close()

    def _serve(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                job = self._queue.popleft()
                self._running = job
            try:
                self._run(job)
            finally:
                with self._wake:
                    self._running = None

    def _run(self, job: CompressionJob) -> None:
        self._serial += 1
        directory = os.path.join(self._root, f"job{self._serial}")
        try:
            conn = self._conn or self._start_worker()
            conn.send((job.text, directory))
            if not conn.poll(job.timeout):
                self._stop_worker(kill=True)
                self.restarts += 1
                job._finish(None, EngineError(f"the compression ran past its time limit of {job.timeout} s"))
                return
            kind, message = conn.recv()
        except (EOFError, OSError) as exc:
            self._stop_worker(kill=True)
            self.restarts += 1
            if self._cancelled is job:
                self._cancelled = None
                job._finish(None, EngineError("the compression was cancelled"))
            else:
                job._finish(None, EngineError(f"the compression worker died ({exc or type(exc).__name__})"))
            return
        except BaseException as exc:  # a failure to start the worker, reported on the job
            job._finish(None, exc)
            return
        try:
            if kind != "ok":
                job._finish(None, EngineError(f"the compression failed: {message}"))
                return
            job._finish(TokenClasses.load(directory, grammar=job.text, vocab=self.vocab, key=self._key), None)
        except BaseException as exc:
            job._finish(None, exc)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

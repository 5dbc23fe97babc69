"""A grammar whose first masks come from whichever engine is ready first: the classes' engine, or
XGrammar over the full vocabulary while the grammar is being compressed.

A request with a new grammar (a JSON Schema per request) must have its first mask as soon as
possible, and every later mask as fast as possible.  :func:`compile_progressive` takes one of
two paths (:func:`compile_json_schema` a third, **direct**: a race whose XGrammar compile,
predicted to end soon, runs in the calling thread):

* **quick**: a grammar that :func:`quick_enough` predicts cheap, with free text that makes
  XGrammar's compile slower (:func:`free_text_contexts`; about half of the MaskBench
  schemas) is compressed at once in the calling thread, within the in-process
  compressor's work budget, and the classes' engine (the native engine by default) serves
  every mask from the first; XGrammar does not compile it;
* **race**: otherwise (or past that budget), XGrammar's compile over the full vocabulary
  (:func:`~formalgram_cfgzip.engines.compile_full`; for a schema, :func:`compile_json_schema`,
  XGrammar's own compile of the grammar its converter made) starts on a thread of its own,
  and after a head start the compression in a
  :class:`~formalgram_cfgzip.background.BackgroundCompressor`'s worker process (for a schema,
  the text is written on that thread, not before XGrammar starts; for the native engine the
  worker builds its tables too, so that this process, beside XGrammar's compile, only loads
  them).  The first fill waits for
  the first engine ready, and a matcher on XGrammar moves to the classes' engine at the
  first call after that engine is ready, between two tokens, by replaying the tokens it
  accepted into a matcher of the new engine.

The quick path runs alone because two compiles in one process compete for its interpreter:
XGrammar's releases it, but takes it back at steps, and then waits for the compression's
long stretches (on MaskBench, XGrammar's compile beside an in-process compression made the
first mask 1.2x later at the median than the quick path alone).

Both engines give the full-vocabulary mask of the same grammar, bit for bit (the classes are
lossless for XGrammar's masks; a schema's text is XGrammar's grammar for it, printed), so the
path and the move never show in the masks; only in their speed.  A compression that fails (beyond its budgets) or runs past
``compress_timeout`` leaves the grammar on XGrammar's masks for good; XGrammar failing to
compile leaves it on the classes' engine.  Only when both fail is the grammar refused, with
both reasons (:class:`~formalgram_cfgzip.errors.EngineError`).

Threads: XGrammar's compile runs on a thread of its own (kept between grammars, as is the
compression's: a new thread's start delays XGrammar's) and releases the interpreter.  A
compression in this process holds it (mypyc code and the C kernels release it rarely), which
is why the race runs the compression in a worker process: nothing here waits for it, and its
time limit is hard.  With no background compressor, the race runs the compression on a thread
of this process (XGrammar's compile then often cannot return before it).
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from formalgram_cfgzip.compress import CollectorPaused
from formalgram_cfgzip.errors import EngineError, without_frames

if TYPE_CHECKING:
    from formalgram_cfgzip.background import BackgroundCompressor, CompressionJob
    from formalgram_cfgzip.classes import TokenClasses
    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.engines import EngineName
    from formalgram_cfgzip.engines.base import CompiledGrammar
    from formalgram_cfgzip.engines.matcher import EngineMatcher
    from formalgram_cfgzip.engines.native.tables import NativeTables
    from formalgram_cfgzip.vocabulary import Vocabulary

__all__ = [
    "DIRECT_CHARS",
    "DIRECT_NEGATED",
    "DIRECT_REPEATS",
    "FIRST_FILL_GRACE",
    "HEAD_START",
    "QUICK_CHARS",
    "QUICK_FREE_TEXT",
    "QUICK_MACRO_WEIGHT",
    "QUICK_REPEATS",
    "ProgressiveGrammar",
    "ProgressiveMatcher",
    "compile_json_schema",
    "compile_progressive",
    "counted_repeats",
    "free_text_contexts",
    "quick_enough",
]


#: :func:`quick_enough`'s default limits.  MaskBench with Llama-3 (2,000 schemas, the compiled
#: build, every engine in one run): of the schemas raced at a limit of 3,000 characters, the
#: 169 whose grammars have 3,000-4,000 characters (with a negated class, repetitions within
#: 64) took 0.75x the race's time at the median when compressed at once (the native engine's
#: own first mask; 17 slower, none past 1.5x); up to 5,000 characters, the 78 more took 0.88x
#: and 29 of them were slower (4 past 1.5x).  (At 3,000 the limit had been set on the source
#: tree's pure-Python build, about 1.3x slower.)
QUICK_CHARS = 4000
QUICK_REPEATS = 64
#: Free-text contexts (:func:`free_text_contexts`) that XGrammar's compile of a schema takes in
#: its stride: each one past these costs it about another whole compile (on the sample above,
#: 147 and 160 ms with 6 and 7 against 13-16 ms with 1), so each allows :data:`QUICK_CHARS`
#: more characters on the quick path
QUICK_FREE_TEXT = 4
#: What a ``Regex`` macro (a string's ``pattern``) counts for against :data:`QUICK_FREE_TEXT`:
#: a pattern's automaton costs XGrammar's compile far less than a negated class does (on 2,000
#: MaskBench schemas without long repetitions, 10-14 ms per 1,000 grammar characters with
#: 1-100 macros and at most one negated class, against 140-220 with 5 or more negated
#: classes); counted whole, 20-36 patterns sent 41,000-character grammars to the quick path
#: that XGrammar compiled in 0.1-0.2 s, and whose quick attempt took 0.3-1 s before its budget
QUICK_MACRO_WEIGHT = 0.25
#: A schema's grammar (:func:`compile_json_schema`) raced with XGrammar's compile in the
#: calling thread: at most :data:`DIRECT_CHARS` characters, :data:`DIRECT_NEGATED` negated
#: classes and :data:`DIRECT_REPEATS` counted repetitions in all (2,000 MaskBench schemas,
#: Llama-3: XGrammar compiled the 1,593 such grammars in at most 0.21 s, and those past the
#: bounds in up to 28 s, which the compression may beat).  Its first mask then comes with no
#: thread to start and none to wake, the compression starting after the compile.
DIRECT_CHARS = 20_000
DIRECT_NEGATED = 1
DIRECT_REPEATS = 128
#: :func:`compile_progressive`'s default head start of XGrammar's compile in a race, in seconds:
#: on the same sample XGrammar compiled the race's grammars in 43 ms at the median, about two
#: to three times slower with the compression running beside it on a 2-core machine
HEAD_START = 0.05
#: In a race that XGrammar's compile won, seconds the compression's work in this process waits
#: for the first mask (or token) from XGrammar's matcher (a server asks for it at once)
FIRST_FILL_GRACE = 0.25
_BOUNDED = re.compile(r"\{\s*\d+\s*(?:,\s*(\d+)\s*)?\}")


def quick_enough(grammar_text: str, max_chars: int = QUICK_CHARS, max_repeats: int = QUICK_REPEATS) -> bool:
    """Whether a compression of ``grammar_text`` is predicted cheap enough to run at once.

    The search's cost grows with the grammar and, above all, with bounded repetitions
    (``x{0,255}``: a string's ``maxLength``), each a chain of that many stack symbols; so a
    grammar text of at most ``max_chars`` characters whose bounded repetitions add up to at
    most ``max_repeats`` is predicted cheap.  Only the time to the first mask depends on the
    prediction, never a mask (a wrong one costs the quick attempt's budget).

    Parameters
    ----------
    grammar_text : str
    max_chars, max_repeats : int

    Returns
    -------
    bool

    Notes
    -----
    One pass over the text.

    Examples
    --------
    >>> quick_enough('root ::= "a" [0-9]{2,4}'), quick_enough('root ::= [a-z]{0,255}')
    (True, False)
    """
    return len(grammar_text) <= max_chars and counted_repeats(grammar_text) <= max_repeats


def counted_repeats(grammar_text: str) -> int:
    """The upper bounds of the counted repetitions in ``grammar_text`` (``x{m,n}``: ``n``;
    ``x{m}``: ``m``; an unbounded ``x{m,}`` makes no chain), added up: the chains of stack
    symbols they make.

    Notes
    -----
    One pass over the text.

    Examples
    --------
    >>> counted_repeats('root ::= [a-z]{0,255} "x"{3} [0-9]{2,}')
    258
    """
    return sum(int(m.group(1) or m.group(0).strip("{} \t")) for m in _BOUNDED.finditer(grammar_text))


_RULE = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-.]*)\s*::=", re.MULTILINE)
# a string literal or a character class, read left to right (each may hold the other's quotes)
_LITERAL_OR_CLASS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")
# a Regex macro's name and its pattern literal
_MACRO = re.compile(r'Regex\(\s*"(?:[^"\\]|\\.)*"')


def free_text_contexts(grammar_text: str, root: str = "root") -> int:
    r"""The distinct negated character classes and ``Regex`` macros in the rules reachable from
    ``root``: the grammar's free-text contexts, such as a JSON string's characters.

    XGrammar's compile checks the tokens that may continue free text one by one, and takes
    most of its time there, about as long for each context: a grammar without free text (a
    JSON Schema of numbers, booleans and enumerations) compiles in a few milliseconds over a
    whole vocabulary, sooner than a compression, so :func:`compile_progressive` races it
    instead of compressing it at once; one with many (the keys an ``additionalProperties``
    must tell from the named ones, one class per letter; several ``pattern``\ s) compiles
    slowly, and is compressed at once even when large.

    Parameters
    ----------
    grammar_text : str
        GBNF / XGrammar EBNF text (one rule per ``name ::=`` line start).
    root : str
        The start rule.

    Returns
    -------
    int
        Distinct by their text; 1 where the text cannot be read this way (no rule ``root``).

    Notes
    -----
    O(len(grammar_text)): one pass of regular expressions per rule, one walk of the rule
    references.

    Examples
    --------
    >>> free_text_contexts('root ::= "[" num "]"\nnum ::= [0-9]+\nstr ::= "\\"" [^"]* "\\""')
    0
    >>> free_text_contexts('root ::= "[" str ("," str)* "]"\nstr ::= "\\"" [^"]* "\\""')
    1
    >>> free_text_contexts('root ::= [^a]* "a" [^b]* Regex("[0-9]+")')
    3
    """
    negated, macros = _free_text(grammar_text, root)
    return negated + macros


def _free_text(grammar_text: str, root: str) -> tuple[int, int]:
    """:func:`free_text_contexts` by kind: (distinct negated classes, distinct ``Regex``
    macros); ``(1, 0)`` without a rule ``root``."""
    heads = list(_RULE.finditer(grammar_text))
    bodies: dict[str, str] = {}
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(grammar_text)
        bodies[head.group(1)] = bodies.get(head.group(1), "") + " " + grammar_text[head.end() : end]
    if root not in bodies:
        return 1, 0
    negated: set[str] = set()
    macros: set[str] = set()
    seen = {root}
    todo = [root]
    while todo:
        body = bodies[todo.pop()]
        macros.update(m.group(0) for m in _MACRO.finditer(body))
        negated.update(m.group(0) for m in _LITERAL_OR_CLASS.finditer(body) if m.group(0).startswith("[^"))
        for ref in _NAME.findall(_LITERAL_OR_CLASS.sub(" ", _MACRO.sub(" ", body))):
            if ref in bodies and ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return len(negated), len(macros)


#: XGrammar's compiles that run at once in one process (a race's compile past them waits)
_MAX_FULL_COMPILES = 64


class _KeptThreads:
    """Threads kept between jobs, so that a job starts with a put on a queue instead of a new
    thread: a thread's start waits for the thread to run, and a race started two of them
    before XGrammar's compile could begin.

    Daemon threads run jobs that the interpreter's exit may cut off (the compression's waits);
    the others run on a :class:`~concurrent.futures.ThreadPoolExecutor`, which the exit waits
    for (XGrammar's compile, in C++, must not be cut off).  A forked child has none of its
    parent's threads: it starts with none kept.
    """

    def __init__(self, name: str, *, daemon: bool) -> None:
        self.name = name
        self.daemon = daemon
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """No thread, no job (made, and remade in a forked child)."""
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a kept thread (a new one when none is idle); ``job`` must not raise."""
        if not self.daemon:
            with self._lock:
                if self._pool is None:
                    # threads are made only when none is idle: the bound is for a flood of
                    # new grammars at once (past it their compiles wait for a thread)
                    self._pool = ThreadPoolExecutor(_MAX_FULL_COMPILES, thread_name_prefix=self.name)
                pool = self._pool
            pool.submit(job)
            return
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
            jobs = self._jobs
        jobs.put(job)
        if start:
            threading.Thread(target=self._serve, args=(jobs,), daemon=True, name=self.name).start()

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            jobs.get()()
            with self._lock:
                self._idle += 1


#: XGrammar's compiles in a race (not daemons: see :class:`_KeptThreads`)
_FULL_COMPILES = _KeptThreads("progressive-full", daemon=False)
#: The compressions' threads (their waits for a head start, for a background compressor)
_COMPRESSIONS = _KeptThreads("progressive-classes", daemon=True)


class ProgressiveGrammar:
    """A grammar served by XGrammar over the full vocabulary until its classes' engine is ready.

    Made by :func:`compile_progressive` or :func:`compile_json_schema`; see the module docstring.

    Attributes
    ----------
    vocab : Vocabulary
        The vocabulary.
    grammar_text : str or None
        The grammar text both engines compile (``None`` until a schema's text is made, on
        the compression's thread).
    logit_width, token_words : int
        Logits, and 32-bit words of a full-vocabulary bitmask row.
    started : float
        ``time.perf_counter()`` when the compiles started.
    full_seconds, compressed_seconds : float or None
        Seconds from ``started`` until each engine was ready (``None``: not yet, or failed).
    full_error, compressed_error : BaseException or None
        Why an engine failed (``None``: it did not, or has not finished).
    handed_over : bool
        Whether the compression went past the in-process compressor's budgets and was handed
        to the background compressor.
    path : {"quick", "direct", "race"}
        ``"quick"``: compressed at once in the calling thread, the classes' engine ready when
        the grammar was returned (XGrammar not compiled); ``"race"``: XGrammar and the
        compression started together; ``"direct"``: XGrammar's compile ran in the calling
        thread (a schema predicted to compile soon, :func:`compile_json_schema`), the
        compression started after it, as in a race.
    """

    def __init__(
        self,
        compressor: Compressor | BackgroundCompressor,
        grammar_text: str | Callable[[], str],
        *,
        engine: EngineName,
        root: str,
        max_threads: int,
        compress_timeout: float | None,
        full: bool,
        background: BackgroundCompressor | None = None,
        quick: bool = False,
        direct: bool = False,
        head_start: float = 0.0,
        full_compile: Callable[[], CompiledGrammar] | None = None,
    ) -> None:
        from formalgram_cfgzip.background import BackgroundCompressor

        self.vocab: Vocabulary = compressor.vocab
        self.grammar_text: str | None = grammar_text if isinstance(grammar_text, str) else None
        self.logit_width = self.vocab.logit_width
        self.token_words = (self.logit_width + 31) // 32
        self.compress_timeout = compress_timeout
        self.full_seconds: float | None = None
        self.compressed_seconds: float | None = None
        self.full_error: BaseException | None = None
        self.compressed_error: BaseException | None = None
        self.handed_over = False
        self._job: CompressionJob | None = None
        self._closed = False
        self._full: CompiledGrammar | None = None
        self._compressed: CompiledGrammar | None = None
        # two conditions on one lock: the fills wait on the first for either engine, the
        # compression's head start on the second for the first fill, so that XGrammar's compile
        # ending wakes only the fill waiting for it (a second thread woken then would take the
        # interpreter from it first: it started waiting first)
        lock = threading.RLock()
        self._changed = threading.Condition(lock)
        self._may_start = threading.Condition(lock)
        self._full_done = not full
        self._compressed_done = False
        # whether a mask was filled (or a token taken) with XGrammar's compile (the
        # compression's own work in this process waits for it, see _compile_compressed)
        self._served = False
        if not full:
            self.full_error = EngineError("the full-vocabulary engine was not asked for (full=False)")
        self.started = time.perf_counter()
        self.path = "race"
        if background is not None and not isinstance(compressor, BackgroundCompressor):
            if (
                quick
                and isinstance(grammar_text, str)
                and self._compress_here(compressor, grammar_text, engine, root)
            ):
                return
            compressor = background  # past the quick attempt, or predicted large: the worker's
        # XGrammar's compile first, so that it runs from the very start
        if full and direct:
            # predicted to compile soon: here, with no thread to start and none to wake
            self.path = "direct"
            self._compile_full(root, max_threads, full_compile)
        elif full:
            _FULL_COMPILES.submit(lambda: self._compile_full(root, max_threads, full_compile))
        _COMPRESSIONS.submit(
            lambda: self._compile_compressed(
                compressor, grammar_text, engine, root, head_start if full else 0.0
            )
        )

    # -- the two compiles -------------------------------------------------------------------

    def _compile_full(
        self, root: str, max_threads: int, full_compile: Callable[[], CompiledGrammar] | None
    ) -> None:
        from formalgram_cfgzip.engines import compile_full

        try:
            if full_compile is not None:
                compiled = full_compile()
            else:
                assert self.grammar_text is not None  # a text given, not made later
                compiled = compile_full(self.vocab, self.grammar_text, root=root, max_threads=max_threads)
        except BaseException as exc:  # reported through full_error, never raised on this thread
            with self._changed:
                self.full_error = without_frames(exc)
                self._full_done = True
                self._changed.notify_all()
                self._may_start.notify_all()
            return
        with self._changed:
            self._full = compiled
            self.full_seconds = time.perf_counter() - self.started
            self._full_done = True
            self._changed.notify_all()

    def _compress_here(self, compressor: Compressor, text: str, engine: EngineName, root: str) -> bool:
        """The quick path: compressed in the calling thread within ``compressor``'s budgets;
        whether the classes' engine is ready (``False``: past the budgets, handed over)."""
        from formalgram.errors import GrammarTooLarge
        from formalgram_cfgzip.engines import compile_grammar

        if root != "root":
            return False
        # the collector paused over the engine's compile too (the compression pauses it
        # itself), as over the schema's conversion (compile_json_schema)
        with CollectorPaused():
            try:
                classes = compressor.compress(text)
            except GrammarTooLarge:
                self.handed_over = True
                return False
            self._compressed = compile_grammar(classes, text, engine=engine, check=False)
        self.compressed_seconds = time.perf_counter() - self.started
        self._compressed_done = True
        self._full_done = True
        self.full_error = EngineError("not compiled: the classes' engine was ready first")
        self.path = "quick"
        return True

    def _compile_compressed(
        self,
        compressor: Compressor | BackgroundCompressor,
        grammar_text: str | Callable[[], str],
        engine: EngineName,
        root: str,
        head_start: float,
    ) -> None:
        from formalgram_cfgzip.background import BackgroundCompressor
        from formalgram_cfgzip.engines import compile_grammar

        try:
            if root != "root":
                raise EngineError(f"compression reads the start rule 'root', not {root!r}")
            if head_start > 0:
                # XGrammar's compile alone first: the two compete for the processor (and for
                # the interpreter), and most grammars compile within the head start
                # ... and its first mask before this thread's work in the interpreter (the
                # text, the submission): a waiting thread takes the interpreter back only at the
                # next switch interval (5 ms), so work here would delay the first fill by as much
                with self._changed:
                    self._may_start.wait_for(self._compression_may_start, timeout=head_start)
                    if self._full is not None:
                        self._may_start.wait_for(self._compression_may_start, timeout=FIRST_FILL_GRACE)
            text = grammar_text if isinstance(grammar_text, str) else grammar_text()
            self.grammar_text = text
            tables: NativeTables | None = None
            if isinstance(compressor, BackgroundCompressor):
                classes, tables = self._in_background(compressor, text, engine == "native")
            else:
                classes = compressor.compress(text)
            # tables=None: built here (the in-process compressor's classes, or an engine other
            # than the native one, which takes no tables)
            compiled = compile_grammar(classes, text, engine=engine, check=False, tables=tables)
        except BaseException as exc:  # reported through compressed_error
            with self._changed:
                self.compressed_error = without_frames(exc)
                self._compressed_done = True
                self._changed.notify_all()
            return
        seconds = time.perf_counter() - self.started
        with self._changed:
            if self.compress_timeout is not None and seconds > self.compress_timeout:
                self.compressed_error = EngineError(
                    f"the compression took {seconds:.1f} s, past compress_timeout={self.compress_timeout} s"
                )
            else:
                self._compressed = compiled
                self.compressed_seconds = seconds
            self._compressed_done = True
            self._changed.notify_all()

    def _compression_may_start(self) -> bool:
        """Whether a race's compression may start before its head start is over: XGrammar's
        first mask was served, XGrammar's compile failed, or the grammar was closed."""
        return self._served or self._closed or (self._full_done and self._full is None)

    def _first_fill_done(self) -> None:
        """A mask was filled (or a token taken) with XGrammar's compile: the compression may
        take the interpreter."""
        with self._changed:
            self._served = True
            self._may_start.notify_all()

    def _in_background(
        self, background: BackgroundCompressor, text: str, native: bool
    ) -> tuple[TokenClasses, NativeTables | None]:
        """The classes from ``background`` and, for the native engine, its tables built there
        too (here, beside XGrammar's compile, their GNF conversion took several times as
        long as alone)."""
        with self._changed:
            if self._closed:
                raise EngineError("the grammar was closed")
            self._job = background.submit(text, timeout=self.compress_timeout, native_tables=native)
        classes = self._job.result()
        return classes, self._job.tables

    def close(self) -> None:
        """Give up a compression still running in a background compressor (its worker is
        ended; the engines ready so far keep serving).  Call it when the grammar is no longer
        needed, so that its compression does not hold the worker for the next one."""
        with self._changed:
            self._closed = True
            job = self._job
            self._may_start.notify_all()
        if job is not None:
            job.cancel()

    # -- state ----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether the classes' engine serves the masks now."""
        return self._compressed is not None

    @property
    def compressed(self) -> CompiledGrammar | None:
        """The classes' engine, once ready."""
        return self._compressed

    @property
    def full(self) -> CompiledGrammar | None:
        """XGrammar over the full vocabulary, once compiled."""
        return self._full

    def wait_full(self, timeout: float | None = None) -> bool:
        """Wait until XGrammar's compile over the full vocabulary has ended; whether it compiled.

        Its thread runs on after the classes' engine is ready (a compile cannot be cut short);
        a benchmark or a test that measures what follows waits for it here.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._full_done, timeout=timeout)
            return self._full is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the classes' engine is ready or has failed; whether it is ready.

        With ``compress_timeout`` set, waiting ends at that time after :attr:`started` too.
        """
        deadline = None if timeout is None else time.perf_counter() + timeout
        if self.compress_timeout is not None:
            cut = self.started + self.compress_timeout
            deadline = cut if deadline is None else min(deadline, cut)
        with self._changed:
            while not self._compressed_done:
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
            return self._compressed is not None

    def current(self) -> CompiledGrammar:
        """The engine to use now: the classes' engine when ready, else XGrammar's, waiting for
        the first of them to be ready.

        Raises
        ------
        EngineError
            If both engines failed (both reasons in the message).
        """
        compressed = self._compressed
        if compressed is not None:
            return compressed
        with self._changed:
            while True:
                if self._compressed is not None:
                    return self._compressed
                if self._full is not None:
                    return self._full
                if self._full_done and self._compressed_done:
                    raise EngineError(
                        "neither engine could compile the grammar: XGrammar over the full vocabulary: "
                        f"{self.full_error}; the classes: {self.compressed_error}"
                    )
                self._changed.wait()

    # -- matchers and bitmasks --------------------------------------------------------------------

    def matcher(self) -> ProgressiveMatcher:
        """A matcher of one sequence (see :class:`ProgressiveMatcher`)."""
        return ProgressiveMatcher(self)

    def allocate_token_bitmask(self, batch: int = 1) -> npt.NDArray[np.int32]:
        """Zeroed full-vocabulary bitmask rows, ``(batch, token_words)`` int32."""
        return np.zeros((batch, self.token_words), dtype=np.int32)


class ProgressiveMatcher:
    """A matcher of a :class:`ProgressiveGrammar`: XGrammar's until the classes' engine is ready.

    Meets :class:`~formalgram_cfgzip.engines.matcher.Matcher`.  The move to the classes'
    engine happens at the first call after it is ready: the tokens accepted so far are replayed
    into a fresh matcher of that engine (O(tokens) once).

    Attributes
    ----------
    grammar : ProgressiveGrammar
    moved_at : int or None
        How many tokens had been accepted when the matcher moved to the classes' engine
        (``None``: it has not).
    """

    def __init__(self, grammar: ProgressiveGrammar) -> None:
        self.grammar = grammar
        self._inner: EngineMatcher | None = None
        self._on_compressed = False
        self._tokens: list[int] = []
        self._stopped = False
        self.moved_at: int | None = None

    def _engine(self) -> EngineMatcher:
        inner = self._inner
        if self._on_compressed and inner is not None:
            return inner
        compiled = self.grammar.current()
        if inner is None or compiled is self.grammar.compressed:
            fresh = compiled.matcher()
            for token in self._tokens:
                if not fresh.accept_token(token):
                    raise EngineError(
                        f"the classes' engine refused token {token}, which XGrammar accepted: the engines "
                        "disagree on this grammar (a bug; please report it with the grammar)"
                    )
            self._inner = inner = fresh
            if compiled is self.grammar.compressed:
                self._on_compressed = True
                self.moved_at = len(self._tokens)
        return inner

    @property
    def on_classes(self) -> bool:
        """Whether the masks now come from the classes' engine."""
        return self._on_compressed

    def _note_served(self) -> None:
        """Tell the grammar, once, that a mask or token was served on XGrammar's compile."""
        if not self._on_compressed and not self.grammar._served:
            self.grammar._first_fill_done()

    def accept_token(self, token_id: int) -> bool:
        """Advance by a real token id; ``False`` (state unchanged) if the grammar forbids it."""
        ok = self._engine().accept_token(token_id)
        if ok:
            self._tokens.append(int(token_id))
        self._note_served()
        return ok

    def fill_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the full-vocabulary mask into row ``index`` of ``bitmask``."""
        self._engine().fill_next_token_bitmask(bitmask, index)
        self._note_served()

    def update_next_token_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Bring row ``index`` of ``bitmask`` to the full-vocabulary mask, writing only what
        changed (see :meth:`EngineMatcher.update_next_token_bitmask
        <formalgram_cfgzip.engines.matcher.EngineMatcher.update_next_token_bitmask>`); the
        first fill on the classes' engine writes the whole row."""
        self._engine().update_next_token_bitmask(bitmask, index)
        self._note_served()

    def fill_next_class_bitmask(self, class_bitmask: Any, index: int = 0) -> None:
        """The classes' engine's own mask; only once the matcher is on it.

        Raises
        ------
        EngineError
            While the matcher is on XGrammar's full-vocabulary masks (no classes yet).
        """
        inner = self._engine()
        if not self._on_compressed:
            raise EngineError(
                "class masks exist once the classes' engine is ready (see ProgressiveGrammar.wait)"
            )
        inner.fill_next_class_bitmask(class_bitmask, index)

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        self._engine().rollback(num_tokens)
        if num_tokens > 0:
            del self._tokens[-num_tokens:]

    def reset(self) -> None:
        """Back to the initial state."""
        self._engine().reset()
        self._tokens.clear()

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted."""
        return self._engine().is_terminated()


def compile_progressive(
    compressor: Compressor | BackgroundCompressor,
    grammar_text: str,
    *,
    engine: EngineName = "native",
    root: str = "root",
    max_threads: int = 1,
    compress_timeout: float | None = 30.0,
    full: bool = True,
    background: BackgroundCompressor | None = None,
    quick_chars: int = QUICK_CHARS,
    quick_repeats: int = QUICK_REPEATS,
    head_start: float = HEAD_START,
) -> ProgressiveGrammar:
    """Start XGrammar over the full vocabulary and the compression of ``grammar_text`` at once.

    Parameters
    ----------
    compressor : Compressor or BackgroundCompressor
        Compresses the grammar (its options and caches apply; ``domains=True`` spares the
        native engine a second search, and ``specialize=False`` is the cheaper choice per
        request).  Shared safely by any number of progressive grammars.  A
        :class:`~formalgram_cfgzip.background.BackgroundCompressor` compresses in a worker
        process: the caller's other threads (the fills of the requests being decoded) never
        wait for the compression, and ``compress_timeout`` stops it for good.  A plain
        :class:`~formalgram_cfgzip.compress.Compressor` compresses on a thread of this
        process, which holds the interpreter while it runs.
    grammar_text : str
        GBNF / XGrammar EBNF text.
    engine : {"native", "xgrammar", "llguidance"}
        The engine over the classes.
    root : str
        The start rule (compression reads ``root``).
    max_threads : int
        XGrammar's compile threads.
    compress_timeout : float or None
        Seconds after which a compression still running is no longer used (the grammar stays
        on XGrammar's masks); ``None`` for no limit.
    full : bool
        Also compile XGrammar over the full vocabulary (``False``: the classes' engine only, a
        first fill then waits for it).
    background : BackgroundCompressor or None
        The recommended setup for a server: with ``compressor`` an in-process
        :class:`~formalgram_cfgzip.compress.Compressor` with a small work budget
        (``max_work``), a grammar that :func:`quick_enough` predicts cheap is compressed at
        once in the calling thread (no XGrammar compile: the first mask is the classes'
        engine's, often sooner than XGrammar's compile); a grammar predicted large, or past
        the budget (a :class:`~formalgram.errors.GrammarTooLarge`), races XGrammar's compile
        in ``background``'s worker process, which never holds this process's interpreter.
        (A compression on a thread of this process would: mypyc code and the C kernels hold
        the interpreter for long stretches, so XGrammar's compile could not return before it.)
    quick_chars, quick_repeats : int
        :func:`quick_enough`'s limits; ``quick_chars`` grows by itself for each free-text
        context past :data:`QUICK_FREE_TEXT` (:func:`free_text_contexts`; a ``Regex`` macro
        counts :data:`QUICK_MACRO_WEIGHT`).
    head_start : float
        In a race, seconds XGrammar's compile runs alone before the compression starts (it
        starts at once when XGrammar's compile ends sooner).  The two compete for the
        processor, and on most grammars XGrammar's compile is over within the head start; on
        the few where it takes seconds, the compression starts this much later.

    Returns
    -------
    ProgressiveGrammar
        At once; the compiles go on in the background.

    Notes
    -----
    Time to the first mask: the lesser of XGrammar's compile and the compression plus the
    classes' engine's compile.  Memory: both engines while both are alive.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> from formalgram_cfgzip.compress import Compressor
    >>> vocab = Vocabulary([b"[", b"]", b"[]", b"x", b"</s>"], special_ids=[4], stop_ids=[4])
    >>> g = compile_progressive(Compressor(vocab, domains=True), 'root ::= "[" "x"* "]"')
    >>> m = g.matcher()
    >>> m.accept_token(0), m.accept_token(3), m.accept_token(2)
    (True, True, False)
    >>> g.wait(), m.accept_token(1), m.on_classes, m.is_terminated()
    (True, True, True, False)
    """
    return ProgressiveGrammar(
        compressor,
        grammar_text,
        engine=engine,
        root=root,
        max_threads=max_threads,
        compress_timeout=compress_timeout,
        full=full,
        background=background,
        quick=_quick_path(compressor, background, grammar_text, quick_chars, quick_repeats, full, root),
        head_start=head_start,
    )


def compile_json_schema(
    schema: str | Mapping[str, Any] | bool,
    compressor: Compressor | BackgroundCompressor,
    *,
    engine: EngineName = "native",
    max_threads: int = 1,
    compress_timeout: float | None = 30.0,
    background: BackgroundCompressor | None = None,
    head_start: float = HEAD_START,
    **options: Any,
) -> ProgressiveGrammar:
    """:func:`compile_progressive` of XGrammar's grammar for a JSON Schema.

    Parameters
    ----------
    schema : str, mapping or bool
        The schema.
    compressor, engine, max_threads, compress_timeout, background, head_start
        As :func:`compile_progressive`.
    **options
        XGrammar's converter options (:func:`formalgram_cfgzip.json_schema.from_json_schema`).

    Returns
    -------
    ProgressiveGrammar

    Notes
    -----
    XGrammar's conversion of the schema (a millisecond or a few) in the calling thread, once:
    its printed grammar decides the path (:func:`quick_enough`); on the quick path it is
    compressed at once as :func:`compile_progressive` does; in a race XGrammar compiles the
    converted grammar itself (as its ``compile_json_schema`` does) from the start, and the
    schema's text (:func:`~formalgram_cfgzip.json_schema.from_json_schema`'s) is written on
    the compression's thread.  A grammar within :data:`DIRECT_CHARS`,
    :data:`DIRECT_NEGATED` and :data:`DIRECT_REPEATS` is raced with XGrammar's compile in
    the calling thread (``path == "direct"``): this function returns once XGrammar's masks
    are ready, in at most a few hundred milliseconds on MaskBench, and the first fill does
    not wait for another thread.  A schema whose text this package cannot write or compress is
    served by XGrammar alone.

    Raises
    ------
    EngineError
        If XGrammar's converter refuses the schema.

    Examples
    --------
    >>> from formalgram_cfgzip import Vocabulary
    >>> from formalgram_cfgzip.compress import Compressor
    >>> vocab = Vocabulary([b"true", b"false", b"t", b"</s>"], special_ids=[3], stop_ids=[3])
    >>> g = compile_json_schema({"type": "boolean"}, Compressor(vocab, domains=True))
    >>> m = g.matcher()
    >>> m.accept_token(0), g.wait(), g.wait_full()
    (True, True, True)
    """
    from formalgram_cfgzip.engines.xgrammar import compile_full_json_schema
    from formalgram_cfgzip.json_schema import xgrammar_core_gbnf, xgrammar_schema_grammar

    with CollectorPaused():  # resumed once the quick path is done, or the race has started
        converted = xgrammar_schema_grammar(schema, **_converter_options(options))
        printed = str(converted)
        vocab = compressor.vocab
        quick = _quick_path(compressor, background, printed, QUICK_CHARS, QUICK_REPEATS, True, "root")
        direct = (
            not quick
            and len(printed) <= DIRECT_CHARS
            and printed.count("[^") <= DIRECT_NEGATED
            and counted_repeats(printed) <= DIRECT_REPEATS
        )
        text: str | Callable[[], str] = (
            xgrammar_core_gbnf(printed) if quick else lambda: xgrammar_core_gbnf(printed)
        )
        return ProgressiveGrammar(
            compressor,
            text,
            engine=engine,
            root="root",
            max_threads=max_threads,
            compress_timeout=compress_timeout,
            full=True,
            background=background,
            quick=quick,
            direct=direct,
            head_start=head_start,
            full_compile=lambda: compile_full_json_schema(
                vocab, schema, max_threads=max_threads, converted=converted
            ),
        )


def _quick_path(
    compressor: Compressor | BackgroundCompressor,
    background: BackgroundCompressor | None,
    grammar_text: str,
    quick_chars: int,
    quick_repeats: int,
    full: bool,
    root: str,
) -> bool:
    """Whether a grammar takes the quick path: an in-process compressor with a background one
    to hand over to, and a compression predicted cheap (:func:`quick_enough`).  With
    XGrammar's compile asked for, also free text, which makes XGrammar's compile the slower
    one: at least one negated class (:func:`free_text_contexts`, a macro counted
    :data:`QUICK_MACRO_WEIGHT` besides them); each context past :data:`QUICK_FREE_TEXT`
    allows ``quick_chars`` more characters.  On 2,000 MaskBench schemas, the 18 quick ones
    whose free text was only patterns took 1.8-2.6x XGrammar's time at the median (XGrammar
    compiled most in 2-15 ms)."""
    from formalgram_cfgzip.background import BackgroundCompressor

    if background is None or isinstance(compressor, BackgroundCompressor):
        return False
    if not full:
        return quick_enough(grammar_text, quick_chars, quick_repeats)
    # every negated class and macro in the text bounds the contexts: a grammar with no negated
    # class, or too long for the bound's scale, is raced without the walk (the walk delays
    # XGrammar's start by up to 1 ms)
    negated_bound = grammar_text.count("[^")
    bound = negated_bound + grammar_text.count("Regex(")
    if negated_bound == 0 or len(grammar_text) > quick_chars * max(1, bound - QUICK_FREE_TEXT + 1):
        return False
    negated, macros = _free_text(grammar_text, root)
    contexts = negated + macros * QUICK_MACRO_WEIGHT
    scale = max(1.0, contexts - QUICK_FREE_TEXT + 1)
    # patterns alone do not slow XGrammar's compile enough: it is raced
    return negated > 0 and quick_enough(grammar_text, int(quick_chars * scale), quick_repeats)


def _converter_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`~formalgram_cfgzip.json_schema.from_json_schema`'s converter options, its
    defaults filled in (``any_whitespace`` and ``strict_mode`` on)."""
    return {"any_whitespace": True, "strict_mode": True, **options}

"""Compress many (grammar, tokenizer) pairs into one cache directory, on any executor.

A serving fleet needs the classes of every grammar it offers for every tokenizer it runs.
:func:`compress_many` takes a list of :class:`Job` (one pair each, read from a manifest by
:func:`read_manifest`), runs :func:`run_job` for each on a :class:`concurrent.futures.Executor`
(local worker processes by default; a Dask cluster through ``distributed.Client(...).get_executor()``;
any other executor with ``submit``), and writes each result to its own sub-directory of the
output directory, named by the fingerprints of the grammar and the vocabulary
(:func:`~formalgram_cfgzip.compress.cache_entry_name`).  A pair that fails is reported
with its error and the others go on; a rerun skips the pairs whose result loads with every
fingerprint checked (:meth:`TokenClasses.load <formalgram_cfgzip.classes.TokenClasses.load>`),
not merely because the directory exists.

**Why Dask for the distributed extra.**
``formalgram[distributed]`` installs Dask's ``distributed``, not Ray: it is pure Python
(about 25 MB installed with ``dask``; Ray brings a large native runtime, built for fewer
platforms), ``Client.get_executor()`` is a :class:`concurrent.futures.Executor`, so
:func:`compress_many` needs no Dask-specific code, and a ``LocalCluster`` starts in a few
seconds inside the process that asks for it, so the tests run a real scheduler with real
worker processes and no outside service.  A job's arguments and result are small (paths,
fingerprints, a status): the classes go to the shared output directory, so the workers need
a file system they all see (or a local one, for a local cluster).

**Manifest format (JSON Lines).**
One JSON object per line; blank lines and lines starting with ``#`` are ignored; relative
paths are relative to the manifest's folder::

    {"grammar": "grammars/sql.gbnf", "tokenizer": "llama3"}
    {"grammar": "grammars/config.lark", "tokenizer": "llama3", "root": "start"}
    {"grammar": "builtin:json", "tokenizer": ["qwen3", "o200k_harmony"], "specialize": false}
    {"json_schema": "schemas/order.json", "tokenizer": "/models/x/tokenizer.json",
     "json_schema_options": {"any_whitespace": false, "indent": 2}}

Keys: exactly one of ``grammar`` (a GBNF / XGrammar EBNF file, a Lark file ending in
``.lark``, or ``builtin:minic`` / ``builtin:json``, read by
:func:`~formalgram_cfgzip.sources.read_grammar_file` as ``formalgram-cfgzip compress`` reads
it) and ``json_schema`` (a JSON Schema file, converted by
:func:`~formalgram_cfgzip.json_schema.from_json_schema` with ``json_schema_options``);
optional ``root`` (the grammar's start rule: ``root`` by default, ``start`` for Lark);
``tokenizer`` (a :meth:`Vocabulary.load <formalgram_cfgzip.vocabulary.Vocabulary.load>`
spec, or a list of them: one pair per tokenizer); optional ``specialize`` (true, false or
null), ``gnf_budget``, ``max_states`` and ``memory_budget_mib`` (null: no limit), as for
:func:`~formalgram_cfgzip.compress.compress`.

**Output directory.**
``DIR/<entry>/`` per pair: the classes (``arrays.npz``, ``meta.json``: what
:meth:`TokenClasses.save <formalgram_cfgzip.classes.TokenClasses.save>` writes, with the
grammar, text and vocabulary fingerprints), ``grammar.gbnf`` (the exact text the classes
belong to, which the engine must compile with the job's ``root``: for a schema, the
converter's output, for a Lark file its GBNF form) and
``job.json``; ``DIR/summary.json`` lists every pair with its status (``done``, ``skipped``,
``failed``), entry, fingerprints, class count, seconds and error.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from formalgram_cfgzip.budgets import DEFAULT_BUDGETS
from formalgram_cfgzip.errors import CacheError, ManifestError

if TYPE_CHECKING:
    from formalgram_cfgzip.sources import GrammarSource

__all__ = [
    "Job",
    "JobResult",
    "ManySummary",
    "compress_many",
    "read_manifest",
    "run_job",
]

_KEYS = {
    "grammar",
    "root",
    "json_schema",
    "tokenizer",
    "json_schema_options",
    "specialize",
    "gnf_budget",
    "max_states",
    "memory_budget_mib",
}
_GRAMMAR_FILE = "grammar.gbnf"
_JOB_FILE = "job.json"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class Job:
    """One (grammar, tokenizer) pair to compress.

    Attributes
    ----------
    tokenizer : str
        A :meth:`Vocabulary.load <formalgram_cfgzip.vocabulary.Vocabulary.load>` spec.
    grammar : str
        A GBNF / XGrammar EBNF file, a ``.lark`` file, or ``builtin:NAME`` (``""`` when
        ``json_schema`` is set).
    json_schema : str
        A JSON Schema file (``""`` when ``grammar`` is set).
    json_schema_options : tuple of (str, object)
        Keyword arguments of :func:`~formalgram_cfgzip.json_schema.from_json_schema`, sorted.
    specialize, gnf_budget, max_states, memory_budget
        As in :func:`~formalgram_cfgzip.compress.compress`.
    root : str
        The grammar's start rule (``""``: ``root``, or ``start`` for a Lark file).
    """

    tokenizer: str
    grammar: str = ""
    json_schema: str = ""
    json_schema_options: tuple[tuple[str, Any], ...] = ()
    specialize: bool | None = None
    gnf_budget: int = DEFAULT_BUDGETS.gnf_budget
    max_states: int = DEFAULT_BUDGETS.max_states
    memory_budget: int | None = DEFAULT_BUDGETS.memory_budget
    root: str = ""

    def __post_init__(self) -> None:
        if bool(self.grammar) == bool(self.json_schema):
            raise ManifestError("a job needs exactly one of 'grammar' and 'json_schema'")
        if not self.tokenizer:
            raise ManifestError("a job needs a 'tokenizer'")
        if self.root and self.json_schema:
            raise ManifestError("'root' does not apply to a JSON schema (XGrammar's grammar starts at root)")

    def describe(self) -> str:
        """``grammar-or-schema x tokenizer``, for reports.

        Returns
        -------
        str

        Examples
        --------
        >>> Job("llama3", grammar="builtin:json").describe()
        'builtin:json x llama3'
        """
        source = self.grammar or f"schema {self.json_schema}"
        return f"{source} x {self.tokenizer}"


@dataclass(frozen=True)
class JobResult:
    """What became of one job.

    Attributes
    ----------
    job : Job
        The job.
    status : str
        ``"done"`` (computed now), ``"skipped"`` (a valid result was already there) or
        ``"failed"``.
    directory : str
        The result's directory (``""`` when the job failed before it was known).
    grammar_sha256, vocab_sha256 : str
        The fingerprints (``""`` when not reached).
    num_classes : int
        Classes of the result (0 when failed).
    seconds : float
        Wall time of the job in its worker.
    error : str
        ``"ExceptionType: message"`` for a failed job, else ``""``.
    """

    job: Job
    status: str
    directory: str = ""
    grammar_sha256: str = ""
    vocab_sha256: str = ""
    num_classes: int = 0
    seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class ManySummary:
    """The results of :func:`compress_many`, in job order.

    Attributes
    ----------
    results : tuple of JobResult
    """

    results: tuple[JobResult, ...] = field(default_factory=tuple)

    def count(self, status: str) -> int:
        """Number of results with ``status``; O(jobs).

        Examples
        --------
        >>> ManySummary((JobResult(Job("x", grammar="g"), "failed"),)).count("failed")
        1
        """
        return sum(r.status == status for r in self.results)

    def line(self) -> str:
        """``done N, skipped N, failed N``; O(jobs).

        Examples
        --------
        >>> ManySummary().line()
        'done 0, skipped 0, failed 0'
        """
        return ", ".join(f"{s} {self.count(s)}" for s in ("done", "skipped", "failed"))


def read_manifest(path: str | os.PathLike[str]) -> list[Job]:
    """The jobs of a JSON Lines manifest (format in the module docstring).

    Parameters
    ----------
    path : path
        The manifest file.

    Returns
    -------
    list of Job
        One per (line, tokenizer), paths made absolute, duplicates dropped.

    Raises
    ------
    ManifestError
        If the file cannot be read, or a line is not a JSON object of the documented keys
        and types (the message names the line).

    Notes
    -----
    O(size of the file).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "m.jsonl").write_text('# two pairs\\n{"grammar": "builtin:json", "tokenizer": ["a", "b"]}\\n')
    >>> [j.describe() for j in read_manifest(d / "m.jsonl")]
    ['builtin:json x a', 'builtin:json x b']
    """
    where = Path(path)
    try:
        lines = where.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"cannot read manifest {str(where)!r}: {exc}") from exc
    base = where.resolve().parent
    jobs: list[Job] = []
    seen: set[Job] = set()
    for number, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        try:
            for job in _jobs_of(json.loads(text), base):
                if job not in seen:
                    seen.add(job)
                    jobs.append(job)
        except (ValueError, TypeError) as exc:  # json errors and ManifestError are ValueErrors
            raise ManifestError(f"{where}, line {number}: {exc}") from exc
    return jobs


def _jobs_of(entry: object, base: Path) -> list[Job]:
    """The jobs of one manifest line."""
    if not isinstance(entry, dict):
        raise ManifestError("expected a JSON object")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ManifestError(f"unknown keys {', '.join(sorted(unknown))}; known: {', '.join(sorted(_KEYS))}")

    def path_of(key: str) -> str:
        value = entry.get(key, "")
        if not isinstance(value, str):
            raise ManifestError(f"'{key}' must be a string")
        if not value or value.startswith("builtin:"):
            return value
        return str((base / value).resolve())

    def integer(key: str, default: int | None) -> int | None:
        value = entry.get(key, default)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ManifestError(f"'{key}' must be a positive integer")
        return value

    tokenizers = entry.get("tokenizer")
    if isinstance(tokenizers, str):
        tokenizers = [tokenizers]
    if not isinstance(tokenizers, list) or not tokenizers or not all(isinstance(t, str) for t in tokenizers):
        raise ManifestError("'tokenizer' must be a spec or a non-empty list of specs")
    options = entry.get("json_schema_options", {})
    if not isinstance(options, dict):
        raise ManifestError("'json_schema_options' must be an object")
    specialize = entry.get("specialize")
    if specialize is not None and not isinstance(specialize, bool):
        raise ManifestError("'specialize' must be true, false or null")
    memory = integer("memory_budget_mib", DEFAULT_BUDGETS.memory_budget_mib)
    root = entry.get("root", "")
    if not isinstance(root, str):
        raise ManifestError("'root' must be a rule name")
    out = []
    for spec in tokenizers:
        local = base / spec
        out.append(
            Job(
                tokenizer=str(local.resolve()) if local.exists() else spec,
                grammar=path_of("grammar"),
                json_schema=path_of("json_schema"),
                json_schema_options=tuple(
                    sorted((str(k), tuple(v) if isinstance(v, list) else v) for k, v in options.items())
                ),
                specialize=specialize,
                gnf_budget=integer("gnf_budget", DEFAULT_BUDGETS.gnf_budget) or DEFAULT_BUDGETS.gnf_budget,
                max_states=integer("max_states", DEFAULT_BUDGETS.max_states) or DEFAULT_BUDGETS.max_states,
                memory_budget=None if memory is None else memory << 20,
                root=root,
            )
        )
    return out


# -- one job, in a worker -------------------------------------------------------------------

# tokenizer spec -> PreparedVocabulary, most recent last: the state a worker process keeps from
# one job to the next (an executor's workers have no other place for it: any executor, Dask's
# included, runs run_job with no initializer of ours).
_WORKER_VOCABULARIES: dict[str, Any] = {}
_KEEP_VOCABULARIES = 2


def _compressor(job: Job) -> Any:
    """A compressor with the job's options over this process's preparation of its tokenizer."""
    from formalgram_cfgzip.compress import Compressor, PreparedVocabulary
    from formalgram_cfgzip.vocabulary import Vocabulary

    kept = _WORKER_VOCABULARIES
    prepared = kept.pop(job.tokenizer, None)
    if prepared is None:
        prepared = PreparedVocabulary(Vocabulary.load(job.tokenizer))
    kept[job.tokenizer] = prepared  # most recent last
    while len(kept) > _KEEP_VOCABULARIES:
        del kept[next(iter(kept))]
    return Compressor(
        prepared,
        cache_size=0,
        gnf_budget=job.gnf_budget,
        max_states=job.max_states,
        memory_budget=job.memory_budget,
        specialize=job.specialize,
    )


def _grammar_source(job: Job) -> GrammarSource:
    """The grammar text of a job and its root (a schema goes through the engine's converter)."""
    from formalgram_cfgzip.sources import read_grammar_file, schema_grammar

    if job.grammar:
        return read_grammar_file(job.grammar, job.root or None)
    return schema_grammar(job.json_schema, dict(job.json_schema_options))


def run_job(job: Job, out_dir: str) -> JobResult:
    """Compress one pair into ``out_dir`` unless a valid result is there; never raises.

    Parameters
    ----------
    job : Job
        The pair.
    out_dir : str
        The output directory.

    Returns
    -------
    JobResult
        ``skipped`` when the entry's classes load with the grammar, text and vocabulary
        fingerprints checked; ``done`` when they were computed and saved; ``failed`` with
        the error otherwise (an entry that fails to load is computed again and replaced).

    Notes
    -----
    The worker keeps the compressors of its last two tokenizers, so jobs that share a
    tokenizer load and prepare it once per worker.
    """
    t0 = time.perf_counter()
    directory = grammar_sha = vocab_sha = ""
    try:
        from formalgram_cfgzip.cache import grammar_fingerprint
        from formalgram_cfgzip.classes import TokenClasses
        from formalgram_cfgzip.compress import cache_entry_name
        from formalgram_cfgzip.grammar_text import read_grammar

        source = _grammar_source(job)
        text = source.text
        grammar = read_grammar(text, source.root)
        grammar_sha = grammar_fingerprint(grammar)
        compressor = _compressor(job)
        vocab = compressor.vocab
        vocab_sha = vocab.fingerprint()
        entry = Path(out_dir) / cache_entry_name(grammar_sha, vocab_sha, job.specialize)
        directory = str(entry)
        if (entry / "meta.json").is_file():
            try:
                old = TokenClasses.load(entry, grammar=text, vocab=vocab, root=source.root)
                return JobResult(
                    job,
                    "skipped",
                    directory,
                    grammar_sha,
                    vocab_sha,
                    old.num_classes,
                    time.perf_counter() - t0,
                )
            except CacheError:
                pass  # unusable: computed again below and replaced
        classes = compressor.compress(text, root=source.root)
        entry.mkdir(parents=True, exist_ok=True)
        (entry / _GRAMMAR_FILE).write_text(text, encoding="utf-8")
        (entry / _JOB_FILE).write_text(json.dumps(_job_record(job), indent=2) + "\n", encoding="utf-8")
        classes.save(entry)
        return JobResult(
            job, "done", directory, grammar_sha, vocab_sha, classes.num_classes, time.perf_counter() - t0
        )
    except Exception as exc:  # a failed pair is reported, never fatal to the others
        return JobResult(
            job,
            "failed",
            directory,
            grammar_sha,
            vocab_sha,
            0,
            time.perf_counter() - t0,
            _error_text(exc),
        )


def _error_text(exc: BaseException) -> str:
    """``Type: message`` (with the innermost frame for errors not raised on purpose)."""
    text = f"{type(exc).__name__}: {str(exc).strip()[:1000]}"
    from formalgram.errors import FormalgramError

    if not isinstance(exc, FormalgramError):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            text += f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text


def _job_record(job: Job) -> dict[str, Any]:
    """A job as JSON-ready data."""
    record = asdict(job)
    record["json_schema_options"] = dict(job.json_schema_options)
    return record


# -- many jobs --------------------------------------------------------------------------------


def compress_many(
    jobs: Iterable[Job],
    out_dir: str | os.PathLike[str],
    *,
    executor: Executor | None = None,
    workers: int | None = None,
    on_result: Callable[[JobResult], None] | None = None,
) -> ManySummary:
    """Run every job on ``executor`` and write ``summary.json``; a failed job does not stop the others.

    Parameters
    ----------
    jobs : iterable of Job
        The pairs (:func:`read_manifest`).
    out_dir : path
        The output directory (created if needed).
    executor : concurrent.futures.Executor or None
        Where the jobs run: any executor (for Dask,
        ``distributed.Client(address).get_executor()``).  ``None``: a
        :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` processes, shut down
        at the end (a given executor is left running).
    workers : int or None
        Processes of the default executor (``None``: the number of CPUs, at most the
        number of jobs).
    on_result : callable or None
        Called with each result as it arrives (in completion order), e.g. to print progress.

    Returns
    -------
    ManySummary
        The results in job order.

    Raises
    ------
    CacheError
        If ``out_dir`` cannot be created or ``summary.json`` cannot be written.

    Notes
    -----
    Each job costs what :func:`~formalgram_cfgzip.compress.compress` costs for its pair
    (or one cache load when skipped); a worker prepares each tokenizer once for the jobs
    it runs.  A job whose worker dies (or whose result cannot be sent back) is reported as
    failed with the executor's error.

    Examples
    --------
    >>> import base64, tempfile
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> tmp = Path(tempfile.mkdtemp())
    >>> bytes_only = tmp / "bytes.tiktoken"  # a vocabulary of the 256 single bytes
    >>> _ = bytes_only.write_text("".join(f"{base64.b64encode(bytes([b])).decode()} {b}\\n" for b in range(256)))
    >>> jobs = [Job(str(bytes_only), grammar="builtin:json")]
    >>> with ThreadPoolExecutor(1) as pool:
    ...     first = compress_many(jobs, tmp / "cache", executor=pool)
    ...     again = compress_many(jobs, tmp / "cache", executor=pool)
    >>> first.line(), again.line()
    ('done 1, skipped 0, failed 0', 'done 0, skipped 1, failed 0')
    """
    todo = list(jobs)
    target = Path(out_dir)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(f"cannot create output directory {str(target)!r}: {exc}") from exc
    own = executor is None
    pool: Executor = (
        ProcessPoolExecutor(max_workers=max(1, min(workers or os.cpu_count() or 1, len(todo) or 1)))
        if executor is None
        else executor
    )
    results: list[JobResult | None] = [None] * len(todo)
    try:
        futures: dict[Future[JobResult], int] = {}
        for i, job in enumerate(todo):
            try:
                futures[pool.submit(run_job, job, str(target))] = i
            except Exception as exc:  # a refused submission fails this job only
                results[i] = JobResult(job, "failed", error=f"not submitted: {_error_text(exc)}")
                if on_result is not None:
                    on_result(results[i])  # type: ignore[arg-type]
        for future in as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # the worker died, or the result could not come back
                result = JobResult(todo[i], "failed", error=f"executor: {_error_text(exc)}")
            results[i] = result
            if on_result is not None:
                on_result(result)
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
    summary = ManySummary(tuple(r for r in results if r is not None))
    _write_summary(target, summary)
    return summary


def _write_summary(target: Path, summary: ManySummary) -> None:
    """``summary.json``: counts and one record per result."""
    record = {
        "done": summary.count("done"),
        "skipped": summary.count("skipped"),
        "failed": summary.count("failed"),
        "results": [
            {**asdict(r), "job": _job_record(r.job), "entry": Path(r.directory).name if r.directory else ""}
            for r in summary.results
        ],
    }
    try:
        (target / SUMMARY_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CacheError(f"cannot write {str(target / SUMMARY_FILE)!r}: {exc}") from exc

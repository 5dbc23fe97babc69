"""The native mask engine against the Earley recognizer on long seeded walks, full vocabulary.

For each grammar: the classes for the vocabulary (``Compressor`` with ``--cache-dir``, so a
rerun loads them; the native tables are kept beside them), the native engine through
``engines.compile_grammar(..., engine="native")`` (the C kernel by default), and seeded walks
of ``--steps`` steps in all.  The oracle is ``formalgram.EarleyRecognizer`` (Earley sets over
the grammar as written: no GNF, no displacement, no classes), one recognizer per walk for the
text taken so far ``w``; a token ``t`` is allowed by Earley iff ``w·t`` is a viable prefix.

At every step, with ``A`` the native token mask over the whole logit width:

1. **first bytes, every token**: ``A`` holds no token whose first byte Earley refuses after
   ``w`` (``EarleyRecognizer.allowed_bytes``), no special token, no padding id;
2. **single bytes, every one**: a one-byte text token is in ``A`` iff Earley allows its byte;
3. **stop tokens**: each is in ``A`` iff ``w`` is complete (``is_accepting``);
4. **samples** (fresh each step): ``--allowed`` tokens of ``A`` (Earley must accept each),
   ``--near`` refused text tokens whose first byte Earley allows (Earley must refuse each:
   the refusals decided past the first byte) and ``--refused`` refused text tokens of any kind
   (Earley must refuse each); one refused token is also offered to ``accept_token``, which
   must refuse it;
5. **class representatives**: every ``--reps-every`` steps, the representative of every text
   class: in ``A`` iff Earley accepts it;
6. **the token taken** (drawn from ``A``, long tokens favoured, whitespace runs not; or the
   next token of a member of L(g) that the walk follows, see ``--sentences``): Earley must
   accept it and ``accept_token`` must too.

Earley verdicts for a step's sampled tokens come from one recognizer per byte of a walk
over the tokens in byte order (a shared prefix is read once).  A walk starts again (matcher
reset, fresh recognizer) when a stop token is taken (with probability ``--stop-chance`` when
one is allowed, always when nothing else is), when nothing is allowed, or after
``--max-depth`` tokens (Earley's cost grows with the text read).  With ``--sentences P`` a
walk follows, with probability ``P``, a random member of L(g) (``formalgram.sample``, greedy
longest-match tokens) to its end and takes a stop token there: random walks seldom complete
a text (a JSON object with required properties, say), so this is what checks the stop
tokens at complete texts.  ``--max-seconds`` ends a
grammar's walks early; the report then says how many steps were checked.  Any mismatch is printed; the
exit status is 1 if there was one.

Run from the repository root::

    python -m bench.native_earley_check --grammars llama_cpp/c.gbnf --steps 10000 \\
        --cache-dir /tmp/native-earley-cache --output native_earley.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from formalgram import EarleyRecognizer, Grammar, parse_gbnf, sample
from formalgram_cfgzip import TokenClasses, Vocabulary, engines
from formalgram_cfgzip.compress import Compressor
from formalgram_cfgzip.demo import greedy_tokenize
from formalgram_cfgzip.engines.matcher import Matcher

__all__ = ["CheckResult", "VocabView", "check_walks", "earley_viable", "main"]

SHARED_GRAMMARS = Path(__file__).resolve().parents[2] / "shared" / "grammars"
DEFAULT_GRAMMARS = [
    "llama_cpp/c.gbnf",
    "derived/lark_via_xgrammar/go_syncode.gbnf",
    "derived/lark_via_xgrammar/sql_syncode.gbnf",
    "derived/lark_via_xgrammar/xml2rfc_v3.gbnf",
    "derived/json_mode_eval_xgrammar/JME_0.gbnf",
    "derived/json_mode_eval_xgrammar/JME_32.gbnf",
]
MAX_EXAMPLES = 20  # mismatches printed per grammar


def earley_viable(rec: EarleyRecognizer, tokens: Sequence[tuple[bytes, int]]) -> set[int]:
    """Ids of the tokens ``t`` with ``w·t`` a viable prefix, ``w`` the text ``rec`` has read.

    Parameters
    ----------
    rec : EarleyRecognizer
        The recognizer after ``w`` (left unchanged).
    tokens : sequence of (bytes, int)
        Non-empty token bytes and ids, sorted by bytes.

    Returns
    -------
    set of int

    Notes
    -----
    One recognizer per byte of the current token is kept, and the prefix shared with the
    previous token is not read again: the bytes read are those of the trie of ``tokens``
    (at most their total length), each an Earley step on a copy (O(position) to copy).

    Examples
    --------
    >>> r = EarleyRecognizer(parse_gbnf('root ::= "ab" | "ac"'))
    >>> sorted(earley_viable(r, [(b"a", 0), (b"ab", 1), (b"abc", 2), (b"b", 3)]))
    [0, 1]
    """
    out: set[int] = set()
    stack: list[EarleyRecognizer | None] = [rec]
    prev = b""
    for data, tok in tokens:
        common = 0
        limit = min(len(prev), len(data))
        while common < limit and prev[common] == data[common]:
            common += 1
        del stack[common + 1 :]
        for byte in data[common:]:
            top = stack[-1]
            nxt = None
            if top is not None:
                nxt = top.copy()
                if not nxt.feed(byte):
                    nxt = None
            stack.append(nxt)
        if stack[-1] is not None:
            out.add(tok)
        prev = data
    return out


class VocabView:
    """Per-vocabulary arrays the check needs (computed once).

    Parameters
    ----------
    vocab : Vocabulary
        The vocabulary.
    representatives : sequence of int
        Class representatives to check every ``reps_every`` steps (text tokens only are kept).
    """

    def __init__(self, vocab: Vocabulary, representatives: Sequence[int] = ()) -> None:
        width = vocab.logit_width
        stops = vocab.stop_ids
        self.vocab = vocab
        self.width = width
        self.stop_ids = np.array(sorted(stops), dtype=np.int64)
        self.is_text = np.zeros(width, dtype=np.bool_)  # matchable text, stop tokens excluded
        self.first = np.full(width, -1, dtype=np.int16)  # first byte of a text token
        self.weights = np.zeros(width, dtype=np.float64)
        self.single = np.full(256, -1, dtype=np.int64)  # the one-byte text token of each byte
        for i, t in enumerate(vocab.tokens):
            if not t or i in vocab.special_ids or i in stops:
                continue
            self.is_text[i] = True
            self.first[i] = t[0]
            # long tokens move the walk on; whitespace runs stay at 1 (many in a row make the
            # Earley predictor slow on grammars that skip whitespace after every lexeme)
            self.weights[i] = 1.0 if t.isspace() else float(len(t)) ** 2
            if len(t) == 1:
                self.single[t[0]] = i
        self.never = ~self.is_text  # special tokens, holes, padding (stop tokens handled apart)
        self.never[self.stop_ids] = False
        self.reps = np.array(
            [r for r in representatives if 0 <= r < width and self.is_text[r]], dtype=np.int64
        )

    def data(self, tok: int) -> bytes:
        """The bytes of text token ``tok``."""
        t = self.vocab.tokens[tok]
        assert t is not None
        return t


@dataclass
class CheckResult:
    """What :func:`check_walks` checked and found."""

    steps: int = 0
    walks: int = 0
    tokens_taken: int = 0
    stops_taken: int = 0
    longest_walk_bytes: int = 0
    earley_checks: int = 0  # tokens given an Earley verdict (samples, representatives, taken)
    vector_checks: int = 0  # token bits checked against allowed_bytes / is_accepting
    rep_steps: int = 0
    complete_steps: int = 0  # steps where Earley says the text is complete
    sentence_walks: int = 0  # walks along a member of L(g)
    stopped_early: bool = False  # the time limit ended the walks before ``steps``
    mismatches: int = 0
    examples: list[str] = field(default_factory=list)

    def fail(self, where: str, what: str) -> None:
        """Record one mismatch."""
        self.mismatches += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(f"{where}: {what}")


def _bits(row: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.bool_]:
    return np.unpackbits(row.view(np.uint8), bitorder="little")[:width].astype(np.bool_)


def _sample(nprng: np.random.Generator, ids: npt.NDArray[np.int64], k: int) -> list[int]:
    if k <= 0 or ids.size == 0:
        return []
    if ids.size <= k:
        return [int(i) for i in ids]
    return [int(i) for i in nprng.choice(ids, size=k, replace=False)]


def check_walks(
    g: Grammar,
    new_matcher: Callable[[], Matcher],
    view: VocabView,
    *,
    steps: int,
    seed: int,
    allowed: int = 32,
    near: int = 32,
    refused: int = 8,
    reps_every: int = 0,
    stop_chance: float = 0.1,
    max_depth: int = 48,
    max_seconds: float | None = None,
    sentences: float = 0.0,
    sentence_len: int = 200,
    progress: Callable[[CheckResult], None] | None = None,
) -> CheckResult:
    """Walk ``steps`` steps in all, checking the matcher's token masks against Earley (module docstring).

    Parameters
    ----------
    g : Grammar
        The grammar (the oracle's side).
    new_matcher : callable
        A fresh matcher of the engine under test (one per run; ``reset`` between walks).
    view : VocabView
        The vocabulary's arrays.
    steps, seed : int
        Steps in all (over every walk) and the seed of every random choice.
    allowed, near, refused : int
        Per-step sample sizes: tokens of the mask, refused tokens whose first byte Earley
        allows, refused tokens of any kind.
    reps_every : int
        Check every class representative every this many steps (0: never).
    stop_chance : float
        Chance of taking a stop token when one is allowed.
    max_depth : int
        Tokens a walk takes before it starts again.
    max_seconds : float or None
        Stop after this many seconds (``CheckResult.stopped_early``; fewer steps checked).
    sentences : float
        Chance that a walk follows a member of L(g) (``formalgram.sample``, at most
        ``sentence_len`` bytes, tokenized by greedy longest match) instead of random tokens,
        then takes a stop token: it reaches complete texts that random walks rarely do.
    sentence_len : int
        Longest member drawn.
    progress : callable or None
        Called with the result so far every 500 steps.

    Returns
    -------
    CheckResult

    Notes
    -----
    Per step: one mask fill, O(width) numpy work, and Earley steps for the bytes of the
    trie of the sampled tokens (plus the representatives on their steps).
    """
    res = CheckResult()
    nprng = np.random.default_rng(seed)
    width = view.width
    m = new_matcher()
    start = EarleyRecognizer(g, budget=None)
    rec = start.copy()
    walk_bytes = 0
    depth = 0
    res.walks = 0
    bm = np.zeros((1, (width + 31) // 32), dtype=np.int32)
    plan: list[int] | None = None  # the tokens left of the member followed (reversed)

    def restart() -> None:
        nonlocal rec, walk_bytes, depth, plan
        m.reset()
        rec = start.copy()
        walk_bytes = 0
        depth = 0
        res.walks += 1
        plan = None
        if sentences > 0 and nprng.random() < sentences:
            text = sample(g, 1, seed=int(nprng.integers(2**31)), max_len=sentence_len)[0]
            plan = greedy_tokenize(view.vocab, text)[::-1]
            res.sentence_walks += 1

    restart()

    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    for step in range(steps):
        if deadline is not None and time.perf_counter() > deadline:
            res.stopped_early = True
            break
        where = f"step {step} (walk {res.walks}, after {walk_bytes} bytes)"
        m.fill_next_token_bitmask(bm)
        mask = _bits(bm[0], width)
        ok_first = np.zeros(257, dtype=np.bool_)  # index 256: first byte -1 (not text)
        eb = bytes(rec.allowed_bytes())
        ok_first[list(eb)] = True
        accepting = rec.is_accepting()
        res.complete_steps += accepting
        # 1. every token: first byte, special tokens, padding
        bad = np.flatnonzero(mask & (view.never | (view.is_text & ~ok_first[view.first])))
        if bad.size:
            res.fail(where, f"native allows tokens Earley refuses at the first byte: {bad[:10].tolist()}")
        # 2. single bytes
        singles = view.single[view.single >= 0]
        want_single = ok_first[np.flatnonzero(view.single >= 0)]
        diff = singles[mask[singles] != want_single]
        if diff.size:
            res.fail(where, f"one-byte tokens differ from Earley's allowed bytes: {diff[:10].tolist()}")
        # 3. stop tokens
        if view.stop_ids.size and bool((mask[view.stop_ids] != accepting).any()):
            res.fail(where, f"stop tokens {mask[view.stop_ids].tolist()} but Earley complete={accepting}")
        res.vector_checks += width
        # 4. and 5. samples and representatives
        text_allowed = np.flatnonzero(mask & view.is_text)
        refused_text = view.is_text & ~mask
        refused_ids = np.flatnonzero(refused_text)
        near_ids = np.flatnonzero(refused_text & ok_first[view.first])
        pos = set(_sample(nprng, text_allowed, allowed))
        neg = set(_sample(nprng, near_ids, near)) | set(_sample(nprng, refused_ids, refused))
        if reps_every and step % reps_every == 0:
            reps = set(view.reps.tolist())
            res.rep_steps += 1
        else:
            reps = set()
        # 6. the token taken
        stop_ok = bool(view.stop_ids.size) and bool(mask[view.stop_ids].any())
        tok = -1
        if plan is not None:  # the next token of the member, or its end
            take_stop = not plan
            if plan:
                tok = plan.pop()
                pos.add(tok)
            elif not stop_ok:
                res.fail(where, "a member of L(g) was read, but the stop tokens are refused")
        else:
            take_stop = stop_ok and (text_allowed.size == 0 or nprng.random() < stop_chance)
        if plan is None and not take_stop and text_allowed.size:
            w = view.weights[text_allowed]
            tok = int(nprng.choice(text_allowed, p=w / w.sum()))
            pos.add(tok)
        asked = sorted((view.data(t), t) for t in pos | neg | reps)
        yes = earley_viable(rec, asked)
        res.earley_checks += len(asked)
        for t in sorted(pos | neg | reps):
            if bool(mask[t]) != (t in yes):
                res.fail(
                    where,
                    f"token {t} {view.data(t)!r}: native {'allows' if mask[t] else 'refuses'}, "
                    f"Earley {'accepts' if t in yes else 'refuses'} it",
                )
        if neg:
            probe = min(neg)
            if m.accept_token(probe):
                res.fail(where, f"accept_token took token {probe} outside the mask")
                m.rollback(1)
        res.steps += 1
        if progress is not None and res.steps % 500 == 0:
            progress(res)
        if take_stop:
            if stop_ok:
                stop = int(view.stop_ids[np.flatnonzero(mask[view.stop_ids])[0]])
                if not m.accept_token(stop) or not m.is_terminated():
                    res.fail(where, f"stop token {stop} allowed but not accepted")
                res.stops_taken += 1
            restart()
            continue
        if tok < 0 or (plan is None and depth >= max_depth):
            restart()  # a dead end (nothing allowed), or long enough
            continue
        data = view.data(tok)
        if not m.accept_token(tok):
            res.fail(where, f"token {tok} {data!r} in the mask but accept_token refuses it")
            restart()
            continue
        if not rec.feed_bytes(data):
            res.fail(where, f"token {tok} {data!r} taken, Earley refuses it")
            restart()
            continue
        depth += 1
        walk_bytes += len(data)
        res.tokens_taken += 1
        res.longest_walk_bytes = max(res.longest_walk_bytes, walk_bytes)
    return res


def _grammar_path(rel: str, root: Path) -> Path:
    for base in (root, Path(__file__).resolve().parents[1] / "tests" / "data" / "grammars"):
        if (base / rel).is_file():
            return base / rel
    raise SystemExit(f"grammar {rel} not found under {root} nor tests/data/grammars")


def run_one(rel: str, args: argparse.Namespace, compressor: Compressor, out: list[str]) -> CheckResult:
    """Compress (or load), compile, check; append the report lines to ``out`` and print them."""

    def say(line: str) -> None:
        print(line, flush=True)
        out.append(line)

    text = _grammar_path(rel, Path(args.grammar_root)).read_text(encoding="utf-8")
    t0 = time.perf_counter()
    classes: TokenClasses = compressor.compress(text)
    t1 = time.perf_counter()
    compiled = engines.compile_grammar(classes, text, engine="native", kernel=args.kernel)
    t2 = time.perf_counter()
    g = parse_gbnf(text)
    view = VocabView(compressor.prepared.vocab, classes.representatives.tolist())

    def progress(r: CheckResult) -> None:
        print(
            f"  {rel}: {r.steps} steps, {r.walks} walks, {r.earley_checks} Earley verdicts, "
            f"{r.mismatches} mismatches, {time.perf_counter() - t2:.0f} s",
            flush=True,
        )

    res = check_walks(
        g,
        compiled.matcher,
        view,
        steps=args.steps,
        seed=args.seed,
        allowed=args.allowed,
        near=args.near,
        refused=args.refused,
        reps_every=args.reps_every,
        stop_chance=args.stop_chance,
        max_depth=args.max_depth,
        max_seconds=args.max_seconds,
        sentences=args.sentences,
        sentence_len=args.sentence_len,
        progress=progress,
    )
    t3 = time.perf_counter()
    say(
        f"{rel}: classes {classes.num_classes} ({len(view.reps)} text representatives), "
        f"classes {t1 - t0:.1f} s, native compile {t2 - t1:.1f} s, check {t3 - t2:.1f} s"
    )
    say(
        f"  steps {res.steps}, walks {res.walks}, tokens taken {res.tokens_taken}, stop tokens "
        f"taken {res.stops_taken}, longest walk {res.longest_walk_bytes} bytes, walks along a member "
        f"of L(g) {res.sentence_walks}, steps at a complete text {res.complete_steps}"
        + (f" (stopped by --max-seconds {args.max_seconds:g})" if res.stopped_early else "")
    )
    say(
        f"  Earley verdicts {res.earley_checks} (samples, taken tokens, representatives on "
        f"{res.rep_steps} steps), token bits checked by first byte / stop {res.vector_checks}"
    )
    say(f"  mismatches {res.mismatches}")
    for e in res.examples:
        say(f"    MISMATCH {e}")
    return res


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring); returns the exit status (1 on any mismatch)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--grammars", default=",".join(DEFAULT_GRAMMARS), help="comma-separated paths")
    ap.add_argument("--grammar-root", default=str(SHARED_GRAMMARS), help="where the grammar paths start")
    ap.add_argument("--vocab", default="llama3", help="a built-in vocabulary")
    ap.add_argument("--steps", type=int, default=10_000, help="steps per grammar, all walks together")
    ap.add_argument("--allowed", type=int, default=32, help="allowed tokens sampled per step")
    ap.add_argument("--near", type=int, default=32, help="refused tokens with an allowed first byte per step")
    ap.add_argument("--refused", type=int, default=8, help="refused tokens of any kind per step")
    ap.add_argument(
        "--reps-every", type=int, default=100, help="check every representative this often (0: never)"
    )
    ap.add_argument("--stop-chance", type=float, default=0.1)
    ap.add_argument("--max-depth", type=int, default=48, help="tokens per walk before it starts again")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sentences", type=float, default=0.0, help="chance a walk follows a member of L(g)")
    ap.add_argument("--sentence-len", type=int, default=200, help="longest member followed (bytes)")
    ap.add_argument("--max-seconds", type=float, help="stop each grammar's walks after this long")
    ap.add_argument("--kernel", default="c", choices=["c", "python", "auto"])
    ap.add_argument("--cache-dir", default="/tmp/native-earley-cache", help="Compressor cache directory")
    ap.add_argument("--output", help="append the report here")
    args = ap.parse_args(argv)
    vocab = Vocabulary.builtin(args.vocab)
    compressor = Compressor(vocab, cache_dir=args.cache_dir)
    lines: list[str] = []
    head = (
        f"native vs Earley: vocab {args.vocab} ({vocab.size} tokens), steps {args.steps}, seed {args.seed}, "
        f"samples allowed {args.allowed} near {args.near} refused {args.refused}, representatives every "
        f"{args.reps_every} steps, max depth {args.max_depth}, members followed {args.sentences:g} "
        f"(up to {args.sentence_len} bytes), kernel {args.kernel}"
    )
    print(head, flush=True)
    lines.append(head)
    failed = 0
    for rel in [r for r in args.grammars.split(",") if r]:
        res = run_one(rel, args, compressor, lines)
        failed += res.mismatches
    if args.output:
        with open(args.output, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

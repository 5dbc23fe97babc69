"""Fuzz campaign for the grammar-text front ends: ``parse_gbnf`` and ``parse_regex`` on hostile input.

Run: ``python bench/fuzz_parser.py [--inputs 100000] [--workers 2] [--timeout 10] [--seed 0]``.

Inputs are generated here (nothing is read from disk): GBNF texts written by a random
grammar of GBNF, mutations of those and of small grammars written below (characters and
tokens inserted, deleted, replaced, spans duplicated or cut), random character soup, and
regular expressions built and mutated the same way (with random ``re`` flags).  Each input
runs in a worker process (``--serve``, this file as a script) with a per-input timeout, so a
crash or a hang is counted, not fatal.  Per input the worker checks:

* only :class:`~formalgram.errors.GrammarSyntaxError` (or its subclass
  ``UnsupportedConstruct``) escapes, with a line and column inside the input;
* a grammar that parses prints with ``to_gbnf`` and parses back to an equal grammar;
* a pattern agrees with Python's ``re``: refused by ``re`` => refused here; accepted by
  ``re`` => a grammar (or ``UnsupportedConstruct``, or the documented ``max_repeat`` /
  ``max_depth`` limits), whose verdicts on a few strings (random ones and sampled members)
  equal ``re.fullmatch``.

The summary counts inputs, untyped errors, wrong answers, hangs and crashes, and lists the
first few of each.  ``tests/test_fuzz_parser.py`` drives the same worker with
Hypothesis-generated inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import selectors
import subprocess
import sys
import time
import traceback
import warnings
from typing import IO, Any

# -- inputs -------------------------------------------------------------------------------

# small grammars written for this campaign (seeds for mutation)
SEED_GRAMMARS = [
    'root ::= "a" root "b" | ""\n',
    'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | "(" expr ")"\n',
    'root ::= "{" ws (pair ("," ws pair)*)? "}"\npair ::= str ws ":" ws str ws\n'
    'str ::= "\\"" [^"\\\\\\n]* "\\""\nws ::= [ \\t\\n]*\n',
    "# comment\nroot ::= item{2,4} | item?\nitem ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,3} # trailing\n",
    'root ::= a.b . "é" [^\\u00e9-\\U0001F600]\na.b ::= "x" (= "y")\n',
    'root ::= 0 | x-1\n0 ::= "\\x41\\x{C3}" [\\x{80}-\\x{BF}]\nx-1 ::= ("" | "q")+ [] ""\n',
    'root ::=\r\n  "a"\r\n  | "b" ((("c")))* [\\]\\[\\-^]\r\n',
]
SEED_PATTERNS = [
    r"[a-z]+(?:-[a-z]+)*",
    r"\d{3}-\d{4}|\(\d{3}\) ?\d{3}",
    r"(?P<user>[\w.]+)@(?:[a-z0-9-]+\.)+[a-z]{2,}",
    r"(?x) a+ \  b*? # comment" + "\n" + r" [^\s\]] {1,3}",
    r"(?i:abc)[\x00-\x1f\u00e9\U0001F600-\U0001F64F]\N{EM DASH}\0\101",
    r"(?s).{2,}?|(?a:\W\S\D)|[^]-]|[\b-\r]",
]
_GBNF_TOKENS = [
    "root",
    "::=",
    " ::= ",
    "\n",
    "\r\n",
    " ",
    "|",
    "(",
    ")",
    "*",
    "+",
    "?",
    "{2}",
    "{0,3}",
    "{1,}",
    "{",
    "}",
    ",",
    '"',
    '"a"',
    '""',
    "[",
    "]",
    "[^",
    "-",
    "^",
    "\\",
    "\\x",
    "\\x{",
    "\\u",
    "\\U",
    ".",
    "#",
    "(=",
    "x",
    "0",
    "é",
    "\x00",
    "\ufeff",
    "\ud800",
    "Regex(",
]
_REGEX_TOKENS = [
    "a",
    "b",
    "é",
    "\n",
    " ",
    ".",
    "|",
    "(",
    ")",
    "(?:",
    "(?P<g",
    ">",
    "(?P=g)",
    "(?i)",
    "(?a)",
    "(?x)",
    "(?s:",
    "(?-i:",
    "(?#",
    "(?=",
    "(?<",
    "(?>",
    "(?(1)",
    "*",
    "+",
    "?",
    "*?",
    "++",
    "{2}",
    "{,3}",
    "{1,}",
    "{",
    "}",
    ",",
    "[",
    "]",
    "[^",
    "-",
    "^",
    "$",
    "\\",
    "\\d",
    "\\w",
    "\\s",
    "\\W",
    "\\b",
    "\\A",
    "\\x4",
    "\\u00",
    "\\U0001",
    "\\N{",
    "\\0",
    "\\1",
    "\\8",
    "\\q",
    "#",
    "\ud800",
]
_CHARS = "aZ0_-.:=|()[]{}*+?^$\\\"' \t\n\r#,<>=!éΩ😀\x00\x7f\x85\u2028"
_REGEX_FLAGS = [
    0,
    0,
    0,
    re.ASCII,
    re.IGNORECASE | re.ASCII,
    re.IGNORECASE,
    re.DOTALL,
    re.VERBOSE,
    re.MULTILINE,
]


def _gbnf_char(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.6:
        return rng.choice("abcxyz019 _-")
    if r < 0.75:
        return rng.choice(
            ['\\"', "\\\\", "\\n", "\\t", "\\x41", "\\u00e9", "\\U0001F600", "\\x{C3}", "\\]", "\\-"]
        )
    return chr(
        rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xFFFF), rng.randint(0x10000, 0x10FFFF)])
    )


def _gbnf_expr(rng: random.Random, names: list[str], depth: int) -> str:
    k = rng.randint(0, 9 if depth < 4 else 4)
    if k <= 1:
        return '"' + "".join(_gbnf_char(rng) for _ in range(rng.randint(0, 3))).replace('"', "") + '"'
    if k == 2:
        body = "".join(_gbnf_char(rng) for _ in range(rng.randint(0, 3))).replace("]", "").replace("^", "")
        lo, hi = sorted((rng.randint(0x20, 0x7E), rng.randint(0x20, 0x7E)))
        ranged = f"{chr(lo)}-{chr(hi)}" if chr(lo) not in "\\]^-" and chr(hi) not in "\\]^-" else ""
        return "[" + rng.choice(["", "^"]) + body + ranged + "]"
    if k == 3:
        return rng.choice(names)
    if k == 4:
        return "."
    if k <= 6:
        alts = [_gbnf_seq(rng, names, depth + 1) for _ in range(rng.randint(1, 3))]
        return "(" + " | ".join(alts) + ")"
    inner = _gbnf_expr(rng, names, depth + 1)
    op = rng.choice(["*", "+", "?", "{2}", "{0,3}", "{1,}", "{ 1 , 2 }", "{0}"])
    return inner + op


def _gbnf_seq(rng: random.Random, names: list[str], depth: int) -> str:
    return " ".join(_gbnf_expr(rng, names, depth) for _ in range(rng.randint(0, 3)))


def generated_gbnf(rng: random.Random) -> str:
    """A random GBNF text, most often valid: rules over random names, nested expressions."""
    count = rng.randint(1, 5)
    names = ["root"] + [rng.choice(["r", "x-", "a.", "0", "R_"]) + str(i) for i in range(1, count)]
    lines = []
    for name in names:
        alts = [_gbnf_seq(rng, names, 0) for _ in range(rng.randint(1, 3))]
        line = f"{name} ::= " + " | ".join(a if a else '""' for a in alts)
        if rng.random() < 0.1:
            line += ' (= "x")'
        if rng.random() < 0.2:
            line += " # " + rng.choice(["note", "é", "::="])
        lines.append(line)
    rng.shuffle(lines)
    return rng.choice(["\n", "\r\n", "\n\n"]).join(lines) + rng.choice(["", "\n"])


def _regex_atom(rng: random.Random, depth: int) -> str:
    k = rng.randint(0, 9 if depth < 4 else 4)
    if k <= 2:
        return rng.choice(
            ["a", "b", "é", "-", " ", "\\.", "\\n", "\\x41", "\\u00e9", "\\U0001F600", "\\0", "\\t"]
        )
    if k == 3:
        return rng.choice(["\\d", "\\w", "\\s", "\\D", "\\W", "\\S", "."])
    if k == 4:
        members = "".join(
            rng.choice(["a", "b-d", "\\d", "é", "\\]", "-", "^", "\\n", "\\x00-\\x1f"]) for _ in range(3)
        )
        return "[" + rng.choice(["", "^"]) + members + "]"
    if k <= 7:
        opener = rng.choice(["(", "(?:", f"(?P<g{rng.randint(0, 99)}>", "(?i:", "(?s:", "(?a:", "(?-i:"])
        alts = [
            "".join(_regex_atom(rng, depth + 1) for _ in range(rng.randint(0, 3)))
            for _ in range(rng.randint(1, 3))
        ]
        return opener + "|".join(alts) + ")"
    inner = _regex_atom(rng, depth + 1)
    return inner + rng.choice(["*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{,2}", "{2,}", "{0}"])


def generated_regex(rng: random.Random) -> str:
    """A random pattern in Python's syntax, most often valid."""
    prefix = rng.choice(["", "", "", "(?i)", "(?a)", "(?x)", "(?s)", "(?ai)"])
    alts = ["".join(_regex_atom(rng, 0) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 3))]
    return prefix + "|".join(alts)


def mutate(rng: random.Random, text: str, tokens: list[str]) -> str:
    """``text`` after 1 to 5 random edits (insert, delete, replace, duplicate, cut)."""
    for _ in range(rng.randint(1, 5)):
        i = rng.randint(0, len(text))
        op = rng.randint(0, 5)
        piece = rng.choice(tokens) if rng.random() < 0.7 else rng.choice(_CHARS)
        if op == 0:
            text = text[:i] + piece + text[i:]
        elif op == 1:
            text = text[:i] + text[i + rng.randint(1, 3) :]
        elif op == 2:
            text = text[:i] + piece + text[i + 1 :]
        elif op == 3:
            j = min(len(text), i + rng.randint(1, 8))
            text = text[:j] + text[i:j] + text[j:]
        elif op == 4:
            text = text[:i]
        else:
            text = text[i:]
    return text


def soup(rng: random.Random, tokens: list[str]) -> str:
    """Random tokens and characters."""
    return "".join(
        rng.choice(tokens) if rng.random() < 0.5 else rng.choice(_CHARS) for _ in range(rng.randint(0, 40))
    )


def make_input(rng: random.Random) -> dict[str, Any]:
    """One request: a GBNF text (two thirds) or a regular expression with flags."""
    r = rng.random()
    if r < 2 / 3:
        k = rng.randint(0, 4)
        if k == 0:
            text = generated_gbnf(rng)
        elif k == 1:
            text = mutate(rng, generated_gbnf(rng), _GBNF_TOKENS)
        elif k == 2:
            text = mutate(rng, rng.choice(SEED_GRAMMARS), _GBNF_TOKENS)
        elif k == 3:
            text = "root ::= " + soup(rng, _GBNF_TOKENS)
        else:
            text = soup(rng, _GBNF_TOKENS)
        return {"kind": "gbnf", "text": text, "lookahead": rng.choice(["error", "drop"])}
    k = rng.randint(0, 3)
    if k == 0:
        pattern = generated_regex(rng)
    elif k == 1:
        pattern = mutate(rng, generated_regex(rng), _REGEX_TOKENS)
    elif k == 2:
        pattern = mutate(rng, rng.choice(SEED_PATTERNS), _REGEX_TOKENS)
    else:
        pattern = soup(rng, _REGEX_TOKENS)
    return {
        "kind": "regex",
        "text": pattern,
        "flags": int(rng.choice(_REGEX_FLAGS)),
        "seed": rng.randint(0, 10**6),
    }


# -- checks (run in the worker) ---------------------------------------------------------------

_STRING_CHARS = [
    "a",
    "b",
    "A",
    "é",
    "É",
    "-",
    " ",
    "\n",
    "1",
    "٣",
    "_",
    ".",
    "\t",
    "K",
    "\u212a",
    "ı",
    "😀",
    "x",
]


def _position_inside(text: str, line: int, column: int) -> bool:
    lines = text.split("\n")
    return 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1


def _syntax_error(exc: BaseException, text: str) -> dict[str, Any]:
    """The verdict for an error raised by a front end."""
    from formalgram.errors import GrammarSyntaxError, UnsupportedConstruct

    if not isinstance(exc, GrammarSyntaxError):
        return {"verdict": "untyped", "detail": "".join(traceback.format_exception(exc))[-2000:]}
    if not _position_inside(text, exc.line, exc.column):
        return {"verdict": "wrong", "detail": f"position {exc.line}:{exc.column} outside the input: {exc}"}
    kind = "unsupported" if isinstance(exc, UnsupportedConstruct) else "syntax"
    return {"verdict": kind, "detail": exc.message}


def _round_trip(g: Any, kw: dict[str, Any]) -> dict[str, Any] | None:
    """None when ``g`` prints and parses back to an equal grammar, else the verdict."""
    from formalgram.syntax.gbnf import parse_gbnf
    from formalgram.syntax.printer import to_gbnf

    try:
        printed = to_gbnf(g)
        again = parse_gbnf(printed, g.start.name, max_bytes=1 << 30, **kw)
    except Exception as exc:
        return {
            "verdict": "untyped",
            "detail": "round trip: " + "".join(traceback.format_exception(exc))[-2000:],
        }
    if again != g:
        return {"verdict": "wrong", "detail": "the printed grammar parses to a different grammar"}
    return None


def check_gbnf(text: str, lookahead: str = "drop") -> dict[str, Any]:
    """Parse ``text``; typed errors with positions, or a grammar that round-trips."""
    from formalgram.syntax.gbnf import parse_gbnf

    try:
        g = parse_gbnf(text, lookahead=lookahead)
    except Exception as exc:
        return _syntax_error(exc, text)
    return _round_trip(g, {}) or {"verdict": "ok", "detail": ""}


def _limit_error(message: str) -> bool:
    return "max_repeat" in message or "nested deeper" in message or "max_bytes" in message


def check_regex(pattern: str, flags: int, seed: int = 0) -> dict[str, Any]:
    """Parse ``pattern``; compare refusals and verdicts with Python's ``re``."""
    from formalgram import accepts, sample
    from formalgram.errors import FormalgramError
    from formalgram.syntax.regex import parse_regex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled: re.Pattern[str] | None = re.compile(pattern, flags)
        except (re.error, ValueError, OverflowError, RecursionError):
            compiled = None
    try:
        g = parse_regex(pattern, flags)
    except Exception as exc:
        verdict = _syntax_error(exc, pattern)
        if verdict["verdict"] == "syntax" and compiled is not None and not _limit_error(verdict["detail"]):
            return {"verdict": "wrong", "detail": f"refused a pattern re accepts: {verdict['detail']}"}
        return verdict
    if compiled is None:
        return {"verdict": "wrong", "detail": "accepted a pattern re refuses"}
    rng = random.Random(seed)
    strings = ["".join(rng.choice(_STRING_CHARS) for _ in range(rng.randint(0, 4))) for _ in range(8)]
    try:
        members = sample(g, 3, seed=seed, max_len=8)
    except FormalgramError:
        members = []
    for m in members:
        try:
            strings.append(m.decode("utf-8"))
        except UnicodeDecodeError:
            return {"verdict": "wrong", "detail": f"sampled a member that is not UTF-8: {m!r}"}
    for s in strings:
        if accepts(g, s.encode()) != (compiled.fullmatch(s) is not None):
            return {"verdict": "wrong", "detail": f"verdict on {s!r} differs from re.fullmatch"}
    return _round_trip(g, {}) or {"verdict": "ok", "detail": ""}


def check(request: dict[str, Any]) -> dict[str, Any]:
    """The worker's answer to one request (see :func:`make_input`)."""
    if request["kind"] == "gbnf":
        return check_gbnf(request["text"], request.get("lookahead", "drop"))
    return check_regex(request["text"], request.get("flags", 0), request.get("seed", 0))


def serve() -> None:
    """Worker loop: one JSON request per line on stdin, one JSON verdict per line on stdout."""
    out = sys.stdout
    for line in sys.stdin:
        verdict = check(json.loads(line))
        out.write(json.dumps(verdict) + "\n")
        out.flush()


# -- the parent side ------------------------------------------------------------------------


class Worker:
    """A worker process (this file run with ``--serve``), restarted after a crash or a hang.

    Parameters
    ----------
    timeout : float
        Seconds one input may take before it counts as a hang (the worker is killed).
    """

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.starts = 0

    def command(self) -> list[str]:
        """The child's command line: this file as a script, serving checks.  Run as a
        script, sys.path[0] is bench/, so the installed (compiled) formalgram is the one
        imported when there is one, as in the test process."""
        return [sys.executable, os.path.abspath(__file__), "--serve"]

    def start(self) -> subprocess.Popen[bytes]:
        self.close()
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.buffer = b""
        self.starts += 1
        return self.proc

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """The verdict for ``request``; ``crash`` or ``hang`` when the worker dies or stalls."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self.start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + self.timeout
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    proc.kill()
                    proc.wait()
                    self.close()
                    return {"verdict": "hang", "detail": f"no answer within {self.timeout} s"}
                chunk = os.read(fd, 65536)
                if not chunk:
                    code = proc.wait()
                    self.close()
                    return {"verdict": "crash", "detail": f"worker exit status {code}"}
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer


BAD = ("untyped", "wrong", "hang", "crash")


def campaign(inputs: int, workers: int, timeout: float, seed: int, log: IO[str]) -> dict[str, Any]:
    """Run ``inputs`` generated inputs over ``workers`` processes; the summary as a dict."""
    import concurrent.futures

    rng = random.Random(seed)
    requests = [make_input(rng) for _ in range(inputs)]
    counts: dict[str, int] = {}
    examples: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    pool = [Worker(timeout) for _ in range(workers)]
    started = time.monotonic()

    def run_slice(k: int) -> list[tuple[int, dict[str, Any]]]:
        return [(i, pool[k].run(requests[i])) for i in range(k, inputs, workers)]

    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        results = [r for part in ex.map(run_slice, range(workers)) for r in part]
    for w in pool:
        w.close()
    for i, verdict in results:
        kind = f"{requests[i]['kind']}:{verdict['verdict']}"
        counts[kind] = counts.get(kind, 0) + 1
        if verdict["verdict"] in BAD:
            examples.setdefault(verdict["verdict"], []).append((requests[i], verdict))
    summary = {
        "inputs": inputs,
        "seed": seed,
        "timeout_s": timeout,
        "wall_s": round(time.monotonic() - started, 1),
        "counts": dict(sorted(counts.items())),
        "untyped": len(examples.get("untyped", [])),
        "wrong": len(examples.get("wrong", [])),
        "hangs": len(examples.get("hang", [])),
        "crashes": len(examples.get("crash", [])),
        "worker_starts": sum(w.starts for w in pool),
    }
    for kind, items in examples.items():
        for request, verdict in items[:5]:
            log.write(f"--- {kind}: {json.dumps(request)}\n{verdict['detail']}\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--inputs", type=int, default=100_000, help="number of inputs (default 100000)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per input before a hang (default 10)"
    )
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve()
        return 0
    if args.inputs < 1 or args.workers < 1 or args.timeout <= 0:
        ap.error("--inputs and --workers must be positive, --timeout above 0")
    summary = campaign(args.inputs, args.workers, args.timeout, args.seed, sys.stdout)
    print(json.dumps(summary, indent=2))
    bad = summary["untyped"] + summary["wrong"] + summary["hangs"] + summary["crashes"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

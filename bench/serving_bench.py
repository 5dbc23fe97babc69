"""End-to-end generation in the serving frameworks: a tiny random Llama, Llama-3's tokenizer.

Builds, with no download, a model directory that transformers, SGLang and vLLM all load:

* ``tokenizer.json``: Llama-3's tokenizer, from the Llama-3 vocabulary that ``quicktok-v1``
  ships (byte-level BPE whose merges follow the token ranks, as for tiktoken files, Llama-3's
  pre-tokenizer pattern, ``<|begin_of_text|>`` prepended);
* ``config.json`` / ``model.safetensors``: a ``LlamaConfig`` with a few small layers and
  Llama-3's real vocabulary size (128256 logits), weights drawn at random from a seed.

With random weights the model prefers no text over another, so the constraint does all the
work: every output must still be in the language.  :data:`REQUESTS` are a JSON Schema, a
GBNF grammar and a Lark grammar, each bounded so that every constrained generation ends with
a stop token within ``max_new_tokens``; :func:`check_output` validates an output with
``jsonschema`` or with formalgram's Earley recognizer.

Each ``run_*`` function generates the requests in one framework and returns rows of
``{"framework", "request", "backend", "tokens", "seconds", "ms_per_token", "valid", ...}``:
``backend`` is ``"none"`` (no constraint, the same number of tokens), ``"formalgram"`` (this
package's native engine over the classes) or the framework's own default (``"xgrammar"``).

Usage (from the repository root; each framework in the environment where it is installed)::

    python -m bench.serving_bench --framework transformers --out results.json
    python -m bench.serving_bench --framework sglang
    python -m bench.serving_bench --framework vllm
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Llama-3's pre-tokenizer pattern (its tokenizer.json's ``Split`` regex).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BOS = "<|begin_of_text|>"
#: The stop tokens of the built-in ``llama3`` vocabulary: <|end_of_text|>, <|eom_id|>, <|eot_id|>.
EOS_IDS = (128001, 128008, 128009)

#: A bounded schema.  The name is a pattern, not ``maxLength``: XGrammar's grammar for a string
#: with ``maxLength`` admits raw control characters (a tab, U+0000-U+001F but CR and LF), which
#: strict JSON refuses, so an output could be in the grammar's language and fail ``json.loads``.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z ]{1,8}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "member": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "member", "tags"],
    "additionalProperties": False,
}
GBNF = r"""root ::= assign assign? assign?
assign ::= ident " = " num ";\n"
ident ::= [a-z] [a-z]? [a-z]? [a-z]?
num ::= [0-9] [0-9]? [0-9]?
"""
LARK = r"""start: pair ("," pair)~0..3
pair: KEY "=" VALUE
KEY: /[a-z]{1,5}/
VALUE: /[0-9]{1,3}/ | "true" | "false"
"""

#: name -> (kind, grammar): ``json`` a schema, ``gbnf`` GBNF text, ``lark`` Lark text.
REQUESTS: dict[str, tuple[str, Any]] = {
    "json": ("json", SCHEMA),
    "gbnf": ("gbnf", GBNF),
    "lark": ("lark", LARK),
}
PROMPT = "Write the answer:"


def check_output(kind: str, grammar: Any, text: bytes) -> bool:
    """Whether ``text`` is in the request's language.

    Parameters
    ----------
    kind : {"json", "gbnf", "lark"}
        As in :data:`REQUESTS`.
    grammar : object
        The schema (validated with ``jsonschema``), or the grammar text (Earley).
    text : bytes
        The generated text, stop token left out.

    Returns
    -------
    bool
    """
    if kind == "json":
        import jsonschema

        try:
            jsonschema.validate(json.loads(text), grammar)
        except (ValueError, jsonschema.ValidationError):
            return False
        return True
    import formalgram
    from formalgram.recognize.earley import accepts

    g = formalgram.parse_gbnf(grammar) if kind == "gbnf" else formalgram.parse_lark(grammar)
    return bool(accepts(g, text))


def grammar_text(kind: str, grammar: Any) -> str:
    """GBNF text of a request, start rule ``root`` (XGrammar's grammar for a schema, no free
    whitespace: :func:`formalgram_cfgzip.integrations.request_grammars.grammar_text_for`)."""
    from formalgram_cfgzip.integrations.request_grammars import grammar_text_for

    key = json.dumps(grammar) if kind == "json" else str(grammar)
    return grammar_text_for("json" if kind == "json" else "ebnf", key, any_whitespace=False)


# -- the model directory -------------------------------------------------------------------------


def write_llama3_tokenizer(directory: Path) -> Path:
    """Write Llama-3's ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``.

    The merges and byte map are :func:`bench.compress_bench.build_hf_cache`'s (merges in the
    order of the merged tokens' ranks); the pre-tokenizer is Llama-3's pattern followed by the
    byte-level map, and a template puts ``<|begin_of_text|>`` first, as in Meta's file.
    """
    from bench.compress_bench import build_hf_cache
    from formalgram_cfgzip.vocabulary import Vocabulary

    directory.mkdir(parents=True, exist_ok=True)
    vocab = Vocabulary.builtin("llama3")
    with tempfile.TemporaryDirectory() as tmp:
        model_id = build_hf_cache(vocab, Path(tmp))
        repo = Path(tmp) / ("models--" + model_id.replace("/", "--"))
        rev = (repo / "refs" / "main").read_text("utf-8")
        data = json.loads((repo / "snapshots" / rev / "tokenizer.json").read_text("utf-8"))
    data["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
    bos_id = vocab.tokens.index(BOS.encode())
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": BOS, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": BOS, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}},
    }
    path = directory / "tokenizer.json"
    path.write_text(json.dumps(data, ensure_ascii=False), "utf-8")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": "<|eot_id|>",
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    return path


def build_tiny_llama(directory: Path, *, layers: int = 2, hidden: int = 128, seed: int = 0) -> Path:
    """Write a random tiny Llama with Llama-3's tokenizer into ``directory`` (reused when there).

    Parameters
    ----------
    directory : Path
        Where ``config.json``, ``model.safetensors``, ``generation_config.json`` and the
        tokenizer files go.
    layers, hidden : int
        Decoder layers and hidden size (heads of 64 dimensions, which vLLM's CPU attention
        supports; as many key-value heads).
    seed : int
        Seed of the random weights.

    Returns
    -------
    Path
        ``directory``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if (directory / "model.safetensors").is_file() and (directory / "tokenizer.json").is_file():
        return directory
    write_llama3_tokenizer(directory)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=2048,
        bos_token_id=128000,
        eos_token_id=list(EOS_IDS),
        rope_theta=500000.0,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


# -- timing rows ---------------------------------------------------------------------------------


def _row(
    framework: str, request: str, backend: str, tokens: int, seconds: float, **extra: Any
) -> dict[str, Any]:
    return {
        "framework": framework,
        "request": request,
        "backend": backend,
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "ms_per_token": round(1000 * seconds / max(tokens, 1), 3),
        **extra,
    }


def run_transformers(model_dir: Path, *, repeats: int = 3, max_new_tokens: int = 160) -> list[dict[str, Any]]:
    """Generate every request with ``model.generate``: no constraint, the native engine over the
    classes, and XGrammar over the full vocabulary (both through
    :class:`~formalgram_cfgzip.integrations.transformers.GrammarLogitsProcessor`).

    Sampling at temperature 1 with a fixed seed per repeat; the unconstrained run generates as
    many tokens as the constrained one did.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.engines import compile_full, compile_grammar
    from formalgram_cfgzip.integrations.transformers import GrammarLogitsProcessor
    from formalgram_cfgzip.vocabulary import Vocabulary

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.train(False)
    vocab = Vocabulary.from_transformers(tokenizer, stop_ids=EOS_IDS, logit_width=128256)
    compressor = Compressor(vocab, domains=True, specialize=False, gnf_strategy="fast")
    prompt = tokenizer(PROMPT, return_tensors="pt")
    rows: list[dict[str, Any]] = []

    def generate(processor: Any, n: int, seed: int, stop: bool) -> tuple[list[int], float]:
        torch.manual_seed(seed)
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                **prompt,
                max_new_tokens=n,
                min_new_tokens=0 if stop else n,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                logits_processor=LogitsProcessorList([processor] if processor else []),
                eos_token_id=list(EOS_IDS) if stop else None,
                pad_token_id=EOS_IDS[0],
            )
        seconds = time.perf_counter() - t
        return [int(i) for i in out[0, prompt["input_ids"].shape[1] :]], seconds

    class Timed:
        """The processor, its own time added up (the mask's cost alone)."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.seconds = inner, 0.0

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            t = time.perf_counter()
            out = self.inner(input_ids, scores)
            self.seconds += time.perf_counter() - t
            return out

    for name, (kind, grammar) in REQUESTS.items():
        text = grammar_text(kind, grammar)
        t0 = time.perf_counter()
        classes = compressor.compress(text)
        engines = {"formalgram": compile_grammar(classes, text, engine="native")}
        compile_s = time.perf_counter() - t0
        engines["xgrammar"] = compile_full(vocab, text, engine="xgrammar")
        for seed in range(repeats):
            counts = []
            for backend, compiled in engines.items():
                timed = Timed(GrammarLogitsProcessor(compiled))
                ids, seconds = generate(timed, max_new_tokens, seed, True)
                stopped = bool(ids) and ids[-1] in EOS_IDS
                body = vocab.decode(i for i in ids if i not in EOS_IDS)
                valid = stopped and check_output(kind, grammar, body)
                counts.append(len(ids))
                rows.append(
                    _row("transformers", name, backend, len(ids), seconds, valid=valid, seed=seed, text=body.decode("utf-8", "replace"),
                         classes=classes.num_classes, compress_seconds=round(compile_s, 4),
                         mask_ms_per_token=round(1000 * timed.seconds / max(len(ids), 1), 4))
                )  # fmt: skip
            _, seconds = generate(None, max(counts), seed, False)
            rows.append(_row("transformers", name, "none", max(counts), seconds, seed=seed))
    return rows


def _vocabulary(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    from formalgram_cfgzip.vocabulary import Vocabulary

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return Vocabulary.from_transformers(tokenizer, stop_ids=EOS_IDS, logit_width=128256)


def run_vllm(model_dir: Path, *, repeats: int = 3, max_new_tokens: int = 160) -> list[dict[str, Any]]:
    """Generate every request with vLLM's ``LLM.generate`` (engine in this process).

    Backends: no constraint (``ignore_eos``, as many tokens as the constrained run), this
    package's adapter (:func:`~formalgram_cfgzip.integrations.vllm.vllm_adapter_class`, the
    grammar given in full in ``extra_args``, the native engine) and vLLM's own structured
    outputs (``structured_outputs=``, XGrammar by default; vLLM reads no Lark).
    """
    import os

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.integrations.request_grammars import COMPRESS_OPTIONS, RequestCompiler
    from formalgram_cfgzip.integrations.vllm import vllm_adapter_class

    vocab = _vocabulary(model_dir)
    compiler = RequestCompiler(vocab, compressor=Compressor(vocab, **COMPRESS_OPTIONS), any_whitespace=False)
    adapter = vllm_adapter_class(compiler=compiler)
    llm = LLM(
        model=str(model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=4,
        logits_processors=[adapter],
        seed=0,
        # vLLM's XGrammar reads this engine-wide, not from the request's StructuredOutputsParams
        structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
    )
    rows: list[dict[str, Any]] = []
    args = {"json": "formalgram_json", "gbnf": "formalgram_ebnf", "lark": "formalgram_lark"}
    for name, (kind, grammar) in REQUESTS.items():
        spec = grammar if kind == "json" else str(grammar)
        own: dict[str, Any] = {
            "json": {"json": grammar, "disable_any_whitespace": True},
            "gbnf": {"grammar": grammar},
        }
        backends: dict[str, dict[str, Any]] = {"formalgram": {"extra_args": {args[kind]: spec}}}
        if kind in own:
            backends["xgrammar"] = {"structured_outputs": StructuredOutputsParams(**own[kind])}
        for seed in range(repeats + 1):  # the first round compiles the grammars: not timed
            counts = []
            for backend, extra in backends.items():
                params = SamplingParams(max_tokens=max_new_tokens, temperature=1.0, seed=seed, **extra)
                t = time.perf_counter()
                out = llm.generate([PROMPT], params, use_tqdm=False)[0].outputs[0]
                seconds = time.perf_counter() - t
                ids = list(out.token_ids)
                stopped = out.finish_reason == "stop"
                body = vocab.decode(i for i in ids if i not in EOS_IDS)
                counts.append(len(ids))
                if seed:
                    valid = stopped and check_output(kind, grammar, body)
                    rows.append(
                        _row("vllm", name, backend, len(ids), seconds, valid=valid, seed=seed,
                             text=body.decode("utf-8", "replace"))
                    )  # fmt: skip
            params = SamplingParams(max_tokens=max(counts), temperature=1.0, seed=seed, ignore_eos=True)
            t = time.perf_counter()
            out = llm.generate([PROMPT], params, use_tqdm=False)[0].outputs[0]
            if seed:
                rows.append(
                    _row("vllm", name, "none", len(out.token_ids), time.perf_counter() - t, seed=seed)
                )
    return rows


def run_sglang(model_dir: Path, *, repeats: int = 3, max_new_tokens: int = 160) -> list[dict[str, Any]]:
    """Generate every request with SGLang's offline ``Engine`` on the CPU, one engine per backend.

    Backends: ``formalgram`` (this package's grammar backend, found through its
    ``sglang.srt.plugins`` entry point, so the package must be installed in SGLang's
    environment), SGLang's default ``xgrammar`` (no Lark), and no constraint (``ignore_eos``,
    as many tokens as the constrained run, on the ``formalgram`` engine).  JSON without free
    whitespace (``constrained_json_disable_any_whitespace``) on both.
    """
    import sglang

    rows: list[dict[str, Any]] = []
    counts: dict[tuple[str, int], int] = {}
    for backend in ("formalgram", "xgrammar"):
        engine = sglang.Engine(
            model_path=str(model_dir),
            device="cpu",
            grammar_backend=backend,
            attention_backend="torch_native",
            disable_cuda_graph=True,
            dtype="float32",
            mem_fraction_static=0.05,
            max_total_tokens=4096,
            random_seed=0,
            constrained_json_disable_any_whitespace=True,
            skip_server_warmup=True,
        )
        try:
            for name, (kind, grammar) in REQUESTS.items():
                if backend == "xgrammar" and kind == "lark":
                    continue
                key = {"json_schema": json.dumps(grammar)} if kind == "json" else {"ebnf": str(grammar)}
                for seed in range(repeats + 1):  # the first round compiles the grammar: not timed
                    params = {
                        "max_new_tokens": max_new_tokens,
                        "temperature": 1.0,
                        "sampling_seed": seed,
                        **key,
                    }
                    t = time.perf_counter()
                    out = engine.generate(PROMPT, params)
                    seconds = time.perf_counter() - t
                    meta = out["meta_info"]
                    n = int(meta["completion_tokens"])
                    stopped = (meta.get("finish_reason") or {}).get("type") == "stop"
                    body = str(out["text"]).encode("utf-8")
                    counts[name, seed] = max(counts.get((name, seed), 0), n)
                    if seed:
                        valid = stopped and check_output(kind, grammar, body)
                        rows.append(
                            _row(
                                "sglang", name, backend, n, seconds, valid=valid, seed=seed, text=out["text"]
                            )
                        )
            if backend == "formalgram":
                # a grammar that does not compile fails its request (the offline engine raises
                # the request's abort message as a ValueError), and the engine goes on
                t = time.perf_counter()
                try:
                    out = engine.generate(PROMPT, {"max_new_tokens": 8, "ebnf": 'root ::= "a" ('})
                    finish, message = str((out["meta_info"].get("finish_reason") or {}).get("type")), ""
                except ValueError as exc:
                    finish, message = "abort", str(exc)
                rows.append(_row("sglang", "invalid", "formalgram-error", 0, time.perf_counter() - t,
                                 finish=finish, message=message))  # fmt: skip
                for name in REQUESTS:
                    for seed in range(1, repeats + 1):
                        n = counts[name, seed]
                        params = {
                            "max_new_tokens": n,
                            "temperature": 1.0,
                            "sampling_seed": seed,
                            "ignore_eos": True,
                        }
                        t = time.perf_counter()
                        out = engine.generate(PROMPT, params)
                        seconds = time.perf_counter() - t
                        rows.append(
                            _row(
                                "sglang",
                                name,
                                "none",
                                int(out["meta_info"]["completion_tokens"]),
                                seconds,
                                seed=seed,
                            )
                        )
        finally:
            engine.shutdown()
    return rows


def run_sglang_masks(model_dir: Path, *, repeats: int = 3, max_steps: int = 200) -> list[dict[str, Any]]:
    """The mask's own cost per token in SGLang's grammar objects, this backend against SGLang's
    default (``XGrammarGrammarBackend``), on the same seeded walks with Llama-3's tokenizer.

    Each step fills one 128256-wide row with both backends' grammar objects and applies it to a
    logits row (``fill_vocab_mask`` then ``apply_vocab_mask``, as SGLang's sampler does), checks
    that the two masks are equal, and moves both by a token drawn from the allowed ones; a walk
    ends at a stop token or after ``max_steps``.  ``ms_per_token`` is the mean of the timed
    allocation, fill and apply, ``fill_ms_per_token`` of the fill alone.  Besides
    :data:`REQUESTS`, the built-in C-like grammar (``minic``), whose masks cost XGrammar more.
    """
    import random

    import torch
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
    from transformers import AutoTokenizer

    from formalgram_cfgzip.compress import Compressor
    from formalgram_cfgzip.integrations.request_grammars import COMPRESS_OPTIONS
    from formalgram_cfgzip.integrations.sglang import create_backend

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    options = argparse.Namespace(constrained_json_disable_any_whitespace=True)
    ours_backend = create_backend(options, tokenizer, 128256, EOS_IDS)
    ours_backend.compiler.compressor = Compressor(ours_backend.compiler.vocab, **COMPRESS_OPTIONS)
    theirs_backend = XGrammarGrammarBackend(
        tokenizer, vocab_size=128256, model_eos_token_ids=list(EOS_IDS), any_whitespace=False
    )
    from importlib import resources

    minic = resources.files("formalgram_cfgzip").joinpath("data/minic.gbnf").read_text("utf-8")
    rows: list[dict[str, Any]] = []
    for name, (kind, grammar) in {**REQUESTS, "minic": ("gbnf", minic)}.items():
        key = ("json", json.dumps(grammar)) if kind == "json" else ("ebnf", str(grammar))
        backends = {"formalgram": ours_backend}
        if kind != "lark":
            backends["xgrammar"] = theirs_backend
        t: dict[str, float] = {}
        templates = {}
        for b, backend in backends.items():
            t0 = time.perf_counter()
            templates[b] = backend._init_value_dispatch(key, False)
            t[b] = time.perf_counter() - t0
        for seed in range(repeats):
            grammars = {b: g.copy() for b, g in templates.items()}
            spent = dict.fromkeys(grammars, 0.0)
            filling = dict.fromkeys(grammars, 0.0)
            rng = random.Random(seed)
            steps = 0
            for _ in range(max_steps):
                first = next(iter(grammars.values()))
                if first.is_terminated():
                    break
                masks = {}
                for b, g in grammars.items():
                    logits = torch.zeros(1, 128256)
                    t0 = time.perf_counter()
                    mask = g.allocate_vocab_mask(128256, 1, "cpu")
                    t1 = time.perf_counter()
                    g.fill_vocab_mask(mask, 0)
                    t2 = time.perf_counter()
                    g.apply_vocab_mask(logits, g.move_vocab_mask(mask, "cpu"))
                    spent[b] += time.perf_counter() - t0
                    filling[b] += t2 - t1
                    masks[b] = (mask, logits)
                if "xgrammar" in masks:
                    assert torch.equal(masks["xgrammar"][0], masks["formalgram"][0]), (name, seed, steps)
                allowed = torch.nonzero(torch.isfinite(masks["formalgram"][1][0])).flatten().tolist()
                tok = rng.choice(allowed)
                for g in grammars.values():
                    g.accept_token(tok)
                steps += 1
            for b in grammars:
                rows.append(
                    _row("sglang-masks", name, b, steps, spent[b], seed=seed, compile_seconds=round(t[b], 4),
                         fill_ms_per_token=round(1000 * filling[b] / max(steps, 1), 4))
                )  # fmt: skip
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median ms per token per (framework, request, backend), and whether every output was valid."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["framework"], r["request"], r["backend"]), []).append(r)
    out = []
    for (framework, request, backend), rs in sorted(groups.items()):
        valid = [r["valid"] for r in rs if "valid" in r]
        summary = {
            "framework": framework,
            "request": request,
            "backend": backend,
            "runs": len(rs),
            "tokens": sum(r["tokens"] for r in rs),
            "ms_per_token": round(statistics.median(r["ms_per_token"] for r in rs), 3),
            "all_valid": all(valid) if valid else None,
        }
        for extra in ("mask_ms_per_token", "fill_ms_per_token"):
            if all(extra in r for r in rs):
                summary[extra] = round(statistics.median(r[extra] for r in rs), 4)
        out.append(summary)
    return out


RUNNERS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "transformers": run_transformers,
    "vllm": run_vllm,
    "sglang": run_sglang,
    "sglang-masks": run_sglang_masks,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=sorted(RUNNERS), default="transformers")
    ap.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "formalgram-tiny-llama3")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, help="write every row as JSON here")
    args = ap.parse_args(argv)
    build_tiny_llama(args.model_dir)
    rows = RUNNERS[args.framework](args.model_dir, repeats=args.repeats)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1), "utf-8")
    for s in summarize(rows):
        print(json.dumps(s))
    return 0 if all(r.get("valid", True) for r in rows if r["backend"] == "formalgram") else 1


if __name__ == "__main__":
    sys.exit(main())

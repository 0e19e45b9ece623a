"""GGUF vocabulary: the ``tokenizer.ggml.*`` keys of :mod:`.gguf_writer`, read from ``tokenizer.json`` alone.

Two kinds are written, each in the form llama.cpp's own tokenizer reproduces exactly (tested: llama-cpp-python
tokenizes like transformers, tests/weights/test_gguf_vocab.py and tests/runs/test_families.py): byte-level BPE
(llama.cpp's ``gpt2`` model) and SentencePiece-style BPE with byte fallback over ``▁``-prefixed pieces (its
``llama`` SPM model); docs/formats.md lists each key they write and the tokenizers refused.

Why scores from the merges: llama.cpp's SPM tokenizer merges, among adjacent symbols, the pair whose
concatenation is the vocabulary token of highest score (llama-vocab.cpp, ``llm_tokenizer_spm_session``);
transformers' BPE merges the pair of lowest merge rank. With ``score = -(rank of the first merge producing the
token)`` both pick the same pair whenever every split of a token into two vocabulary tokens is itself a merge
(true of every tokenizer.json converted from a SentencePiece model: transformers' converter lists all of them).
A tokenizer where that, or anything else llama.cpp's SPM tokenizer cannot reproduce, does not hold is refused
with one line (:func:`spm_refusal`). gguf's ``LlamaHfVocab`` is not used: it gives every token the score -1000,
so llama.cpp would merge left to right instead of by rank, and marks the unknown token CONTROL.

Special ids, ``add_bos_token``/``add_eos_token`` and the chat template come from gguf's ``SpecialVocab`` for both.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..util.config_sizes import model_json_object
from ..util.reading import read_json, read_regular

__all__ = [
    "add_vocab",
    "check_vocab",
    "name_refusal",
    "read_tokenizer",
    "tokenizer_model",
    "vocab_size_refusal",
    "tokenizer_shape_problem",
    "chat_template_problem",
    "spm_refusal",
    "spm_space_prefix",
    "spm_vocab",
    "bpe_vocab",
    "pre_name",
]

SPACE = "\u2581"  # SentencePiece's whitespace mark "▁"
_BYTE = re.compile(r"<0x[0-9A-F]{2}>")
_NULL = "; set outputs.gguf: null"
# pre-tokenizer regexes of tokenizer.json -> llama.cpp's tokenizer.ggml.pre name (public tokenizer data)
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_PRE_REGEX = {_WORDS + r"\p{N}{1,3}" + _REST: "llama-bpe", _WORDS + r"\p{N}" + _REST: "qwen2"}


MAX_TOKENIZER_BYTES = 512 * 1024 * 1024


def read_tokenizer(folder: str | Path) -> dict[str, Any]:
    """The parsed ``tokenizer.json`` of a model folder (an InputError when there is none, or not one)."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise InputError(
            f"outputs.gguf: {Path(folder).name} has no tokenizer.json; GGUF needs the tokenizer's "
            "vocabulary; add the base's tokenizer.json or set outputs.gguf: null"
        )
    fix = "use the base's own tokenizer.json or set outputs.gguf: null"
    try:  # Gemma 3's, among the largest released, is 33 MB; a FIFO or /dev/zero here: one line, never a hang
        data = read_json(path, MAX_TOKENIZER_BYTES, "a tokenizer.json", fix)
    except InputError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: not a readable tokenizer.json ({type(e).__name__}: {str(e)[:100]}); {fix}") from None
    why = tokenizer_shape_problem(data) if isinstance(data, dict) else "not a tokenizer.json (a JSON object)"
    if why is not None:
        raise InputError(f"{path}: {why}; {fix}")
    return data


def _steps(p: Any) -> list[dict[str, Any]]:
    """The steps of a normalizer or pre-tokenizer (a Sequence's, or the one), ``[]`` for none."""
    if not isinstance(p, dict):
        return []
    key = "pretokenizers" if "pretokenizers" in p else "normalizers"
    return list(p.get(key, [])) if p.get("type") == "Sequence" else [p]


def pre_name(p: dict[str, Any]) -> str | None:
    """llama.cpp's name for a byte-level pre-tokenizer (None: not byte-level, or a regex llama.cpp may not know).

    Example:
        >>> pre_name({"type": "ByteLevel"})
        'gpt-2'
    """
    steps = _steps(p)
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        return _PRE_REGEX.get(steps[0].get("pattern", {}).get("Regex", ""))
    return None


def _kinds(p: Any) -> str:
    """A normalizer's or pre-tokenizer's step types, for a refusal: ``"Prepend+Replace"`` (``"no"`` for none)."""
    return "+".join(str(s.get("type")) for s in _steps(p)) or "no"


def _is_spm(tok: dict[str, Any]) -> bool:
    """A SentencePiece-style tokenizer.json: Unigram, or BPE over ``▁`` (Metaspace, or a Replace(" ", "▁"))."""
    if tok.get("model", {}).get("type") == "Unigram":
        return True
    kinds = [s.get("type") for s in _steps(tok.get("pre_tokenizer")) + _steps(tok.get("normalizer"))]
    replaced = any(s.get("type") == "Replace" and s.get("content") == SPACE for s in _steps(tok.get("normalizer")))
    return "Metaspace" in kinds or replaced or bool(tok.get("model", {}).get("byte_fallback"))


def tokenizer_model(tok: dict[str, Any]) -> str:
    """llama.cpp's tokenizer model for a tokenizer.json: ``"gpt2"`` (byte-level BPE) or ``"llama"`` (SPM); an
    InputError line for neither, or for a SentencePiece-style one llama.cpp would tokenize differently.

    Example:
        >>> tokenizer_model({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "ByteLevel"}})
        'gpt2'
    """
    model = tok.get("model", {})
    if model.get("type") == "BPE" and pre_name(tok.get("pre_tokenizer") or {}) is not None:
        return "gpt2"
    if _is_spm(tok):
        why = spm_refusal(tok)
        if why is not None:
            raise InputError(
                f"outputs.gguf: this SentencePiece-style tokenizer.json cannot be written for llama.cpp: {why}{_NULL}"
            )
        return "llama"
    kinds = _kinds(tok.get("pre_tokenizer"))
    raise InputError(
        f"outputs.gguf: only byte-level BPE tokenizers (Llama 3, Qwen2, SmolLM2, GPT-2) and "
        f"SentencePiece-style BPE with byte fallback (Llama 2, Mistral v0.1, Gemma, Phi-3) are written; "
        f"this tokenizer.json is {model.get('type')} with {kinds} pre-tokenizer, not a pre-tokenizer "
        f"llama.cpp names{_NULL}"
    )


def spm_space_prefix(tok: dict[str, Any]) -> bool | None:
    """llama.cpp's ``add_space_prefix`` for a SentencePiece-style layout, None for a layout it does not reproduce.

    Llama 2 / Mistral v0.1 / Phi-3: normalizer Prepend("▁") + Replace(" ", "▁") (True); Gemma: Replace alone (its
    Split at " " then finds no space), or a Metaspace pre-tokenizer with ``prepend_scheme`` "never" (False). Why
    not Metaspace "always"/"first": it does not prefix text that already starts with a space, llama.cpp does
    (``" hi"``: ``▁hi`` there, ``▁▁hi`` here).

    Example:
        >>> spm_space_prefix({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}})
        False
    """
    norm, pre = _steps(tok.get("normalizer")), _steps(tok.get("pre_tokenizer"))
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    if replace in norm:  # Gemma's Split at " " after the normalizer has replaced every " ": nothing to split
        pre = [s for s in pre if not (s.get("type") == "Split" and s.get("pattern") == {"String": " "})]
    if not pre and norm in ([{"type": "Prepend", "prepend": SPACE}, replace], [replace]):
        return len(norm) == 2
    if not norm and len(pre) == 1 and pre[0].get("type") == "Metaspace" and pre[0].get("replacement") == SPACE:
        scheme = pre[0].get("prepend_scheme", "always" if pre[0].get("add_prefix_space", True) else "never")
        return False if scheme == "never" else None
    return None


def _layout(tok: dict[str, Any]) -> str:
    """The normalizer and pre-tokenizer types, for a refusal: ``"Prepend+Replace normalizer, no pre-tokenizer"``."""
    pre = _steps(tok.get("pre_tokenizer"))
    schemes = [s.get("prepend_scheme") for s in pre if s.get("type") == "Metaspace" and s.get("prepend_scheme")]
    head = f"{_kinds(tok.get('normalizer'))} normalizer, {_kinds(tok.get('pre_tokenizer'))} pre-tokenizer"
    return head + (f" (prepend_scheme {schemes[0]!r})" if schemes else "")


def tokenizer_shape_problem(tok: dict[str, Any]) -> str | None:
    """What in a tokenizer.json is not the shape the ``tokenizers`` library writes (``None``: nothing), for the
    parts the GGUF vocabulary is built from: a BPE ``model.vocab`` of token -> integer id, ``model.merges`` of
    ``"a b"`` strings or ``[a, b]`` pairs, ``added_tokens`` of objects with an ``id`` and a ``content`` string.
    Each was an internal error at GGUF export (``merges: [1, 2]``: ValueError; ``vocab: [...]``: AttributeError).

    Example:
        >>> tokenizer_shape_problem({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b", ["a", "b"]]}})
        >>> tokenizer_shape_problem({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})
        "model.merges[0] is 1, not 'a b' or ['a', 'b']"
    """
    model = tok.get("model")
    if not isinstance(model, dict):
        return f"model is {repr(model)[:40]}, not an object"
    added = tok.get("added_tokens", [])
    if not isinstance(added, list):
        return f"added_tokens is {repr(added)[:40]}, not a list"
    for i, a in enumerate(added):
        if not (isinstance(a, dict) and isinstance(a.get("content"), str) and "id" in a):
            return f"added_tokens[{i}] is {repr(a)[:60]}, not an object with an id and a content string"
    if model.get("type") != "BPE":  # another model (Unigram's vocab is a list): tokenizer_model names it
        return None
    vocab, merges = model.get("vocab", {}), model.get("merges", [])
    if not isinstance(vocab, dict) or not all(isinstance(t, str) for t in vocab):
        return f"model.vocab is {repr(vocab)[:40]}, not an object of token: id"
    if not isinstance(merges, list):
        return f"model.merges is {repr(merges)[:40]}, not a list"
    for i, m in enumerate(merges):
        pair = m.split(" ") if isinstance(m, str) else m
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
            return f"model.merges[{i}] is {repr(m)[:40]}, not 'a b' or ['a', 'b']"
    return None


def chat_template_problem(config: dict[str, Any]) -> str | None:
    """What is wrong with a tokenizer_config.json's ``chat_template`` for a GGUF (``None``: nothing, or none):
    not text or a list of ``{"name", "template"}`` texts (a list of numbers was an internal TypeError), or text
    Jinja cannot parse (llama.cpp would fail on it at chat time).

    Example:
        >>> chat_template_problem({"chat_template": "{{ messages[0].content }}"}) is None
        True
        >>> chat_template_problem({"chat_template": "{% if %}"})[:45]
        'chat_template is not a Jinja template llama.c'
    """
    value = config.get("chat_template")
    if value is None:
        return None
    if isinstance(value, list):
        ok = all(
            isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
        )
        if not ok:
            return f"chat_template is {repr(value)[:60]}, not a list of {{name, template}} texts"
        templates = [(f"chat_template {t['name']!r}", t["template"]) for t in value]
    elif isinstance(value, str):
        templates = [("chat_template", value)]
    else:
        return f"chat_template is {repr(value)[:40]}, not a template (text)"
    # imported only when there is a template: transformers costs a GGUF export ~20 MB of peak memory otherwise
    from jinja2 import TemplateSyntaxError

    # transformers' own environment: its `generation` tag and loop controls are templates' too
    from transformers.utils.chat_template_utils import _compile_jinja_template

    for what, text in templates:
        try:
            _compile_jinja_template(text)
        except TemplateSyntaxError as e:
            return f"{what} is not a Jinja template llama.cpp can read ({e.message}, line {e.lineno})"
    return None


def _merge_pairs(model: dict[str, Any]) -> list[tuple[str, str]]:
    """The merges as pairs (tokenizer.json writes ``"a b"`` or ``["a", "b"]``)."""
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else (m[0], m[1]) for m in model.get("merges", [])]


def _first_rank(pairs: list[tuple[str, str]]) -> dict[str, int]:
    """Each merge product -> the rank of the first merge producing it."""
    ranks: dict[str, int] = {}
    for r, (a, b) in enumerate(pairs):
        ranks.setdefault(a + b, r)
    return ranks


def spm_refusal(tok: dict[str, Any]) -> str | None:
    """Why llama.cpp's SPM tokenizer would not tokenize like this tokenizer.json (None: it would), one phrase.

    Example:
        >>> spm_refusal({"model": {"type": "Unigram"}}).startswith("a Unigram model")
        True
    """
    model = tok.get("model", {})
    if model.get("type") == "Unigram":
        return (
            "a Unigram model (llama.cpp's SPM tokenizer merges pairs by score, a Unigram model picks the "
            "most likely segmentation: llama.cpp's 't5' tokenizer model, with the normalizer's "
            "precompiled_charsmap, is not written here)"
        )
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return f"a {model.get('type')} model without byte_fallback (llama.cpp's SPM falls back to <0xXX> bytes)"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"BPE {key}={model[key]!r} (llama.cpp's SPM tokenizer has none)"
    if model.get("ignore_merges"):
        return "BPE ignore_merges (whole-word vocabulary lookups llama.cpp's SPM tokenizer does not do)"
    if spm_space_prefix(tok) is None:
        written = "(written: normalizer Prepend+Replace or Replace alone, or Metaspace with prepend_scheme 'never')"
        pre = _steps(tok.get("pre_tokenizer"))
        if not _steps(tok.get("normalizer")) and [s.get("type") for s in pre] == ["Metaspace"]:
            return (
                f"{_layout(tok)}: it adds no '\u2581' to text that starts with a space, llama.cpp's "
                f"add_space_prefix adds one to any text {written}"
            )
        return (
            f"{_layout(tok)}: llama.cpp's SPM tokenizer only replaces spaces by '\u2581' and may prefix one {written}"
        )
    vocab: dict[str, int] = model["vocab"]
    inner = [t for t in vocab if SPACE in t[1:]]
    if inner and any(s.get("type") == "Metaspace" and s.get("split", True) for s in _steps(tok.get("pre_tokenizer"))):
        return f"Metaspace splits at '\u2581' but token {inner[0]!r} spans one (llama.cpp does not split)"
    missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in vocab]
    if missing:
        return f"{len(missing)} of the 256 byte tokens are missing ({missing[0]}...; llama.cpp falls back to them)"
    pairs = _merge_pairs(model)
    known = set(pairs)
    added = {a["content"] for a in tok.get("added_tokens", [])}
    for t in _first_rank(pairs):  # llama.cpp forms t from any two adjacent tokens; transformers from merges only
        for i in range(1, len(t)):
            if t[:i] in vocab and t[i:] in vocab and (t[:i], t[i:]) not in known:
                return (
                    f"token {t!r} can be split into {t[:i]!r} + {t[i:]!r}, which is not a merge (llama.cpp "
                    "would merge them; transformers' SentencePiece conversion lists every such split)"
                )
    products = {a + b for a, b in pairs}
    for t in vocab:  # no merge makes t, yet llama.cpp would make it from two adjacent tokens
        if t in products or t in added or _BYTE.fullmatch(t):
            continue
        for i in range(1, len(t)):
            if t[:i] in vocab and t[i:] in vocab:
                return (
                    f"token {t!r} is no merge's product but {t[:i]!r} + {t[i:]!r} (llama.cpp would merge "
                    "them, transformers not)"
                )
    return None


def spm_vocab(gguf: Any, tok: dict[str, Any], n_vocab: int) -> tuple[list[str], list[float], list[Any]]:
    """(tokens, scores, token types) by id of a SentencePiece-style BPE tokenizer.json that :func:`spm_refusal`
    accepts, for llama.cpp's SPM: the scores and types docs/formats.md lists (why ``-rank`` of the first merge
    producing the token: the module docstring), padding ids past the tokenizer's up to the model's ``n_vocab``.
    """
    model = tok["model"]
    ranks = _first_rank(_merge_pairs(model))
    added, by_id = _tokens_by_id(tok)
    unk = model["vocab"].get(model.get("unk_token")) if model.get("unk_token") else None
    tokens, scores, types = [], [], []
    for i in range(max(n_vocab, len(by_id))):
        t = by_id.get(i)
        if t is None:  # ids the model has but the tokenizer lacks (padded embeddings): llama.cpp's converter's
            t, kind, score = f"[PAD{i}]", gguf.TokenType.UNUSED, -10000.0
        elif i == unk:
            kind, score = gguf.TokenType.UNKNOWN, 0.0
        elif i in added and added[i].get("special"):
            kind, score = gguf.TokenType.CONTROL, 0.0
        elif i in added and not (SPACE in t and model["vocab"].get(t) == i):
            kind, score = gguf.TokenType.USER_DEFINED, -1000.0
        elif _BYTE.fullmatch(t):
            kind, score = gguf.TokenType.BYTE, 0.0
        else:  # a piece; also an added "▁▁" (Gemma's whitespace runs) that is a piece: llama.cpp renders
            # USER_DEFINED text as it is, NORMAL with "▁" as spaces (transformers' decoder does); merges reach both
            kind, score = gguf.TokenType.NORMAL, -float(ranks[t]) if t in ranks else 0.0
        tokens.append(t)
        scores.append(score)
        types.append(kind)
    return tokens, scores, types


def _tokens_by_id(tok: dict[str, Any]) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """The added tokens by id, and every token (the model's vocabulary, then the added ones) by id."""
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    return added, {i: t for t, i in tok["model"]["vocab"].items()} | {i: a["content"] for i, a in added.items()}


def bpe_vocab(gguf: Any, tok: dict[str, Any], n_vocab: int) -> tuple[list[str], list[Any]]:
    """(tokens by id, token types) of a byte-level BPE tokenizer.json (padding ids: ``[PAD<id>]``, USER_DEFINED)."""
    added, by_id = _tokens_by_id(tok)
    tokens, types = [], []
    for i in range(max(n_vocab, len(by_id))):
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        if i in added:
            kind = "CONTROL" if added[i].get("special") else "USER_DEFINED"
        else:  # ids the model has but the tokenizer lacks (padded embeddings): llama.cpp's filler, USER_DEFINED
            kind = "NORMAL" if i in by_id else "USER_DEFINED"
        types.append(gguf.TokenType[kind])
    return tokens, types


# llama.cpp's vocabulary loader gives these tokens Phi-3's strip attributes when general.name (lowercased) holds
# "phi-3" or "phi3", and fails to load the file when one of them is not in the vocabulary (llama-vocab.cpp)
_PHI3_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


def name_refusal(name: str, tok: dict[str, Any]) -> str | None:
    """None when llama.cpp loads a GGUF called ``name`` with this tokenizer.json, else one line: a name holding
    ``phi-3`` / ``phi3`` makes llama.cpp look up Phi-3's special tokens, and a vocabulary without one of them
    (e.g. a Phi-3 family model with another tokenizer) cannot be loaded.

    Example:
        >>> name_refusal("phi3", {"model": {"vocab": {"a": 0}}, "added_tokens": []})[:52]
        "outputs.gguf: general.name 'phi3' makes llama.cpp lo"
    """
    if not any(k in name.lower() for k in ("phi-3", "phi3")):
        return None
    vocab = set((tok.get("model") or {}).get("vocab") or {}) | {a.get("content") for a in tok.get("added_tokens", [])}
    missing = [t for t in _PHI3_TOKENS if t not in vocab]
    if not missing:
        return None
    return (
        f"outputs.gguf: general.name {name!r} makes llama.cpp look up Phi-3's special tokens "
        f"{', '.join(_PHI3_TOKENS)}, and this tokenizer lacks {', '.join(missing)}: llama.cpp would fail to "
        "load the file; set outputs.gguf: null, or write the GGUF under a name without 'phi3' / 'phi-3' "
        "(write_gguf(name=...))"
    )


def vocab_size_refusal(tok: dict[str, Any], n_vocab: int) -> str | None:
    """Why a tokenizer.json cannot go with a model of ``n_vocab`` embedding rows (``None``: it can): a token id
    at or past ``n_vocab`` (llama.cpp reads the row of every id it emits: a GGUF with more tokens than rows fails
    to load or reads past the table; llama.cpp's own converter refuses it too), or an id that is no integer.

    Example:
        >>> tok = {"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 8, "content": "<x>"}]}
        >>> vocab_size_refusal(tok, 9) is None, vocab_size_refusal(tok, 4)
        (True, "tokenizer.json has token id 8 ('<x>'), past the model's 4 embedding rows (config.json vocab_size)")
    """
    model = tok.get("model") or {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    pairs = list(vocab.items()) if isinstance(vocab, dict) else []
    pairs += [(a.get("content"), a.get("id")) for a in tok.get("added_tokens") or [] if isinstance(a, dict)]
    bad = next(((t, i) for t, i in pairs if isinstance(i, bool) or not isinstance(i, int) or i < 0), None)
    if bad is not None:
        return f"tokenizer.json gives token {str(bad[0])[:40]!r} the id {str(bad[1])[:40]!r}, not an integer >= 0"
    token, top = max(pairs, key=lambda p: p[1], default=(None, -1))
    if top < n_vocab:
        return None
    return (
        f"tokenizer.json has token id {top} ({str(token)[:40]!r}), past the model's {n_vocab} embedding rows "
        "(config.json vocab_size)"
    )


def _template_sources(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every chat template gguf's ``SpecialVocab`` copies into the GGUF, as ``{"chat_template": ...}`` with its
    file: ``tokenizer_config.json``'s, ``chat_template.json``'s, and ``chat_template.jinja`` with
    ``additional_chat_templates/*.jinja`` (transformers 5 saves templates there). Each file is read as a regular
    file within a bound (a FIFO or an oversized file: one line, never a hang)."""
    found = []
    for name in ("tokenizer_config.json", "chat_template.json"):
        config = model_json_object(folder / name)
        if config is not None:
            found.append((folder / name, config))
    jinja = [folder / "chat_template.jinja", *sorted((folder / "additional_chat_templates").glob("*.jinja"))]
    for path in [p for p in jinja if p.exists()]:
        raw = read_regular(path, 1 << 20, "the chat template", "use the base's own chat template")
        try:
            text: Any = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw  # not text: chat_template_problem says so
        found.append((path, {"chat_template": text}))
    return found


def check_vocab(folder: str | Path, name: str, n_vocab: int) -> tuple[dict[str, Any], str]:
    """``folder``'s tokenizer.json and llama.cpp's tokenizer model of it (``"gpt2"`` or ``"llama"``), or the
    :class:`InputError` :func:`add_vocab` would raise: a chat template a GGUF could not carry
    (:func:`chat_template_problem`), a tokenizer.json llama.cpp would tokenize differently, the GGUF's
    ``general.name`` with it (:func:`name_refusal`), a token id past the model's ``n_vocab`` embedding rows
    (:func:`vocab_size_refusal`).
    """
    folder = Path(folder)
    for where, config in _template_sources(folder):
        if (why := chat_template_problem(config)) is not None:
            raise InputError(f"outputs.gguf: {where}: {why}; use the base's own {where.name}{_NULL}")
    tok = read_tokenizer(folder)
    model = tokenizer_model(tok)
    if (why := name_refusal(name, tok)) is not None:
        raise InputError(why)
    if (why := vocab_size_refusal(tok, n_vocab)) is not None:
        raise InputError(
            f"outputs.gguf: {why}; llama.cpp could not use such a GGUF: export a checkpoint whose tokenizer and "
            f"embeddings agree (resize the embeddings, or use the tokenizer the model was trained with){_NULL}"
        )
    return tok, model


def _special(gguf: Any, writer: Any, folder: Path, n_tokens: int, merges: bool) -> None:
    """Special ids, add_bos/add_eos and the chat template, read by gguf's SpecialVocab."""
    quiet = logging.getLogger("gguf.vocab")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its TemplateProcessing guesses warn on harmless templates
    try:
        special = gguf.SpecialVocab(folder, load_merges=merges, n_vocab=n_tokens)
        if "bos" not in special.add_special_token:  # explicit: llama.cpp's default depends on the tokenizer model
            from tokenizers import Tokenizer

            ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode("a").ids
            special.add_special_token["bos"] = bool(ids) and ids[0] == special.special_token_ids.get("bos")
        special.add_to_gguf(writer, quiet=True)
    finally:
        quiet.setLevel(level)


def add_vocab(gguf: Any, writer: Any, folder: str | Path, n_vocab: int, pre: str | None, name: str) -> None:
    """Write the ``tokenizer.ggml.*`` keys (and the chat template) of ``folder``'s tokenizer.json with the ``gguf``
    module's ``writer``, for a model of ``n_vocab`` embedding rows, or raise :func:`check_vocab`'s InputError.
    ``pre`` (byte-level BPE only) replaces the ``tokenizer.ggml.pre`` read from tokenizer.json; ``name`` is the
    GGUF's ``general.name``, which llama.cpp reads with the vocabulary (:func:`name_refusal`).
    """
    folder = Path(folder)
    tok, model = check_vocab(folder, name, n_vocab)
    scores: list[float] | None = None
    if model == "gpt2":
        tokens, types = bpe_vocab(gguf, tok, n_vocab)
        pre = pre or pre_name(tok.get("pre_tokenizer") or {})
    else:
        tokens, scores, types = spm_vocab(gguf, tok, n_vocab)
        pre = "default"
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    if scores is not None:
        writer.add_token_scores(scores)
    writer.add_token_types(types)
    if model == "llama":
        writer.add_add_space_prefix(bool(spm_space_prefix(tok)))  # explicit: llama.cpp's SPM default is True
    _special(gguf, writer, folder, len(tokens), merges=model == "gpt2")

"""Engine profiles: the numbers that make the simulator behave like a given deployment.

Time costs follow the usual first-order model of a transformer server:
a prefill step costs ``prefill_base_ms + prefill_per_token_ms * tokens`` (compute
bound, linear in prompt tokens); a decode step costs ``decode_base_ms +
decode_per_seq_ms * batch`` (memory bound: reading the weights dominates, and each
extra sequence adds its KV reads). docs/simulator.md explains the defaults.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping, Sequence, Set
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any

from tailreplay.declared import Choice, Setting
from tailreplay.errors import InputError

__all__ = [
    "CONTEXT_HEADROOM",
    "DEFAULT_PROFILE",
    "KV_LONGEST",
    "PROFILES",
    "SIM_ARG",
    "SIM_PROFILE",
    "EngineProfile",
    "departures",
    "fit_context",
    "load_profile",
    "overrides_in",
    "profile",
    "profile_file",
]


@dataclass(frozen=True, slots=True)
class EngineProfile:
    name: str
    served_model: str
    max_num_seqs: int
    """Most sequences running at once (vLLM's --max-num-seqs)."""
    kv_tokens: int
    """KV-cache budget in tokens: a running sequence holds its prompt plus its output."""
    max_model_len: int
    """Context length: prompt + output may not exceed it."""
    max_batched_tokens: int
    """Prefill tokens one step may process; longer prompts are chunked across steps."""
    prefill_base_ms: float
    prefill_per_token_ms: float
    decode_base_ms: float
    decode_per_seq_ms: float
    queue_limit: int
    """Waiting requests beyond this get 429."""
    output_mean: float
    """Mean of the Gamma distribution output lengths are drawn from (when not forced)."""
    output_shape: float
    """Shape of that Gamma: 1 is exponential, larger is tighter around the mean."""
    reasoning_share: float = 0.0
    """Share of chat requests answered as a reasoning model does: thinking first."""
    reasoning_tokens: int = 32
    """Tokens such a request thinks (``reasoning_content``) before its answer."""
    prefix_caching: bool = True
    """Keep prompt blocks cached after their request, and skip the prefill of a
    cached prefix (vLLM's --enable-prefix-caching, SGLang's radix cache)."""
    block_size: int = 16
    """Tokens per KV block: the prefix cache's unit (vLLM's --block-size)."""
    spec_tokens: int = 0
    """Speculative decoding: draft tokens proposed per sequence and step (0: off). Each
    is accepted, in order until one is not, with ``spec_acceptance`` of the prompt's
    token entropy; a step costs ``SPEC_STEP_COST`` more per draft token."""
    decode_steps_ms: tuple[float, ...] = ()
    """A decode step's time at each batch size from 1, as an engine was measured
    (``sim calibrate``: the median clean gap at each size it saw enough of); past the
    last, that time and ``decode_per_seq_ms`` a sequence more. Empty: the line
    ``decode_base_ms + decode_per_seq_ms * batch``. An engine's step is not always
    that line: llama.cpp's server on a CPU decodes 4 sequences in a shorter step
    than 3."""
    first_token_late: bool = False
    """A sequence's first token comes with the step after the one that finished its
    prompt (llama.cpp's server, as its streams show), not with that step (vLLM, SGLang):
    its TTFT holds that next step too, another prompt's prefill included."""

    def __post_init__(self) -> None:
        for name in _AT_LEAST_ONE:
            value = getattr(self, name)
            if isinstance(value, int) and value < 1:
                # 0 slots or tokens a step: no request is ever served (a hang); 0 KV
                # tokens: the metrics divide by it.
                raise ValueError(f"{name} must be at least 1, not {value}")
        for name in _FINITE:
            value = getattr(self, name)
            if isinstance(value, int | float) and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number, at least 0, not {value!r}")
        for name in _POSITIVE:
            value = getattr(self, name)
            if isinstance(value, int | float) and not value > 0:
                raise ValueError(f"{name} must be above 0, not {value!r}")
        for name in _STEP_COSTS:
            if getattr(self, name) > MOST_STEP_MS:
                # A step of hours serves nothing within any replay: a profile that says
                # so is a mistake (or a fit of clocks that disagree), not an engine.
                raise ValueError(f"{name} must be at most {MOST_STEP_MS:,.0f} ms")
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {self.block_size}")
        if len(self.decode_steps_ms) > MAX_DECODE_STEPS or not all(
            math.isfinite(x) and 0 <= x <= MOST_STEP_MS for x in self.decode_steps_ms
        ):
            raise ValueError(
                f"decode_steps_ms must be at most {MAX_DECODE_STEPS:,} step times, each "
                f"a finite number of ms from 0 to {MOST_STEP_MS:,.0f}"
            )
        if not 0 <= self.spec_tokens <= MAX_SPEC_TOKENS:
            raise ValueError(f"spec_tokens must be 0..{MAX_SPEC_TOKENS}, not {self.spec_tokens}")

    def decode_ms(self, batch: int) -> float:
        steps = self.decode_steps_ms
        if not steps:
            plain = self.decode_base_ms + self.decode_per_seq_ms * batch
        elif batch <= len(steps):
            plain = steps[max(batch, 1) - 1]
        else:
            plain = steps[-1] + self.decode_per_seq_ms * (batch - len(steps))
        return plain * (1 + SPEC_STEP_COST * self.spec_tokens)

    def spec_acceptance(self, entropy_bits: float) -> float:
        """A draft token's chance of acceptance for a prompt of this token entropy:
        predictable text (repetitive, low entropy) is what a draft model guesses right.
        Linear, 0.85 at 1 bit to 0.19 at 7.6 (the entropy of unshaped synthetic
        prompts), within 0.1..0.9: EAGLE and n-gram drafts accept 0.6-0.8 on chat.

        >>> PROFILES["fast"].spec_acceptance(4.0)
        0.55
        """
        return round(min(max(0.95 - 0.1 * entropy_bits, 0.1), 0.9), 6)

    def prefill_ms(self, tokens: int) -> float:
        return self.prefill_base_ms + self.prefill_per_token_ms * tokens

    def capacity_rps(self, input_tokens: float, output_tokens: float) -> float:
        """Requests a second this engine serves at most, for requests of these mean
        lengths (none of their prompt cached): each step's cost is its prefill's plus its
        decode's (``batching.py``), so a request takes its prompt's share of full
        prefill steps and, for each output token, its share of a decode step of the
        fullest batch the sequence limit and the KV budget allow. Beyond it the queue
        grows without bound; a load near it queues long."""
        batch = min(self.max_num_seqs, self.kv_tokens / max(input_tokens + output_tokens, 1.0))
        batch = max(batch, 1.0)
        prefill = input_tokens * (
            self.prefill_per_token_ms + self.prefill_base_ms / self.max_batched_tokens
        )
        decode = output_tokens * self.decode_ms(math.floor(batch)) / math.floor(batch)
        return 1000.0 / (prefill + decode)

    def with_overrides(self, **overrides: Any) -> EngineProfile:
        """A copy with the given parameters changed; None values are ignored."""
        known = {f.name for f in fields(self)}
        bad = set(overrides) - known
        if bad:
            raise ValueError(f"unknown profile parameters: {', '.join(sorted(bad))}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_AT_LEAST_ONE = ("max_num_seqs", "kv_tokens", "max_model_len", "max_batched_tokens")
_STEP_COSTS = ("prefill_base_ms", "prefill_per_token_ms", "decode_base_ms", "decode_per_seq_ms")
MOST_STEP_MS = 3_600_000.0
"""A step cost (base, or per token or sequence) of at most an hour."""
_FINITE = (*_STEP_COSTS, "output_mean", "output_shape", "reasoning_share")
_POSITIVE = ("output_mean", "output_shape")
"""The output lengths are a Gamma draw of this mean and shape: 0 divides by zero."""

MAX_DECODE_STEPS = 4096
"""Batch sizes a profile's measured decode steps cover at most."""
MAX_SPEC_TOKENS = 16
"""Draft tokens per step at most (EAGLE and n-gram drafts use 2-8)."""
SPEC_STEP_COST = 0.1
"""A decode step's extra cost per draft token (drafting, and verifying k + 1 tokens)."""

PROFILES: dict[str, EngineProfile] = {
    # A Llama-3-8B-class model in bf16 on one 24 GB GPU (L4 / A10G / RTX 4090 class):
    # 16 GB of weights read per decode step at ~600 GB/s ≈ 27 ms; ~6 GB left for KV
    # at 128 KiB per token (GQA) ≈ 48k tokens; prefill ~10k tokens/s.
    "default": EngineProfile(
        name="default",
        served_model="sim-llama-3-8b",
        max_num_seqs=48,
        kv_tokens=49_152,
        max_model_len=8_192,
        max_batched_tokens=2_048,
        prefill_base_ms=12.0,
        prefill_per_token_ms=0.1,
        decode_base_ms=27.0,
        decode_per_seq_ms=0.25,
        queue_limit=256,
        output_mean=200.0,
        output_shape=1.5,
        prefix_caching=True,
        block_size=16,
    ),
    # The same model on one 80 GB H100: ~3.3 TB/s (≈ 6 ms a step), ~60 GB of KV,
    # prefill ~80k tokens/s.
    "fast": EngineProfile(
        name="fast",
        served_model="sim-llama-3-8b",
        max_num_seqs=256,
        kv_tokens=480_000,
        max_model_len=8_192,
        max_batched_tokens=8_192,
        prefill_base_ms=4.0,
        prefill_per_token_ms=0.0125,
        decode_base_ms=6.0,
        decode_per_seq_ms=0.04,
        queue_limit=1_024,
        output_mean=200.0,
        output_shape=1.5,
        prefix_caching=True,
        block_size=16,
    ),
}


DEFAULT_PROFILE = "fast"
"""What ``tailreplay sim`` and ``replay``'s built-in target run unless told: production
traces like the shipped sample need an H100-class deployment."""

SIM_PROFILE: Setting[str] = Setting(
    "--sim-profile",
    DEFAULT_PROFILE,
    "Profile of the built-in simulator when there is no --target (as `tailreplay "
    "sim --profile`; fast: an H100-class deployment, which traces like the shipped peak "
    "need). Its context and KV cache are sized to the trace's longest request.",
    kind=Choice(tuple(sorted(PROFILES))),
    show_default=True,
)
"""The built-in simulator's profile, for the commands that start one for a replay."""
SIM_ARG: Setting[None] = Setting("--sim-arg", None, multiple=True)
"""An argument for the built-in simulator, as ``tailreplay sim`` takes it (each command
says in its help how it is used: ``replace(SIM_ARG, help=...)``)."""


def profile(name: str) -> EngineProfile:
    """A built-in profile by name, or a profile file (JSON, as ``tailreplay sim
    calibrate`` writes) by its path."""
    if name in PROFILES:
        return PROFILES[name]
    if os.path.isfile(name):
        return load_profile(name)
    known = ", ".join(PROFILES)
    raise ValueError(f"unknown profile {name!r}; known: {known}, or a profile's JSON file")


MAX_PROFILE_BYTES = 1 << 20
"""A profile file is a few kB; a larger one is not one."""


def load_profile(path: str | os.PathLike[str]) -> EngineProfile:
    """The profile a JSON file holds: an object with every ``EngineProfile`` field (other
    keys, such as a calibration's account of itself, are ignored). Raises InputError,
    naming the file, for one that cannot be read or is not a profile."""
    return profile_file(path)[0]


def profile_file(path: str | os.PathLike[str]) -> tuple[EngineProfile, dict[str, Any]]:
    """``load_profile``'s profile and the whole JSON object it was read from (its other
    keys: ``sim calibrate``'s ``fitted`` and ``calibration``), from one bounded read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would wait for a writer
            raise ValueError("not a regular file (a pipe, a device or a directory)")
        with open(path, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
        if len(raw) > MAX_PROFILE_BYTES:
            raise ValueError(f"larger than {MAX_PROFILE_BYTES:,} bytes")
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        values = {
            f.name: _field_value(f.name, f.type, data, f.default) for f in fields(EngineProfile)
        }
        return EngineProfile(**values), data
    except RecursionError:
        raise InputError(f"{os.fspath(path)}: not a usable profile: nested too deeply") from None
    except (OSError, ValueError, TypeError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InputError(f"{os.fspath(path)}: not a usable profile: {why}") from None


def departures(path: str | os.PathLike[str], overrides: Mapping[str, Any]) -> list[str]:
    """What ``overrides`` change of the fields a calibrated profile (``sim calibrate``'s
    file at ``path``) fitted, one line each: a twin run so is outside what it was
    calibrated on (another slot count, another model, other step costs). Empty for a
    file without a calibration, and for an override equal to the fitted value (as the
    studies pass step times scaled by 1).

    The lines say so and do not refuse: a what-if on purpose is a use of a twin.
    """
    fitted_profile, data = profile_file(path)
    fitted = data.get("fitted")
    if not isinstance(fitted, dict):
        return []
    lines = []
    for name, value in overrides.items():
        was = getattr(fitted_profile, name, None)
        if name not in fitted or value is None or _same(was, value):
            continue
        what = _DEPARTURES.get(name, "outside what the calibration measured")
        lines.append(
            f"{os.fspath(path)} was fitted to {name} {was!r}; running with {value!r}: {what}"
        )
    return lines


def overrides_in(args: Sequence[str]) -> dict[str, Any]:
    """The profile fields a simulator command line sets (``--max-num-seqs=8`` or
    ``--max-num-seqs 8``), typed as the field is; what is no field, or no value of its
    type, is left to the simulator's own parser to refuse.

    An option without ``=`` takes the next argument as its value, whatever it is, as
    the simulator's parser does (``--served-model --max-num-seqs=8`` names a model).

    >>> overrides_in(["--max-num-seqs=8", "--seed", "3", "--served-model", "m"])
    {'max_num_seqs': 8, 'served_model': 'm'}
    >>> overrides_in(["--served-model", "--max-num-seqs=8"])
    {'served_model': '--max-num-seqs=8'}
    """
    kinds = {f.name: _CASTS.get(str(f.type)) for f in fields(EngineProfile)}
    found: dict[str, Any] = {}
    rest = iter(args)
    for arg in rest:
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--"):
            continue
        if not eq and flag not in SIM_FLAGS:
            value = next(rest, "")
        cast = kinds.get(flag[2:].replace("-", "_"))
        if cast is None:
            continue
        try:
            found[flag[2:].replace("-", "_")] = cast(value)
        except ValueError:
            continue
    return found


SIM_FLAGS = frozenset({"--no-prefix-cache"})
"""``tailreplay sim``'s options that take no value (``sim/settings.py``)."""


_CASTS: dict[str, Any] = {"str": str, "int": int, "float": float}


def _same(was: object, value: object) -> bool:
    if isinstance(was, float) and isinstance(value, int | float) and not isinstance(value, bool):
        return math.isclose(was, value, rel_tol=1e-4)
    return was == value


_DEPARTURES = {
    "max_num_seqs": "another slot count than the engine's, whose step costs at batches "
    "past the calibration's are extrapolated",
    "served_model": "the costs are those of the model it was calibrated on",
}


_LARGEST_INT = 2**62
"""No profile count is near this; larger ones do not convert to a float (OverflowError)."""

_KINDS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
}


def _field_value(name: str, kind: Any, data: dict[str, Any], default: Any) -> Any:
    """``data[name]``, checked against the field's type (and positive, for a number)."""
    if name not in data:
        if default is MISSING:
            raise ValueError(f"no {name!r}")
        return default
    value = data[name]
    if str(kind) == "tuple[float, ...]":
        if not isinstance(value, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value
        ):
            raise ValueError(f"{name!r} must be a list of numbers, not {value!r}"[:200])
        return tuple(float(x) for x in value)
    allowed = _KINDS[str(kind)]
    if not isinstance(value, allowed) or (bool not in allowed and isinstance(value, bool)):
        raise ValueError(f"{name!r} must be a {kind}, not {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, int) and value > _LARGEST_INT:
            digits = len(str(value))
            raise ValueError(f"{name!r} must be at most {_LARGEST_INT:,}, not {digits} digits")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name!r} must be a finite number, at least 0, not {value!r}")
        return float(value) if kind == "float" else value
    return value


CONTEXT_HEADROOM = 1.1
"""A context sized to a trace holds its longest request and 10% more (rounded up to
1,024 tokens): room for a target tokenizer that counts a little more than the recording."""

KV_LONGEST = 4
"""A KV cache sized to a trace holds at least this many of its longest requests, so one
long request cannot take the whole cache and hold every other behind it."""


def fit_context(
    p: EngineProfile, longest: int | None, keep: Set[str] = frozenset()
) -> EngineProfile:
    """``p`` with a context (``max_model_len``) and a KV budget (``kv_tokens``) that serve a
    request of ``longest`` tokens (prompt + output); they only grow, and fields named in
    ``keep`` (the user's own overrides) stay as they are.

    >>> fit_context(profile("fast"), 126_000).max_model_len
    139264
    """
    context = p.max_model_len
    if longest is not None and "max_model_len" not in keep:
        wanted = math.ceil(longest * CONTEXT_HEADROOM / 1024) * 1024
        context = max(context, wanted)
    kv = p.kv_tokens
    if "kv_tokens" not in keep:
        kv = max(kv, KV_LONGEST * context)
    return replace(p, max_model_len=context, kv_tokens=kv)

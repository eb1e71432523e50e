"""What a serving run is asked to do: token-length distributions and the engine's knobs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardline.basics.units import check_real, check_whole, short
from shardline.errors import InputError
from shardline.ops.einsum import check_size
from shardline.strategies.pp import MAX_STAGES

__all__ = [
    "Lengths",
    "ServeConfig",
    "parse_lengths",
    "spec_tokens_per_step",
    "check_tokens",
    "BLOCK_TOKENS",
    "MAX_TOKENS",
    "MAX_RATE_PER_S",
    "MAX_SPEC_K",
    "MAX_BATCH",
    "check_serving_rate",
    "as_lengths",
]

MAX_RATE_PER_S = 1e9  # requests per second (serve and the serving search)
MAX_SPEC_K = 1024  # draft tokens per step
MAX_BATCH = 1_000_000  # sequences per engine step
LENGTH_KINDS = ("fixed", "exponential", "uniform")

BLOCK_TOKENS = 16  # paged KV: tokens per block (vLLM's default block size)
# The most tokens of one request's prompt or output: 100 times the longest context windows
# (10 million tokens), so that every length a model can take is accepted, and none whose
# expectations overflow a float.
MAX_TOKENS = 1_000_000_000
_QUADRATURE = (np.arange(64) + 0.5) / 64  # midpoints for expectations over a distribution


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: "fixed" (`mean`), "exponential" (`mean`) or "uniform"
    (`low`..`high`, mean their midpoint)."""

    kind: str
    mean: float
    low: float = 0.0
    high: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise InputError(
                f"a token-length distribution is one of {', '.join(LENGTH_KINDS)}, got "
                f"{short(self.kind)}"
            )
        _tokens(self.mean, "token length")
        if self.kind == "uniform" and _tokens(self.high, "token length") < _tokens(
            self.low, "token length"
        ):
            raise InputError(f"uniform:LOW-HIGH needs LOW <= HIGH, got {self.low}-{self.high}")

    def quantile(self, q: object) -> np.ndarray:
        """The length at probability `q` (array), at least one token."""
        u = np.asarray(q, dtype=float)
        if self.kind == "fixed":
            x = np.full_like(u, self.mean)
        elif self.kind == "exponential":
            x = -self.mean * np.log1p(-np.minimum(u, 1 - 1e-12))
        else:
            x = self.low + (self.high - self.low) * u
        return np.maximum(x, 1.0)

    def expect(self, f: object) -> float:
        """E[f(L)] by the midpoint rule over 64 quantiles (exact for a fixed length)."""
        values = f(self.quantile(_QUADRATURE))  # type: ignore[operator]
        return float(np.mean(values))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` whole-token lengths."""
        return np.maximum(np.rint(self.quantile(rng.random(n))), 1.0)

    def label(self) -> str:
        if self.kind == "fixed":
            return f"{self.mean:g}"
        if self.kind == "exponential":
            return f"exp:{self.mean:g}"
        return f"uniform:{self.low:g}-{self.high:g}"


def _count(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a number of tokens") from None
    return _tokens(value, what, text)


def _tokens(value: object, what: str, given: object = None) -> float:
    """A number of tokens: a real, finite number of at least 1 and at most MAX_TOKENS."""
    shown = short(value if given is None else given)
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"{what}: {shown} is not a number of tokens")
    if not value >= 1 or value == math.inf:
        raise InputError(f"{what}: {shown} must be at least 1 token")
    if value > MAX_TOKENS:  # an int past a float's range included
        number = f"{float(value):g}" if value <= 1.7e308 else shown
        raise InputError(f"{what}: {number} tokens is more than the limit of {MAX_TOKENS:,}")
    return float(value)


def check_serving_rate(value: object) -> float:
    """Requests per second: positive, finite and below MAX_RATE_PER_S."""
    rate = check_real(value, "--rate")
    if not 0 < rate < MAX_RATE_PER_S:
        raise InputError(f"--rate must be positive and below {MAX_RATE_PER_S:g} per second")
    return rate


def as_lengths(value: object, what: str) -> Lengths:
    """A Lengths, or a number of tokens as a fixed length (the API's `input_tokens=2000`)."""
    if isinstance(value, Lengths):
        return value
    if isinstance(value, str):
        return parse_lengths(value, what)
    return Lengths("fixed", _tokens(value, what))


def check_tokens(value: float, what: str) -> float:
    """`value` if it is at most MAX_TOKENS, else an InputError that states the limit."""
    if value > MAX_TOKENS:
        raise InputError(f"{what}: {value:g} tokens is more than the limit of {MAX_TOKENS:,}")
    return value


def parse_lengths(text: str, what: str) -> Lengths:
    """`2000` (fixed), `exp:2000` (exponential, mean 2000) or `uniform:1000-3000`."""
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        return Lengths("fixed", _count(kind, what))
    kind = kind.lower()
    if kind in ("exp", "exponential"):
        return Lengths("exponential", _count(rest, what))
    if kind in ("uniform", "u"):
        low, dash, high = rest.partition("-")
        lo, hi = _count(low, what), _count(high, what) if dash else -1.0
        if hi < lo:
            raise InputError(f"{what}: uniform:LOW-HIGH needs LOW <= HIGH, got {rest!r}")
        return Lengths("uniform", (lo + hi) / 2, lo, hi)
    raise InputError(f"{what}: {text!r} is not N, exp:N or uniform:LOW-HIGH")


def spec_tokens_per_step(k: int, alpha: float) -> float:
    """Expected tokens one sequence gains per target step with k draft tokens each accepted with
    probability alpha: (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1); k + 1 at
    alpha = 1, 1 without speculation."""
    if k == 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True)
class ServeConfig:
    """One serving setup. `rate_per_s`: requests per second over all replicas. `chunk_tokens`:
    prefill tokens per engine step mixed with decode (None: each prefill runs as its own step).
    `disagg`: (prefill devices, decode devices) or None (every replica does both)."""

    rate_per_s: float
    input_tokens: Lengths
    output_tokens: Lengths
    devices: int
    tp: int
    max_batch: int = 256
    chunk_tokens: int | None = 8192
    prefix_hit: float = 0.0
    spec_k: int = 0
    spec_alpha: float = 0.0
    spec_draft_ratio: float = 0.0  # one draft step's cost / one target step's (0: n-gram)
    disagg: tuple[int, int] | None = None
    kv_reservation: str = "on_demand"  # or "full_output" (the engine's, engines.toml)
    ep: int = 1  # expert-parallel ranks of a replica (the engine's flag; divides tp)
    attention_dp: int = 1  # attention data-parallel ranks of a replica (divides tp)
    pp: int = 1  # pipeline stages of a replica: a replica is tp x pp devices

    def __post_init__(self) -> None:
        check_serving_rate(self.rate_per_s)
        for value, flag in ((self.ep, "--ep"), (self.attention_dp, "--attention-dp")):
            check_whole(value, flag)
            if isinstance(self.tp, int) and self.tp >= 1 and self.tp % value:
                raise InputError(
                    f"{flag} {value} must divide --tp {self.tp} (a replica is --tp devices: "
                    "expert-parallel and attention data-parallel ranks split it)"
                )
        for length, what in ((self.input_tokens, "--in"), (self.output_tokens, "--out")):
            if not isinstance(length, Lengths):
                raise InputError(
                    f"{what} must be a token-length distribution (Lengths; parse_lengths('2000', "
                    f"'{what}')), got {short(length)}"
                )
        check_size(check_whole(self.devices, "--devices"), "--devices")
        check_whole(self.tp, "--tp")
        check_whole(self.pp, "--pp", most=MAX_STAGES)
        check_whole(self.max_batch, "--max-batch", most=MAX_BATCH)
        if self.chunk_tokens is not None:
            check_whole(self.chunk_tokens, "--chunk", most=MAX_TOKENS)
        check_whole(self.spec_k, "--spec-decode k", least=0, most=MAX_SPEC_K)
        hit = check_real(self.prefix_hit, "--prefix-hit")
        if not 0.0 <= hit < 1.0:
            raise InputError(f"--prefix-hit must be in [0, 1), got {self.prefix_hit}")
        alpha = check_real(self.spec_alpha, "--spec-decode alpha")
        draft = check_real(self.spec_draft_ratio, "--spec-decode draft cost")
        if not 0.0 <= alpha <= 1.0 or draft < 0:
            raise InputError("--spec-decode needs k >= 0, 0 <= alpha <= 1 and a draft cost >= 0")
        if self.disagg is not None:
            if not isinstance(self.disagg, tuple) or len(self.disagg) != 2:
                raise InputError(
                    f"--disagg: give P:D devices, e.g. 4:12 (got {short(self.disagg)})"
                )
            check_whole(self.disagg[0], "--disagg P")
            check_whole(self.disagg[1], "--disagg D")
        pools = self.disagg or (self.devices, 0)
        if self.pp > 1 and self.disagg is not None:
            raise InputError("--pp with --disagg is not modelled: give one or the other")
        for n in pools:
            if n % self.replica_devices:
                raise InputError(f"{n} devices do not split into replicas of {self._replica}")
        if self.disagg is not None and min(self.disagg) < self.tp:
            raise InputError("--disagg P:D needs at least --tp devices in each pool")
        if self.kv_reservation not in ("on_demand", "full_output"):
            raise InputError(f"unknown KV reservation {self.kv_reservation!r}")

    @property
    def replica_devices(self) -> int:
        """Devices of one replica: tp x pp (each of the pp stages on tp devices)."""
        return self.tp * self.pp

    @property
    def replicas(self) -> int:
        """Replicas serving in all (colocated): devices / (tp x pp)."""
        return self.devices // self.replica_devices

    @property
    def _replica(self) -> str:
        return f"--tp {self.tp}" if self.pp == 1 else f"--tp {self.tp} x --pp {self.pp}"

    @property
    def kv_tokens_per_sequence(self) -> float:
        """KV tokens a running sequence holds, with half a 16-token block of fragmentation:
        I + O/2 + 8 when blocks are taken on demand (the mean over its life), I + O + 8 when
        its whole output is reserved at admission."""
        out = self.output_tokens.mean
        grown = out if self.kv_reservation == "full_output" else out / 2
        return self.input_tokens.mean + grown + BLOCK_TOKENS / 2

    @property
    def tokens_per_step(self) -> float:
        return spec_tokens_per_step(self.spec_k, self.spec_alpha)

    @property
    def step_cost_factor(self) -> float:
        """A speculative step: k draft steps plus one verification, priced as a decode step
        (memory-bound: reading the weights and KV once checks k + 1 tokens)."""
        return 1.0 + self.spec_k * self.spec_draft_ratio

"""The statistics of a speedup: confidence intervals on time ratios, outliers, drifts of the machine.

A speedup is a ratio of times, and times are skewed (a run is slowed, never sped up, by what
else the machine does), so the statistics work on log times: the ratio's interval is the
exponential of an interval on a difference of means of logs (see docs/design/tuning.md,
"Measurement that knows its noise").

- `paired_ratio` is for interleaved measurements (pairs of adjacent runs, each pair's order
  drawn at random): one ratio per pair, their median and its distribution-free interval
  (order statistics). Drifts of the machine that are slow against one pair cancel out; and
  timings under load are heavy-tailed, even bimodal (a run that waits for a core), which
  throws a mean of log ratios around where a median holds (see docs/design/tuning.md).
- `signed_rank_ratio` is for the same pairs when a long comparison needs more power than a median's
  interval has: the Hodges-Lehmann estimate (median of the pairwise means of log ratios) with the
  Wilcoxon signed-rank interval. It uses the sizes of the ratios, not only their signs, so on timers
  that tick in steps (many pairs tie, a win is a whole tick) it separates what the sign of a pair
  cannot; it assumes the log ratios symmetric under no difference, which interleaving with
  each pair's order drawn at random gives when both sides run the same code (`measure.interleave`).
- `unpaired_ratio` (Welch's t on log times) is for times taken apart (the live line of the
  search, where the baseline was measured once at the start).

Everything is plain numpy; Student's t quantile is computed here (regularized incomplete beta
by continued fraction, then bisection) and binomial tails with `math.comb`, so no statistics
package is needed.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

import attrs
import numpy as np

CONFIDENCE = 0.95
# The final table's level: the chance that any of its verdicts ("faster"/"slower") is false is at most
# 1 - TABLE_CONFIDENCE (each of its m compared rows at 1 - (1 - TABLE_CONFIDENCE) / m; docs/design/tuning.md,
# "One level for the whole table").
TABLE_CONFIDENCE = 0.995
OUTLIER_MADS = 5.0  # a sample further than this many (scaled) MADs from the median is an outlier


@attrs.frozen
class RatioInterval:
    """A speedup (baseline time / candidate time) with its confidence interval."""

    ratio: float
    low: float
    high: float
    confidence: float = CONFIDENCE
    samples: int = 0
    estimator: str = "median"  # "median" (of the pair ratios) or "signed-rank" (Hodges-Lehmann); see below

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1.0 (no change)."""
        return self.low > 1.0 or self.high < 1.0

    @property
    def width(self) -> float:
        """Relative half-width of the interval, ``(high - low) / (2 ratio)``."""
        return (self.high - self.low) / (2 * self.ratio) if self.ratio > 0 else math.inf

    def verdict(self) -> str:
        if not self.significant:
            return "no significant difference"
        return "faster" if self.low > 1.0 else "slower"

    def to_dict(self) -> dict[str, float | int | bool | str]:
        return {
            "speedup": self.ratio,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "samples": self.samples,
            "estimator": self.estimator,
            "significant": self.significant,
            "verdict": self.verdict(),
        }

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def format_interval(data: dict | None) -> str:
    """``1.23x [1.10, 1.37]`` from `RatioInterval.to_dict()`; ``-`` for None."""
    if not data or data.get("speedup") is None:
        return "-"
    text = f"{data['speedup']:.2f}x [{data['low']:.2f}, {data['high']:.2f}]"
    return text if data.get("significant", True) else f"{text} (n.s.)"


# -- Student's t ----------------------------------------------------------------------------------


def _incomplete_beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return result


def _regularized_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _incomplete_beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (bisection on `t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


# -- intervals -------------------------------------------------------------------------------------


def _logs(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([v for v in values if v is not None and v > 0 and math.isfinite(v)], dtype=float)
    return np.log(array)


def paired_ratio(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE
) -> RatioInterval | None:
    """Speedup of `candidate` over `baseline` from interleaved pairs (``baseline[i]`` ran next to
    ``candidate[i]``): the median of the pair ratios, with the distribution-free interval of a
    median (order statistics of the sorted log ratios, binomial tail at 1/2); None with fewer than
    two pairs. Below ~6 pairs no interval reaches 95%: it is then unbounded (never significant).
    """
    pairs = [(b, c) for b, c in zip(baseline, candidate) if b and c and b > 0 and c > 0]
    if len(pairs) < 2:
        return None
    logs = np.sort(np.log([b for b, _ in pairs]) - np.log([c for _, c in pairs]))
    n = len(logs)
    k = _median_rank(n, confidence)
    point = math.exp(float(np.median(logs)))
    if k == 0:
        return RatioInterval(point, 0.0, math.inf, confidence, n)
    return RatioInterval(point, math.exp(float(logs[k - 1])), math.exp(float(logs[n - k])), confidence, n)


@functools.lru_cache(maxsize=4096)
def _median_rank(n: int, confidence: float) -> int:
    """The largest k with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2: [x_(k), x_(n+1-k)] covers the
    median with at least `confidence`; 0 when no k does."""
    tail = (1.0 - confidence) / 2.0
    cumulative, k = 0.0, 0
    log_half = n * math.log(2.0)
    for j in range(n + 1):
        # In logs: 2**n overflows a float beyond 1023 pairs (a long sequential comparison reaches that).
        cumulative += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) - log_half)
        if cumulative > tail:
            break
        k = j + 1
    return min(k, n // 2)


def signed_rank_ratio(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE
) -> RatioInterval | None:
    """Speedup of `candidate` over `baseline` from interleaved pairs: the Hodges-Lehmann estimate (the median
    of the n(n+1)/2 pairwise means of the log ratios, Walsh averages) and the interval that inverts
    Wilcoxon's signed-rank test (order statistics of those means); None with fewer than two pairs,
    unbounded (never significant) when no interval reaches `confidence`.
    """
    pairs = [(b, c) for b, c in zip(baseline, candidate) if b and c and b > 0 and c > 0]
    if len(pairs) < 2:
        return None
    logs = np.log([b for b, _ in pairs]) - np.log([c for _, c in pairs])
    n = len(logs)
    first, second = np.triu_indices(n)
    walsh = np.sort((logs[first] + logs[second]) / 2.0)
    c = _signed_rank_rank(n, confidence)
    point = math.exp(float(np.median(walsh)))
    if c == 0:
        return RatioInterval(point, 0.0, math.inf, confidence, n, "signed-rank")
    low, high = math.exp(float(walsh[c - 1])), math.exp(float(walsh[len(walsh) - c]))
    return RatioInterval(point, low, high, confidence, n, "signed-rank")


EXACT_SIGNED_RANK = 400  # pairs up to which the signed-rank distribution is computed exactly


@functools.lru_cache(maxsize=256)
def _signed_rank_rank(n: int, confidence: float) -> int:
    """The largest c with P(T+ < c) <= (1 - confidence) / 2 for Wilcoxon's signed-rank statistic of n pairs
    under no difference: the c-th smallest and c-th largest Walsh averages bound the interval; 0 when no c
    does. Exact (the distribution built one rank at a time) up to `EXACT_SIGNED_RANK` pairs, else the normal
    approximation with continuity correction."""
    tail = (1.0 - confidence) / 2.0
    total = n * (n + 1) // 2
    if n <= EXACT_SIGNED_RANK:
        probability = np.zeros(total + 1)
        probability[0] = 1.0
        for rank in range(1, n + 1):  # each rank joins the positive side or not, with probability 1/2
            shifted = np.zeros_like(probability)
            shifted[rank:] = probability[:-rank]
            probability = 0.5 * (probability + shifted)
        return int(np.searchsorted(np.cumsum(probability), tail, side="right"))
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    z = statistics.NormalDist().inv_cdf(1.0 - tail)
    return max(0, math.floor(total / 2.0 - z * sd + 0.5))


def unpaired_ratio(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE
) -> RatioInterval | None:
    """Speedup of `candidate` over `baseline` from times taken apart (Welch's t on log times); None with
    fewer than two samples on either side."""
    a, b = _logs(baseline), _logs(candidate)
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        df = float(len(a) + len(b) - 2)
    else:  # Welch-Satterthwaite
        df = (va + vb) ** 2 / ((va**2) / (len(a) - 1) + (vb**2) / (len(b) - 1))
    return _interval(float(a.mean() - b.mean()), se, df, confidence, min(len(a), len(b)))


def _interval(mean: float, se: float, df: float, confidence: float, n: int) -> RatioInterval:
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return RatioInterval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), confidence, n)


# -- outliers and drift ----------------------------------------------------------------------------


def outliers(values: Sequence[float], mads: float = OUTLIER_MADS) -> list[int]:
    """Indices of samples further than `mads` scaled median absolute deviations from the median (of logs)."""
    logs = _logs(values)
    if len(logs) < 3 or len(logs) != len(values):
        return []
    median = np.median(logs)
    mad = 1.4826 * np.median(np.abs(logs - median))
    if mad == 0.0:
        return []
    return [int(i) for i in np.nonzero(np.abs(logs - median) > mads * mad)[0]]


def drift(values: Sequence[float], confidence: float = 0.99) -> float | None:
    """How much the level of a series of times moved between its first and second half (ratio second/first),
    when the move is significant at `confidence`; None when steady or too short to say."""
    logs = _logs(values)
    if len(logs) < 6:
        return None
    half = len(logs) // 2
    moved = unpaired_ratio(np.exp(logs[:half]).tolist(), np.exp(logs[half:]).tolist(), confidence)
    if moved is None or not moved.significant:
        return None
    return 1.0 / moved.ratio  # unpaired_ratio is first/second

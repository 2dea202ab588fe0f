"""Confidence intervals: Wilson for accuracies, bootstrap and normal approximation for means."""
import math
import random

Z95 = 1.959963984540054


def wilson(successes, n, z=Z95):
    """Wilson score interval for a proportion. `successes` may be fractional (partial-credit
    scores in [0, 1], e.g. RULER's string_match_all): it is then the sum of the scores, which
    keeps the interval inside [0, 1]. Returns (low, high); (0, 1) when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(successes / n, 0.0), 1.0)
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def normal_ci(values, z=Z95):
    """(mean, low, high) with the normal approximation (standard error of the mean)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    m = mean(values)
    if n == 1:
        return m, m, m
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(var / n)
    return m, m - half, m + half


def bootstrap_ci(groups, stat=None, iters=1000, seed=0, alpha=0.05):
    """Percentile bootstrap over `groups` (a list of lists of values: resampling whole groups
    keeps correlated values, e.g. the positions of one text window, together). `stat` maps the
    pooled values to a number (default: their mean). Returns (estimate, low, high)."""
    stat = stat or mean
    pooled = [v for g in groups for v in g]
    if not pooled:
        return float("nan"), float("nan"), float("nan")
    est = stat(pooled)
    if len(groups) < 2:
        return est, est, est
    rng = random.Random(seed)
    samples = []
    for _ in range(iters):
        vals = []
        for _ in range(len(groups)):
            vals.extend(groups[rng.randrange(len(groups))])
        samples.append(stat(vals) if vals else est)
    samples.sort()
    lo = samples[int(math.floor(alpha / 2 * (iters - 1)))]
    hi = samples[int(math.ceil((1 - alpha / 2) * (iters - 1)))]
    return est, lo, hi

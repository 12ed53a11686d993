"""The step-outliers logic, plain Python: which training steps ran more than
`factor` times their rank's rolling median. Kept apart from the bindings
(app.py) so that `python3 -m unittest` tests it without building the
component; ../rust/src/lib.rs is the same logic in Rust, decision for
decision."""

import json
from collections import deque

KNOWN = ("window", "factor", "min_steps", "timings")

# The slow steps the route shows, newest last.
KEEP_FLAGGED = 100


def parse_settings(text):
    """The settings (a JSON object) with defaults filled in. Raises
    ValueError naming the key; the message does not name the plugin: sonde
    shows it under the plugin's name."""
    raw = json.loads(text) if text.strip() else {}
    if not isinstance(raw, dict):
        raise ValueError(f"settings must be a JSON object, got {text.strip()}")
    unknown = sorted(k for k in raw if k not in KNOWN)
    if unknown:
        raise ValueError(f"unknown setting `{unknown[0]}` (known: {', '.join(KNOWN)})")

    def number(key, default, ok, want):
        v = raw.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
            raise ValueError(f"setting `{key}` must be {want}, got {json.dumps(v)}")
        return v

    window = number("window", 20, lambda v: isinstance(v, int) and 3 <= v <= 1000, "an integer from 3 to 1000")
    factor = float(number("factor", 2.0, lambda v: 1 < v <= 100, "a number above 1, at most 100"))
    min_steps = number("min_steps", 5, lambda v: isinstance(v, int) and 1 <= v <= window,
                       f"an integer from 1 to the window ({window})")
    timings = raw.get("timings")
    if timings is None:
        timings = ["step", "train_batch"]
    elif not (isinstance(timings, list) and timings and all(isinstance(t, str) for t in timings)):
        raise ValueError(f"setting `timings` must be a non-empty list of timing names, got {json.dumps(timings)}")
    return {"window": window, "factor": factor, "min_steps": min_steps, "timings": list(timings)}


def median_ns(durations):
    """The median of integer durations; between two middles, their mean rounded down."""
    s = sorted(durations)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


class Outliers:
    def __init__(self, settings):
        self.settings = settings
        # (job, rank) -> the last `window` step durations (ns)
        self.ranks = {}
        # (job, rank) -> steps seen, for steps reported without an index
        self.seen = {}
        self.flagged = deque(maxlen=KEEP_FLAGGED)
        # job -> slow steps so far (the counter the plugin emits)
        self.slow = {}
        self.malformed = 0

    def reconfigure(self, settings):
        """New settings; each rank keeps its most recent durations."""
        self.settings = settings
        self.ranks = {k: deque(d, maxlen=settings["window"]) for k, d in self.ranks.items()}

    def step(self, job, rank, step, start_ns, end_ns):
        """One step's timing. Returns the flag (the decision's body) when the
        step is slow against the steps before it, else None."""
        if end_ns < start_ns:
            self.malformed += 1
            return None
        key = (job, rank)
        durations = self.ranks.setdefault(key, deque(maxlen=self.settings["window"]))
        index = step if step >= 0 else self.seen.get(key, 0)
        self.seen[key] = self.seen.get(key, 0) + 1
        duration = end_ns - start_ns
        flag = None
        if len(durations) >= self.settings["min_steps"]:
            median = median_ns(durations)
            if median > 0 and duration > self.settings["factor"] * median:
                flag = {
                    "job": job,
                    "rank": rank,
                    "step": index,
                    "duration_ns": duration,
                    "median_ns": median,
                    "ratio": duration / median,
                    "window": len(durations),
                }
                self.flagged.append(flag)
                self.slow[job] = self.slow.get(job, 0) + 1
        durations.append(duration)
        return flag

    def view(self):
        """The body of GET /slow."""
        return {
            "slow": list(self.flagged),
            "slow_per_job": self.slow,
            "ranks": [
                {"job": job, "rank": rank, "steps": self.seen.get((job, rank), 0), "median_ns": median_ns(d)}
                for (job, rank), d in sorted(self.ranks.items())
                if d
            ],
            "malformed": self.malformed,
        }


def reason(flag):
    """The decision's sentence."""
    return (f"step {flag['step']} of {flag['job']} rank {flag['rank']} took {flag['duration_ns'] / 1e6:.0f} ms, "
            f"{flag['ratio']:.1f}x its rolling median of {flag['median_ns'] / 1e6:.0f} ms "
            f"(last {flag['window']} steps)")

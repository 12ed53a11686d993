// The serving-limiter logic, plain JavaScript: a burst of SLO-miss
// observations becomes at most one decision per model and window, with
// counts. Kept apart from the bindings (app.js) so `node --test` tests it
// natively; ../rust/src/limiter.rs is the same logic in Rust, decision for
// decision. Times are BigInt nanoseconds, as the contract's u64s arrive.

export const KNOWN = ['window_ms', 'lag_ms', 'min_misses'];

// Decisions the route shows, newest last.
const KEEP_DECISIONS = 100;

// Request results: 0 success, 4 timeout, anything else the server's error.
const TIMEOUT = 4;

// The settings (a JSON object) with defaults filled in. Throws a string
// naming the key; the message does not name the plugin: sonde shows it
// under the plugin's name.
export function parseSettings(text) {
  const raw = text.trim() === '' ? {} : JSON.parse(text);
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw `settings must be a JSON object, got ${text.trim()}`;
  }
  const unknown = Object.keys(raw).filter((k) => !KNOWN.includes(k)).sort();
  if (unknown.length > 0) {
    throw `unknown setting \`${unknown[0]}\` (known: ${KNOWN.join(', ')})`;
  }
  const int = (key, dflt, lo, hi, want) => {
    const v = raw[key];
    if (v === undefined || v === null) return dflt;
    if (!Number.isInteger(v) || v < lo || v > hi) {
      throw `setting \`${key}\` must be ${want}, got ${JSON.stringify(v)}`;
    }
    return v;
  };
  return {
    window_ms: int('window_ms', 10000, 100, 3600000, 'milliseconds from 100 to 3600000'),
    lag_ms: int('lag_ms', 2000, 0, 600000, 'milliseconds from 0 to 600000'),
    min_misses: int('min_misses', 1, 1, 1000000, 'an integer from 1 to 1000000'),
  };
}

export class Limiter {
  constructor(settings) {
    this.settings = settings;
    // "model/window index" -> the window's counts
    this.open = new Map();
    this.decided = [];
    // requests that arrived for a window already closed
    this.lateRows = 0;
    // miss observations folded into decisions, and windows closed without one
    this.folded = 0;
    this.quietWindows = 0;
  }

  windowNs() {
    return BigInt(this.settings.window_ms) * 1000000n;
  }

  // One finished request of `model` (a Number), times in BigInt ns.
  observe(model, departure, deadline, result) {
    const index = departure / this.windowNs();
    const key = `${model}/${index}`;
    let w = this.open.get(key);
    if (w === undefined) {
      if (this.closedBefore !== undefined && index < this.closedBefore) {
        this.lateRows += 1;
        return;
      }
      w = { model, index, requests: 0, timeouts: 0, late: 0, errors: 0 };
      this.open.set(key, w);
    }
    w.requests += 1;
    if (result === TIMEOUT) w.timeouts += 1;
    else if (result !== 0) w.errors += 1;
    else if (deadline !== 0n && departure > deadline) w.late += 1;
  }

  // Closes every window that ended at least lag_ms before `now` (BigInt
  // ns); returns the decisions' bodies, by window then model.
  close(now) {
    const lag = BigInt(this.settings.lag_ms) * 1000000n;
    if (now < lag + this.windowNs()) return [];
    // Windows with an index below this have ended lag_ms ago.
    const below = (now - lag) / this.windowNs();
    if (this.closedBefore === undefined || below > this.closedBefore) this.closedBefore = below;
    const due = [...this.open.values()]
      .filter((w) => w.index < below)
      .sort((a, b) => (a.index === b.index ? a.model - b.model : a.index < b.index ? -1 : 1));
    const out = [];
    for (const w of due) {
      this.open.delete(`${w.model}/${w.index}`);
      const misses = w.timeouts + w.late + w.errors;
      if (misses < this.settings.min_misses) {
        this.quietWindows += 1;
        continue;
      }
      this.folded += misses;
      const startMs = w.index * BigInt(this.settings.window_ms);
      const body = {
        model: w.model,
        window_start_ms: Number(startMs),
        window_end_ms: Number(startMs + BigInt(this.settings.window_ms)),
        requests: w.requests,
        misses,
        timeouts: w.timeouts,
        late: w.late,
        errors: w.errors,
        miss_rate: misses / w.requests,
      };
      this.decided.push(body);
      if (this.decided.length > KEEP_DECISIONS) this.decided.shift();
      out.push(body);
    }
    return out;
  }

  // The body of GET /windows.
  view() {
    return {
      decisions: this.decided,
      open_windows: this.open.size,
      late_rows: this.lateRows,
      misses_folded: this.folded,
      quiet_windows: this.quietWindows,
    };
  }
}

// The decision's sentence.
export function reason(b) {
  return `model ${b.model}: ${b.misses} of ${b.requests} requests missed their SLO in one ` +
    `${(b.window_end_ms - b.window_start_ms) / 1000} s window (${b.timeouts} timed out, ${b.late} late, ${b.errors} failed)`;
}

// The limiter natively: `npm test` (or `node --test` in this folder).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Limiter, parseSettings, reason } from './limiter.js';

const MS = 1000000n;
const T0 = 1_000_000n * 1000n * MS; // a window boundary, in ns

// `n` requests of `model` departing inside window `w` (10 s windows), `missed` of them late.
function burst(l, model, w, n, missed) {
  for (let i = 0; i < n; i++) {
    const departure = T0 + BigInt(w) * 10000n * MS + BigInt(i) * MS;
    const deadline = i < missed ? departure - 1n : departure + 50n * MS;
    l.observe(model, departure, deadline, 0);
  }
}

test('a burst of misses is one decision per model and window, with counts', () => {
  const l = new Limiter(parseSettings(''));
  burst(l, 7, 0, 40, 12);
  l.observe(7, T0 + 5n * MS, 0n, 4); // a timeout
  l.observe(7, T0 + 6n * MS, 0n, 13); // a server error
  burst(l, 9, 0, 20, 0); // model 9: no miss
  assert.deepEqual(l.close(T0 + 11000n * MS), [], 'the window ended 1 s ago: lag_ms is 2 s');
  const out = l.close(T0 + 12000n * MS);
  assert.equal(out.length, 1);
  assert.deepEqual(out[0], {
    model: 7, window_start_ms: 1_000_000_000, window_end_ms: 1_000_010_000,
    requests: 42, misses: 14, timeouts: 1, late: 12, errors: 1, miss_rate: 14 / 42,
  });
  assert.match(reason(out[0]), /^model 7: 14 of 42 requests missed their SLO in one 10 s window \(1 timed out, 12 late, 1 failed\)$/);
  assert.deepEqual(l.close(T0 + 60000n * MS), [], 'closed once');
  assert.equal(l.view().quiet_windows, 1);
});

test('windows and models are kept apart; late reports are counted, not decided', () => {
  const l = new Limiter(parseSettings('{"min_misses": 3}'));
  burst(l, 1, 0, 10, 2); // under min_misses
  burst(l, 1, 1, 10, 5);
  burst(l, 2, 1, 10, 3);
  const out = l.close(T0 + 22000n * MS);
  assert.deepEqual(out.map((b) => [b.model, b.window_start_ms, b.misses]), [[1, 1_000_010_000, 5], [2, 1_000_010_000, 3]]);
  burst(l, 1, 1, 1, 1); // window 1 is closed
  assert.equal(l.view().late_rows, 1);
  assert.equal(l.view().misses_folded, 8);
});

test('settings errors name the key, not the plugin', () => {
  for (const [text, want] of [
    ['{"window": 5}', 'unknown setting `window` (known: window_ms, lag_ms, min_misses)'],
    ['{"window_ms": 5}', 'setting `window_ms` must be milliseconds from 100 to 3600000, got 5'],
    ['{"min_misses": 0}', 'setting `min_misses` must be an integer from 1 to 1000000, got 0'],
    ['[1]', 'settings must be a JSON object, got [1]'],
  ]) {
    assert.throws(() => parseSettings(text), (e) => e === want);
  }
});

// Runs the hooks natively, as sonde would call them: `npm test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { hooks } from './app.js';

const hello = () => JSON.parse(new TextDecoder().decode(hooks.onRequest({
  method: 'GET', path: '/hello', query: '', headers: [], body: new Uint8Array(),
}).body));

test('GET /hello reports what the hooks were given', () => {
  const manifest = hooks.start({ name: '{{name}}', hostVersion: '0', contractVersion: '0.2.0', settings: '{}', restarts: 0 });
  assert.deepEqual(manifest.events, ['progress']);
  hooks.onSamples({ newSeries: [], timestamps: [1n, 2n], series: [0, 1, 2, 3], values: new Float64Array(8) });
  hooks.onEvents({
    origins: [{ job: 'job-a' }, { job: 'job-b' }],
    names: ['batch'],
    progress: { origin: [0, 1, 0], name: [0, 0, 0], time: [1n, 2n, 3n], value: [10n, 3n, 11n] },
  });
  const body = hello();
  assert.equal(body.sample_batches, 1);
  assert.equal(body.samples, 8);
  assert.equal(body.event_batches, 1);
  assert.equal(body.progress_rows, 3);
  assert.deepEqual(body.latest_progress, { 'job-a': 11, 'job-b': 3 });
});

test('settings and unknown routes are refused', () => {
  assert.throws(() => hooks.configure('{"x": 1}'));
  const r = hooks.onRequest({ method: 'GET', path: '/nope', query: '', headers: [], body: new Uint8Array() });
  assert.equal(r.status, 404);
  assert.equal(hooks.onRequest({ method: 'POST', path: '/hello', query: '', headers: [], body: new Uint8Array() }).status, 405);
});

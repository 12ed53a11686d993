// serving-limiter: a sonde plugin in JavaScript (componentize-js) that
// rate-limits and reshapes serving decisions. A serving controller reports
// every finished request as a row of the `requests` event table, which the
// bundled clockwork plugin declares and this plugin only reads; a
// request that timed out, failed, or left after its deadline missed its
// SLO. Instead of one decision per miss, the plugin counts them per model
// and `window_ms` window, and once a window has ended (plus `lag_ms` for
// late reports) makes at most one `slo-misses` decision for that model and
// window, with the counts by cause, and the gauge
// `serving_limiter.miss_rate`. `GET /windows` shows the recent decisions.
// The logic is in limiter.js; this file is the contract's side.

import { cancelTimer, declareMetric, emitDecision, emitPoints, now, setTimer } from 'sonde:plugin/host@0.2.0';

import { Limiter, parseSettings, reason } from './limiter.js';

// One instance, one call at a time: module state is the plugin's state.
let state = new Limiter(parseSettings(''));
let timer = 0n;
// model -> the handle of its miss-rate series
let handles = new Map();

function handle(model) {
  let h = handles.get(model);
  if (h === undefined) {
    h = declareMetric({
      name: 'serving_limiter.miss_rate',
      description: 'Share of a window\'s requests that missed their SLO, per model',
      unit: '1',
      kind: 'gauge',
      attributes: [{ key: 'serving.model.id', value: { tag: 'int', val: BigInt(model) } }],
    });
    handles.set(model, h);
  }
  return h;
}

// Checks for ended windows at least once a second (and at least once a window).
function armTimer() {
  timer = setTimer(BigInt(Math.min(1000, state.settings.window_ms)), true);
}

function closeDue() {
  const bodies = state.close(now());
  if (bodies.length === 0) return;
  const series = [];
  const time = [];
  const value = [];
  for (const b of bodies) {
    emitDecision({
      kind: 'slo-misses',
      subject: `model-${b.model}`,
      reason: reason(b),
      body: JSON.stringify(b),
      attributes: [{ key: 'serving.model.id', value: { tag: 'int', val: BigInt(b.model) } }],
    });
    series.push(handle(b.model));
    time.push(BigInt(b.window_end_ms) * 1000000n);
    value.push(b.miss_rate);
  }
  emitPoints({
    series: Uint32Array.from(series),
    time: BigUint64Array.from(time),
    value: Float64Array.from(value),
  });
}

// The values of column `name` of one table's rows: columns are read by name,
// since the declaring plugin orders them (and may add more).
function column(rows, name) {
  const c = rows.columnNames.indexOf(name);
  if (c < 0) throw `table ${rows.name} has no column ${name}`;
  return rows.columns[c].val;
}

function answer(status, body) {
  return {
    status,
    headers: [['content-type', 'application/json']],
    body: new TextEncoder().encode(JSON.stringify(body)),
  };
}

export const hooks = {
  start(info) {
    state = new Limiter(parseSettings(info.settings));
    handles = new Map();
    armTimer();
    return {
      version: '0.1.0',
      description: 'At most one SLO-miss decision per model and window, with counts (JavaScript)',
      events: [],
      tables: [],
      reads: ['requests'],
    };
  },

  configure(settings) {
    const s = parseSettings(settings);
    if (s.window_ms === state.settings.window_ms) {
      state.settings = s;
      return;
    }
    // Open windows were cut at the old length: start afresh at the new one.
    cancelTimer(timer);
    state = new Limiter(s);
    armTimer();
  },

  onSamples(_batch) {},

  onEvents(batch) {
    for (const rows of batch.tables) {
      if (rows.name !== 'requests') continue;
      const model = column(rows, 'model_id');
      const departure = column(rows, 'departure_ns');
      const deadline = column(rows, 'deadline_ns');
      const result = column(rows, 'result');
      for (let i = 0; i < rows.origin.length; i++) {
        state.observe(Number(model[i]), departure[i], deadline[i], result[i]);
      }
    }
    closeDue();
  },

  onTimer(id) {
    if (id === timer) closeDue();
  },

  onRequest(request) {
    if (request.path !== '/windows') {
      return answer(404, { error: `no route ${request.method} ${request.path}; routes: GET /windows` });
    }
    if (request.method !== 'GET') {
      return answer(405, { error: `${request.method} is not allowed on /windows` });
    }
    return answer(200, state.view());
  },

  stop() {},
};

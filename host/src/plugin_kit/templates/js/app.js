// {{name}}: a sonde plugin in JavaScript (componentize-js).
//
// It counts the sample batches and the progress events sonde hands it and
// answers `GET /api/plugins/{{name}}/hello` with those counts as JSON. The
// export `hooks` is the `hooks` interface of `wit/sonde-plugin.wit`, with the
// names in camelCase. A hook that throws answers `err` with the thrown string.
// Numbers declared u64 in the contract (timestamps, progress values) arrive
// as BigInt.

// One instance per plugin, one call at a time: module state is the plugin's
// state. A trap re-creates the instance and calls `start` again.
let name = '{{name}}';
let counts = newCounts();

function newCounts() {
  return { sampleBatches: 0, samples: 0, eventBatches: 0, progressRows: 0, latestProgress: {} };
}

function refuseSettings(settings) {
  if (settings.trim() !== '' && settings.trim() !== '{}') {
    throw '{{name}} takes no settings';
  }
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
    refuseSettings(info.settings);
    name = info.name;
    counts = newCounts();
    return {
      version: '0.1.0',
      description: 'Counts samples and progress events; GET /hello shows them',
      samples: { periodMs: 1000, deliverEveryMs: 1000, metrics: ['system.cpu.'] },
      events: ['progress'],
      tables: [],
      reads: [],
    };
  },

  configure(settings) {
    refuseSettings(settings);
  },

  onSamples(batch) {
    counts.sampleBatches += 1;
    counts.samples += batch.timestamps.length * batch.series.length;
  },

  onEvents(batch) {
    const p = batch.progress;
    if (p === undefined || p === null) return;
    counts.eventBatches += 1;
    for (let i = 0; i < p.value.length; i++) {
      counts.progressRows += 1;
      counts.latestProgress[batch.origins[p.origin[i]].job] = Number(p.value[i]);
    }
  },

  onTimer(_id) {},

  onRequest(request) {
    if (request.path !== '/hello') {
      return answer(404, { error: `no route ${request.method} ${request.path}` });
    }
    if (request.method !== 'GET') {
      return answer(405, { error: `${request.method} is not allowed on /hello` });
    }
    return answer(200, {
      plugin: name,
      language: 'javascript',
      sample_batches: counts.sampleBatches,
      samples: counts.samples,
      event_batches: counts.eventBatches,
      progress_rows: counts.progressRows,
      latest_progress: counts.latestProgress,
    });
  },

  stop() {},
};

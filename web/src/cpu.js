// The CPU's busy share, derived in the feed from what the host samples:
// `system.cpu.utilization` with one series per `cpu.mode` for all CPUs and
// for each core. busy = 1 − idle − iowait (iowait 0 where a CPU has none),
// the rule of the plugin SDK (plugins/sdk/src/cpu.rs; why steal counts as
// busy: docs/exports.md).
//
//   Feed.receive ─► merged mode series ─► CpuBusy.derive ─► one series per CPU
//                                                            (id: idle's − 2³², no cpu.mode)
//
// A derived series carries the metadata of its CPU's idle series without
// `cpu.mode`, so a chart matches it as "system.cpu.utilization without a
// mode", which is also what a sonde from before per-mode sampling sends.
// Buckets are derived from the idle and iowait buckets at the same times
// (every mode of a CPU is read at the same tick, so their buckets line up):
// the mean exactly, min and max as the bounds the modes allow. Only the
// buckets a message touched are derived again: the tail, like the feed.

const NAME = 'system.cpu.utilization';
const NOT_BUSY = ['idle', 'iowait'];

// A CPU's identity: everything of a mode series but its id and mode.
function cpuKey(m) {
  const rest = Object.entries(m.attributes).filter(([k]) => k !== 'cpu.mode').sort(([a], [b]) => (a < b ? -1 : 1));
  return JSON.stringify([m.scope, m.plugin, m.unit, rest]);
}

// The index in d.t of each time of ts (both ascending), -1 where d has none.
function indices(d, ts) {
  const out = new Array(ts.length).fill(-1);
  if (!d || !d.t.length) return out;
  let i = 0;
  let hi = d.t.length;
  while (i < hi) { const mid = (i + hi) >> 1; if (d.t[mid] < ts[0]) i = mid + 1; else hi = mid; }
  for (let k = 0; k < ts.length; k++) {
    while (i < d.t.length && d.t[i] < ts[k]) i++;
    if (i < d.t.length && d.t[i] === ts[k]) out[k] = i;
  }
  return out;
}

const clamp = (v) => Math.min(1, Math.max(0, v));

export class CpuBusy {
  constructor() {
    this.cpus = new Map(); // cpuKey -> { id (derived), idle, iowait (ids of the mode series) }
  }

  // After `feed` merged a message: registers new CPUs from its series (their
  // metadata goes into feed.meta), then derives each touched CPU's buckets at
  // the times the message carried. Returns [{id, t, mean, min, max}] for the
  // feed to merge like the buckets it received.
  derive(feed, msg) {
    for (const m of msg.series) {
      const mode = m.attributes['cpu.mode'];
      if (m.name !== NAME || !NOT_BUSY.includes(mode)) continue;
      const key = cpuKey(m);
      let cpu = this.cpus.get(key);
      if (!cpu) {
        cpu = { id: null, idle: null, iowait: null };
        this.cpus.set(key, cpu);
      }
      cpu[mode] = m.id;
      if (mode === 'idle') {
        // Negative, and in the order of the idle series (all CPUs, then core 0, 1, …).
        cpu.id = m.id - 2 ** 32;
        const attributes = { ...m.attributes };
        delete attributes['cpu.mode'];
        feed.meta.set(cpu.id, { ...m, id: cpu.id, attributes, derived: 'busy' });
      }
    }
    const times = new Map(msg.data.map((b) => [b.id, b.t]));
    const out = [];
    for (const cpu of this.cpus.values()) {
      if (cpu.idle == null) continue;
      const ts = [...new Set([...(times.get(cpu.idle) || []), ...(times.get(cpu.iowait) || [])])].sort((a, b) => a - b);
      if (!ts.length) continue;
      const idle = feed.data.get(cpu.idle);
      const iowait = cpu.iowait == null ? null : feed.data.get(cpu.iowait);
      const [ii, wi] = [indices(idle, ts), indices(iowait, ts)];
      const b = { id: cpu.id, t: [], mean: [], min: [], max: [] };
      ts.forEach((t, k) => {
        const i = ii[k];
        if (i < 0) return; // no idle share at this time: no busy share
        const w = wi[k];
        const [wMean, wMin, wMax] = w < 0 ? [0, 0, 0] : [iowait.mean[w], iowait.min[w], iowait.max[w]];
        b.t.push(t);
        b.mean.push(clamp(1 - idle.mean[i] - wMean));
        b.min.push(clamp(1 - idle.max[i] - wMax));
        b.max.push(clamp(1 - idle.min[i] - wMin));
      });
      if (b.t.length) out.push(b);
    }
    return out;
  }

  // The feed starts over (a new window): forget every CPU.
  clear() {
    this.cpus.clear();
  }
}

// What a CPU chart draws: the busy share of each CPU (derived, or a sonde
// that sent it without modes), never the mode series themselves.
export const isBusyShare = (m) => m.name === NAME && m.attributes['cpu.mode'] === undefined;

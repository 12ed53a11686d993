// A job's steps as Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing): one process for the job, one thread (track) per rank,
// one complete event per batch with its phases as child events laid end to
// end from the batch's start, in the order phases run (the API gives each
// phase's total per batch, and the job's phase order).
export function chromeTrace(job) {
  const events = [{ ph: 'M', name: 'process_name', pid: 1, tid: 0, args: { name: `job ${job.job}` } }];
  const ranks = Array.isArray(job.ranks) ? job.ranks : [];
  const seen = new Set();
  const track = (rank) => {
    if (seen.has(rank)) return;
    seen.add(rank);
    const r = ranks.find((x) => x.rank === rank);
    events.push({ ph: 'M', name: 'thread_name', pid: 1, tid: rank, args: { name: `rank ${rank}${r && r.node ? ` (${r.node})` : ''}` } });
    events.push({ ph: 'M', name: 'thread_sort_index', pid: 1, tid: rank, args: { sort_index: rank } });
  };
  const order = Array.isArray(job.phase_order) ? job.phase_order : [];
  const rankOf = (name) => {
    const i = order.indexOf(name);
    return i < 0 ? order.length : i;
  };
  for (const s of job.steps || []) {
    for (const r of s.ranks) {
      track(r.rank);
      const ts = r.start_ns / 1000;
      events.push({ ph: 'X', name: `batch ${s.batch}`, cat: 'step', pid: 1, tid: r.rank, ts, dur: Math.max(0, (r.end_ns - r.start_ns) / 1000),
        args: { batch: s.batch, total_s: r.total_s, slowest: s.slowest_rank === r.rank } });
      let t = ts;
      const phases = Object.entries(r.phases).sort((a, b) => rankOf(a[0]) - rankOf(b[0]));
      for (const [name, sec] of phases) {
        events.push({ ph: 'X', name, cat: 'phase', pid: 1, tid: r.rank, ts: t, dur: sec * 1e6, args: { batch: s.batch } });
        t += sec * 1e6;
      }
    }
  }
  return { traceEvents: events, displayTimeUnit: 'ms', otherData: { job: job.job, source: 'sonde /api/jobs' } };
}

export function download(name, text, type = 'application/json') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// A job's steps as Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing): one process for the job, one thread (track) per rank,
// one complete event per batch spanning the rank's step, with its phases as
// child events at their real start (the API gives each phase's first start
// and total time per batch), kept inside the step's slice.
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
  for (const s of job.steps || []) {
    for (const r of s.ranks) {
      track(r.rank);
      const ts = r.start_ns / 1000;
      const end = r.end_ns / 1000;
      events.push({ ph: 'X', name: `batch ${s.batch}`, cat: 'step', pid: 1, tid: r.rank, ts, dur: Math.max(0, end - ts),
        args: { batch: s.batch, total_s: r.total_s } });
      const starts = r.phase_start_ns || {};
      for (const [name, sec] of Object.entries(r.phases)) {
        const at = starts[name] != null ? Math.max(ts, starts[name] / 1000) : ts;
        events.push({ ph: 'X', name, cat: 'phase', pid: 1, tid: r.rank, ts: at, dur: Math.max(0, Math.min(sec * 1e6, end - at)), args: { batch: s.batch } });
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

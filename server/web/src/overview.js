// The overview: governors with their load, sessions with their task counts
// (failures first), throughput and the server's counters. Live.
import {
  clear, formatBytes, formatCount, formatDuration, formatRate, getJson, h, link, stateBadge, stateBar, svg,
} from './dom.js';

function card(label, value, detail, testid) {
  return h('div', { class: 'card', 'data-testid': testid },
    h('div', { class: 'card-label' }, label),
    h('div', { class: 'card-value' }, value),
    detail ? h('div', { class: 'card-detail' }, detail) : null);
}

function sparkline(history) {
  const width = 160;
  const height = 34;
  const values = history.length ? history : [0];
  const max = Math.max(1, ...values);
  const step = width / Math.max(1, values.length - 1);
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  return svg('svg', { class: 'spark', viewBox: `0 0 ${width} ${height}`, width, height, 'aria-hidden': 'true' },
    svg('polyline', { points: `0,${height} ${points.join(' ')} ${width},${height}`, class: 'spark-fill' }),
    svg('polyline', { points: points.join(' '), class: 'spark-line' }));
}

function sessionRank(s) {
  if (!s.closed && s.state === 'failed') return 0;
  if (!s.closed) return 1;
  return s.state === 'failed' || s.failure ? 2 : 3;
}

// The functions a governor's executors offer (tasklib): the executors'
// names with their counts, every function in the cell's title.
function functionsSummary(functions) {
  if (!functions.length) return '—';
  const byExecutor = new Map();
  for (const f of functions) {
    const executor = f.split('/')[0];
    byExecutor.set(executor, (byExecutor.get(executor) || 0) + 1);
  }
  return [...byExecutor].map(([e, n]) => `${e} (${n})`).join(', ');
}

// A governor's pools besides cpus: "gpus 1/2, mem 2 GB/16 GB" (in use /
// capacity; sums of mem in bytes).
function resourcesSummary(resources) {
  const names = Object.keys(resources || {}).sort();
  if (!names.length) return '—';
  const amount = (name, value) => (name === 'mem' ? formatBytes(value) : `${Math.round(value * 10000) / 10000}`);
  return names.map((n) => `${n} ${amount(n, resources[n].used)}/${amount(n, resources[n].capacity)}`).join(', ');
}

// A governor's memory tier: "1.2 GB / 7 GB, 300 MB spilled"; — without one
// (or before its first heartbeat).
function storeSummary(store) {
  if (!store || !store.memoryCapacity) return '—';
  const spilled = store.spilledBytes ? `, ${formatBytes(store.spilledBytes)} spilled` : '';
  return `${formatBytes(store.memoryBytes)} / ${formatBytes(store.memoryCapacity)}${spilled}`;
}

function governorsTable(governors) {
  if (!governors.length) {
    return h('p', { class: 'empty' }, 'No governor is connected. Start one with ',
      h('code', {}, 'squall-governor --server HOST:PORT'), ' or use ', h('code', {}, 'squall start'), '.');
  }
  return h('table', { class: 'grid', 'data-testid': 'governors' },
    h('thead', {}, h('tr', {}, ['governor', 'cpus in use', 'tasks', 'queued', 'resources in use', 'objects', 'data held', 'store memory', 'functions', 'data address']
      .map((c) => h('th', {}, c)))),
    h('tbody', {}, governors.map((g) => h('tr', { 'data-testid': 'governor-row', 'data-name': g.name },
      h('td', { class: 'name' }, g.name),
      h('td', {}, h('div', { class: 'meter', title: `${g.cpusUsed} of ${g.cpus} cpus` },
        h('span', { class: 'meter-fill', style: { width: `${(100 * g.cpusUsed) / Math.max(1, g.cpus)}%` } })),
      h('span', { class: 'meter-text' }, `${g.cpusUsed} / ${g.cpus}`)),
      h('td', { class: 'num' }, formatCount(g.tasks)),
      h('td', { class: 'num' }, formatCount(g.cpusQueued)),
      h('td', { 'data-testid': 'governor-resources' }, resourcesSummary(g.resources)),
      h('td', { class: 'num' }, formatCount(g.objects)),
      h('td', { class: 'num' }, formatBytes(g.bytesHeld)),
      h('td', { 'data-testid': 'governor-store', title: 'objects in the memory tier / its capacity' }, storeSummary(g.store)),
      h('td', { 'data-testid': 'governor-functions', title: (g.functions || []).join('\n') },
        functionsSummary(g.functions || [])),
      h('td', { class: 'mono' }, g.dataAddress)))));
}

function sessionsTable(sessions) {
  if (!sessions.length) {
    return h('p', { class: 'empty' }, 'No sessions yet. Run a pipeline with ', h('code', {}, 'squall run PIPELINE.toml'),
      ' or try ', h('code', {}, 'squall demo'), '.');
  }
  const sorted = [...sessions].sort((a, b) => sessionRank(a) - sessionRank(b) || b.id - a.id);
  return h('table', { class: 'grid', 'data-testid': 'sessions' },
    h('thead', {}, h('tr', {}, ['session', 'state', 'progress', 'finished', 'running', 'failed', 'tasks']
      .map((c) => h('th', {}, c)))),
    h('tbody', {}, sorted.map((s) => {
      const c = s.counts;
      const done = c.finished + c.failed + c.cancelled + c.skipped;
      return h('tr', { 'data-testid': 'session-row', 'data-session': s.id, class: s.closed ? 'closed' : '' },
        h('td', { class: 'name' }, link(`/sessions/${s.id}`, s.name || '(unnamed)'), h('span', { class: 'muted' }, ` #${s.id}`),
          s.failure ? h('div', { class: 'error-line', title: s.failure.message }, s.failure.message) : null),
        h('td', {}, stateBadge(s.state)),
        h('td', { class: 'progress' }, stateBar(c, s.tasks), h('span', { class: 'muted small' },
          s.tasks ? `${Math.floor((100 * done) / s.tasks)}%` : '')),
        h('td', { class: 'num', 'data-testid': 'session-finished' }, formatCount(c.finished)),
        h('td', { class: 'num' }, formatCount(c.running)),
        h('td', { class: `num ${c.failed ? 'bad' : ''}` }, formatCount(c.failed)),
        h('td', { class: 'num' }, formatCount(s.tasks)));
    })));
}

export function overviewPage(root, ctx) {
  ctx.setCrumbs([{ text: 'overview' }]);
  const cards = h('div', { class: 'cards' });
  const governors = h('div', {});
  const sessions = h('div', {});
  clear(root).append(
    cards,
    h('section', { class: 'panel' }, h('h2', {}, 'Governors'), governors),
    h('section', { class: 'panel' }, h('h2', {}, 'Sessions'), sessions),
  );
  let disposed = false;

  function render(data) {
    if (disposed) return;
    const g = data.governors;
    const cpus = g.reduce((a, x) => a + x.cpus, 0);
    const used = g.reduce((a, x) => a + x.cpusUsed, 0);
    const t = data.tasks;
    const tp = data.throughput;
    const sched = data.scheduling;
    const bytes = data.bytes;
    clear(cards).append(
      card('governors', formatCount(g.length), `${used} of ${cpus} cpus in use`, 'card-governors'),
      card('running', formatCount(t.running), `${formatCount(t.ready + t.waiting)} waiting or ready`, 'card-running'),
      h('div', { class: 'card wide', 'data-testid': 'card-throughput' },
        h('div', { class: 'card-label' }, 'throughput'),
        h('div', { class: 'card-value' }, formatRate(tp.tasksPerSecond), h('span', { class: 'unit' }, ' tasks/s')),
        sparkline(tp.history.slice(-60))),
      card('finished', formatCount(tp.finished), tp.retries ? `${formatCount(tp.retries)} retried attempts` : 'since the server started', 'card-finished'),
      card('failed', formatCount(tp.failed), 'tasks that failed for good', 'card-failed'),
      card('data moved', formatBytes(bytes.fetched + bytes.constants),
        `${formatBytes(bytes.produced)} produced`, 'card-bytes'),
      card('scheduling pass', formatDuration(sched.lastMs * 1000),
        `mean ${formatDuration(sched.meanMs * 1000)}, ${formatCount(sched.passes)} passes`, 'card-scheduling'),
    );
    clear(governors).append(governorsTable(g));
    clear(sessions).append(sessionsTable(data.sessions));
  }

  getJson('/api/overview').then(render).catch((e) => {
    clear(cards).append(h('p', { class: 'error' }, `Cannot read the overview: ${e.message}`));
  });
  const unsubscribe = ctx.subscribe(0, render);
  return {
    dispose() {
      disposed = true;
      unsubscribe();
    },
  };
}

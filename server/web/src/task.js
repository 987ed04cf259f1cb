// One task: what it is (type, command, resources, policy), how it went
// (governor, times, exit status, error, stdout/stderr tails) and the data it
// read and made. Refreshed while the task is not done.
import { append, clear, formatBytes, formatDuration, formatTime, getJson, h, link, stateBadge, throttle } from './dom.js';

function field(label, value) {
  if (value === null || value === undefined || value === '') return null;
  return [h('dt', {}, label), h('dd', {}, value)];
}

function shellQuote(arg) {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "'\\''")}'`;
}

function command(config) {
  if (!config.args) return null;
  return config.shell ? `sh -c ${shellQuote(config.args[0] || '')}` : config.args.map(shellQuote).join(' ');
}

function objectsTable(objects, sessionId, which) {
  if (!objects || !objects.length) return h('p', { class: 'muted' }, which === 'inputs' ? 'No inputs.' : 'No outputs.');
  return h('table', { class: 'grid' },
    h('thead', {}, h('tr', {}, ['object', which === 'inputs' ? 'path / label' : 'label', 'kind', 'state', 'size', which === 'inputs' ? 'made by' : 'read by', 'held on']
      .map((c) => h('th', {}, c)))),
    h('tbody', {}, objects.map((o) => h('tr', {},
      h('td', { class: 'num' }, String(o.id), o.keep ? h('span', { class: 'badge small' }, 'kept') : null),
      h('td', { class: 'mono' }, (which === 'inputs' ? o.path || o.inputLabel : '') || o.label || ''),
      h('td', {}, o.kind, o.contentType ? h('span', { class: 'muted' }, ` ${o.contentType}`) : null),
      h('td', {}, o.state),
      h('td', { class: 'num' }, o.state === 'finished' || o.size ? formatBytes(o.size) : ''),
      h('td', {}, which === 'inputs'
        ? (o.producer ? [link(`/sessions/${sessionId}/tasks/${o.producer.id}`, o.producer.name || `task ${o.producer.id}`), ' ', stateBadge(o.producer.state)] : (o.constant ? 'constant' : ''))
        : `${o.consumers} task${o.consumers === 1 ? '' : 's'}`),
      h('td', {}, (o.locations || []).join(', '))))));
}

export function taskPage(root, ctx, sessionId, taskId) {
  ctx.setCrumbs([{ text: `session ${sessionId}`, href: `/sessions/${sessionId}` }, { text: `task ${taskId}` }]);
  clear(root).append(h('p', { class: 'muted' }, 'Loading…'));
  let disposed = false;
  let lastChanges = -1;
  let done = false;

  function render(t) {
    done = ['finished', 'failed', 'cancelled', 'skipped'].includes(t.state);
    ctx.setCrumbs([{ text: `session ${sessionId}`, href: `/sessions/${sessionId}` }, { text: t.name || `task ${t.id}` }]);
    document.title = `${t.name || `task ${t.id}`} · squall`;
    const config = t.config || {};
    const cmd = command(config);
    const tails = [];
    if (t.stderrTail) tails.push(h('h3', {}, 'stderr (tail)'), h('pre', { class: 'tail stderr', 'data-testid': 'task-stderr' }, t.stderrTail));
    if (t.stdoutTail) tails.push(h('h3', {}, 'stdout (tail)'), h('pre', { class: 'tail', 'data-testid': 'task-stdout' }, t.stdoutTail));
    if (!tails.length && done) tails.push(h('p', { class: 'muted' }, 'No output was captured (outputs written to objects are not shown here).'));
    append(clear(root),
      h('section', { class: 'panel' },
        h('h1', {}, t.name || '(unnamed task)', h('span', { class: 'muted' }, ` #${t.id}`), ' ', stateBadge(t.state)),
        t.error ? h('div', { class: 'failure-box', 'data-testid': 'task-error' }, t.error) : null,
        t.closed ? h('p', { class: 'note' }, 'The session is closed; what is kept of this task is shown.') : null,
        h('dl', { class: 'facts' },
          field('type', t.type),
          field('group', t.group),
          field('governor', t.governor),
          field('submitted by', t.parent ? h('span', { 'data-testid': 'task-parent' },
            link(`/sessions/${sessionId}/tasks/${t.parent.id}`, t.parent.name || `task ${t.parent.id}`), ' ', stateBadge(t.parent.state)) : null),
          field('attempt', t.attempt > 1 ? String(t.attempt) : null),
          field('started', t.startTimeUs ? formatTime(t.startTimeUs) : null),
          field('duration', t.durationUs ? formatDuration(t.durationUs) : null),
          field('exit status', t.exitStatus >= 0 && done ? String(t.exitStatus) : null),
          field('resources', t.resources ? `${t.resources.cpus} cpu${t.resources.cpus === 1 ? '' : 's'}${(t.resources.requests || []).map((r) => `, ${r.amount} ${r.name}`).join('')}` : null),
          field('policy', t.policy ? [t.policy.retries ? `${t.policy.retries} retries` : 'no retries', t.policy.allowFailure ? 'failure allowed' : null, t.policy.timeLimitMs ? `time limit ${formatDuration(t.policy.timeLimitMs * 1000)}` : null, t.policy.expectedMs ? `expected ${formatDuration(t.policy.expectedMs * 1000)}` : null].filter(Boolean).join(', ') : null),
        )),
      h('section', { class: 'panel' }, h('h2', {}, 'Output'), tails),
      t.config ? h('section', { class: 'panel' }, h('h2', {}, 'Spec'),
        h('dl', { class: 'facts' },
          field('command', cmd ? h('code', { class: 'command' }, cmd) : null),
          field('stdin', config.stdinInput >= 0 ? `input ${config.stdinInput}` : null),
          field('outputs', config.outputs ? config.outputs.map((o) => (o.stdout ? 'stdout' : o.path)).join(', ') : null),
          field('path', config.path),
          field('sleep', config.milliseconds !== undefined ? `${config.milliseconds} ms` : null),
          field('environment', config.env && config.env.length ? h('pre', { class: 'env' }, config.env.map((e) => `${e.name}=${e.value}`).join('\n')) : null),
          field('attributes', t.attributes !== null && t.attributes !== undefined ? h('pre', { class: 'env' }, JSON.stringify(t.attributes, null, 2)) : null),
        )) : null,
      t.childrenCount ? h('section', { class: 'panel' },
        h('h2', {}, `Tasks it submitted (${t.childrenCount})`),
        h('ul', { class: 'children', 'data-testid': 'task-children' },
          t.children.map((c) => h('li', {}, link(`/sessions/${sessionId}/tasks/${c.id}`, c.name || `task ${c.id}`), ' ', stateBadge(c.state)))),
        t.childrenCount > t.children.length ? h('p', { class: 'muted' }, `The first ${t.children.length} are listed.`) : null) : null,
      t.inputs ? h('section', { class: 'panel' }, h('h2', {}, 'Inputs'), objectsTable(t.inputs, sessionId, 'inputs')) : null,
      t.outputs ? h('section', { class: 'panel' }, h('h2', {}, 'Outputs'), objectsTable(t.outputs, sessionId, 'outputs')) : null,
    );
  }

  async function load() {
    try {
      const t = await getJson(`/api/sessions/${sessionId}/tasks/${taskId}`);
      if (!disposed) render(t);
    } catch (e) {
      if (disposed) return;
      clear(root).append(h('section', { class: 'panel' }, h('h1', {}, `Task ${taskId}`),
        h('p', { class: 'error', 'data-testid': 'error' }, e.message), h('p', {}, link(`/sessions/${sessionId}`, 'Back to the session'))));
    }
  }
  const refresh = throttle(load, 1000);
  load();
  const unsubscribe = ctx.subscribe(sessionId, (data) => {
    const changes = data.session ? data.session.changes : undefined;
    if (changes !== lastChanges) {
      const first = lastChanges === -1;
      lastChanges = changes;
      if (!first && !done) refresh();
    }
  });
  return {
    dispose() {
      disposed = true;
      unsubscribe();
    },
  };
}

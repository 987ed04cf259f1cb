// One session: its state and failure, counts by state, its actors, the task
// graph, the timeline per governor and a paged, filterable table of tasks
// (failures first). Live: counts come with each update; the heavier parts are
// fetched again, at most every few seconds, when the session changed.
import {
  append, clear, formatCount, formatDuration, getJson, h, link, STATES, stateBadge, stateBar, throttle,
} from './dom.js';
import { DagView } from './dag.js';
import { drawTimeline } from './timeline.js';

const PAGE = 50;

export function sessionPage(root, ctx, id) {
  ctx.setCrumbs([{ text: `session ${id}` }]);
  const header = h('div', { class: 'session-head' });
  const failure = h('div', {});
  const chips = h('div', { class: 'chips', 'data-testid': 'counts' });
  const failures = h('section', { class: 'panel failures', hidden: true });
  const actors = h('section', { class: 'panel actors', hidden: true });
  const dagBox = h('div', { class: 'dag-box' }, h('p', { class: 'muted' }, 'Loading the graph…'));
  const timelineBox = h('div', { class: 'timeline-box' });
  const tableBox = h('div', {});
  const filterState = new Set();
  const nameInput = h('input', { type: 'search', placeholder: 'filter by name', 'aria-label': 'filter tasks by name', 'data-testid': 'name-filter' });
  const stateFilters = h('div', { class: 'filters' });
  const pager = h('div', { class: 'pager' });
  let offset = 0;
  let summary = null;
  let lastChanges = -1;
  let lastTasks = -1;
  let disposed = false;

  clear(root).append(
    h('section', { class: 'panel' }, header, failure, chips),
    failures,
    actors,
    h('section', { class: 'panel' }, h('h2', {}, 'Task graph'), dagBox),
    h('section', { class: 'panel' }, h('h2', {}, 'Timeline'), timelineBox),
    h('section', { class: 'panel' }, h('h2', {}, 'Tasks'), h('div', { class: 'table-tools' }, stateFilters, nameInput), tableBox, pager),
  );

  const openTask = (task) => ctx.navigate(`/sessions/${id}/tasks/${task}`);
  const dag = new DagView(dagBox, {
    onOpenTask: openTask,
    onPickGroup: (name) => {
      nameInput.value = name;
      offset = 0;
      loadTable();
      tableBox.scrollIntoView({ behavior: 'smooth', block: 'start' });
    },
  });

  function renderHeader() {
    const s = summary;
    ctx.setCrumbs([{ text: `${s.name || 'session'} #${s.id}` }]);
    document.title = `${s.name || 'session'} #${s.id} · squall`;
    clear(header).append(
      h('h1', {}, s.name || '(unnamed session)', h('span', { class: 'muted' }, ` #${s.id}`)),
      h('div', { class: 'head-badges', 'data-testid': 'session-state' }, stateBadge(s.state),
        h('span', { class: 'muted' }, ` ${formatCount(s.tasks)} tasks`)),
    );
    clear(failure);
    if (s.failure) {
      failure.append(h('div', { class: 'failure-box', 'data-testid': 'session-failure' },
        h('strong', {}, 'Session failed: '), s.failure.message,
        s.failure.task ? h('div', {}, link(`/sessions/${id}/tasks/${s.failure.task}`, `open task ${s.failure.task}${s.failure.taskName ? ` (${s.failure.taskName})` : ''}`)) : null,
        s.failure.stderrTail ? h('pre', { class: 'tail' }, s.failure.stderrTail) : null));
    }
    if (s.closed) {
      const kept = s.tasksKept < s.tasks
        ? ` The table lists ${formatCount(s.tasksKept)} of its ${formatCount(s.tasks)} tasks: the failures and the longest-running ones.`
        : '';
      failure.append(h('p', { class: 'note', 'data-testid': 'closed-note' },
        `This session ${s.state === 'failed' ? 'failed and ' : ''}was closed${s.closedAtMs ? ` at ${new Date(s.closedAtMs).toLocaleString()}` : ''}: this is what the server keeps of it, as it was then.${kept}`));
    }
    clear(chips).append(
      stateBar(s.counts, s.tasks),
      h('div', { class: 'chip-row' }, STATES.map((state) => h('button', {
        class: `chip state-${state} ${filterState.has(state) ? 'on' : ''}`,
        'data-testid': `count-${state}`,
        'data-count': s.counts[state],
        title: `show ${state} tasks`,
        onclick: () => {
          if (filterState.has(state)) filterState.delete(state); else filterState.add(state);
          offset = 0;
          renderFilters();
          renderHeader();
          loadTable();
        },
      }, h('span', { class: 'chip-label' }, state), h('span', { class: 'chip-count' }, formatCount(s.counts[state]))))),
    );
  }

  // Its actors (docs/actors.md), live with each update: where each lives,
  // its state, its calls waiting for their turn and those done.
  function renderActors() {
    const list = summary.actors || [];
    actors.hidden = list.length === 0;
    if (!list.length) return;
    clear(actors).append(h('h2', {}, `Actors (${formatCount(list.length)})`),
      h('table', { class: 'grid actors', 'data-testid': 'actor-table' },
        h('thead', {}, h('tr', {}, ['id', 'type', 'state', 'governor', 'calls waiting', 'calls done'].map((c) => h('th', {}, c)))),
        h('tbody', {}, list.map((a) => h('tr', { 'data-testid': 'actor-row', 'data-task': a.id },
          h('td', { class: 'num' }, link(`/sessions/${id}/tasks/${a.id}`, String(a.id))),
          h('td', { class: 'name' }, a.type),
          h('td', {}, stateBadge(a.killed ? 'cancelled' : a.state), a.killed ? h('span', { class: 'muted' }, ' killed') : null),
          h('td', {}, a.governor || ''),
          h('td', { class: 'num', 'data-testid': 'actor-queued' }, formatCount(a.callsQueued)),
          h('td', { class: 'num', 'data-testid': 'actor-done' }, formatCount(a.callsDone)))))));
  }

  function renderFilters() {
    clear(stateFilters);
    if (filterState.size) {
      stateFilters.append(h('span', { class: 'muted' }, 'state: '), [...filterState].map(stateBadge),
        h('button', { class: 'link-button', onclick: () => { filterState.clear(); offset = 0; renderFilters(); renderHeader(); loadTable(); } }, 'clear'));
    }
  }

  async function loadFailures() {
    if (!summary || !summary.counts.failed) {
      failures.hidden = true;
      return;
    }
    const data = await getJson(`/api/sessions/${id}/tasks?state=failed&limit=5`);
    if (disposed) return;
    failures.hidden = false;
    clear(failures);
    append(failures, h('h2', {}, `Failures (${formatCount(data.total)})`),
      h('ul', { class: 'failure-list', 'data-testid': 'failures' }, data.tasks.map((t) => h('li', {},
        link(`/sessions/${id}/tasks/${t.id}`, t.name || `task ${t.id}`), h('span', { class: 'muted' }, ` #${t.id}`),
        t.governor ? h('span', { class: 'muted' }, ` on ${t.governor}`) : null,
        h('div', { class: 'error-line' }, t.error || 'failed')))),
      data.total > 5 ? h('p', { class: 'muted small' }, 'The table below lists them all (failures come first).') : null);
  }

  async function loadTable() {
    const params = new URLSearchParams();
    if (filterState.size) params.set('state', [...filterState].join(','));
    if (nameInput.value.trim()) params.set('name', nameInput.value.trim());
    params.set('offset', String(offset));
    params.set('limit', String(PAGE));
    let data;
    try {
      data = await getJson(`/api/sessions/${id}/tasks?${params}`);
    } catch (e) {
      clear(tableBox).append(h('p', { class: 'error' }, e.message));
      return;
    }
    if (disposed || missing) return;
    clear(tableBox);
    if (!data.tasks.length) {
      tableBox.append(h('p', { class: 'empty' }, data.total ? 'No tasks on this page.' : 'No task matches.'));
    } else {
      tableBox.append(h('table', { class: 'grid tasks', 'data-testid': 'task-table' },
        h('thead', {}, h('tr', {}, ['id', 'name', 'state', 'governor', 'attempt', 'duration', 'exit', 'error'].map((c) => h('th', {}, c)))),
        h('tbody', {}, data.tasks.map((t) => h('tr', { 'data-testid': 'task-row', 'data-state': t.state, 'data-task': t.id },
          h('td', { class: 'num' }, link(`/sessions/${id}/tasks/${t.id}`, String(t.id))),
          h('td', { class: 'name' }, link(`/sessions/${id}/tasks/${t.id}`, t.name || '(unnamed)')),
          h('td', {}, stateBadge(t.state)),
          h('td', {}, t.governor || ''),
          h('td', { class: 'num' }, t.attempt > 1 ? String(t.attempt) : ''),
          h('td', { class: 'num' }, t.durationUs ? formatDuration(t.durationUs) : ''),
          h('td', { class: 'num' }, t.exitStatus >= 0 && t.state !== 'running' ? String(t.exitStatus) : ''),
          h('td', { class: 'error-cell', title: t.error || '' }, t.error || ''))))));
    }
    const last = Math.min(data.total, offset + data.tasks.length);
    clear(pager).append(
      h('button', { disabled: offset === 0, onclick: () => { offset = Math.max(0, offset - PAGE); loadTable(); } }, '‹ previous'),
      h('span', { class: 'muted', 'data-testid': 'pager-text' }, data.total ? `${formatCount(offset + 1)}–${formatCount(last)} of ${formatCount(data.total)}` : '0 tasks'),
      h('button', { disabled: last >= data.total, onclick: () => { offset += PAGE; loadTable(); } }, 'next ›'),
    );
  }

  async function loadGraph() {
    try {
      const graph = await getJson(`/api/sessions/${id}/graph`);
      if (!disposed && !missing) dag.update(graph);
    } catch (e) {
      clear(dagBox).append(h('p', { class: 'error' }, e.message));
    }
  }

  async function loadTimeline() {
    try {
      const data = await getJson(`/api/sessions/${id}/timeline`);
      if (!disposed && !missing) drawTimeline(timelineBox, data, openTask);
    } catch (e) {
      clear(timelineBox).append(h('p', { class: 'error' }, e.message));
    }
  }

  // The parts whose data needs a pass over the session's tasks on the
  // server: fetched again at most every 2 s (5 s for big sessions).
  const refreshSmall = throttle(() => { loadGraph(); loadTimeline(); loadTable(); loadFailures(); }, 2000);
  const refreshBig = throttle(() => { loadTimeline(); loadTable(); loadFailures(); }, 5000);

  function onUpdate(data) {
    if (disposed || !data.session) return;
    const first = summary === null;
    summary = data.session;
    renderHeader();
    renderActors();
    if (data.groups) dag.updateGroups(data.groups);
    if (!first && summary.tasks !== lastTasks && summary.tasks > 400) loadGraph();
    lastTasks = summary.tasks;
    const changes = summary.changes ?? -2;
    if (first || changes !== lastChanges) {
      lastChanges = changes;
      if (first) return;
      (summary.tasks > 400 ? refreshBig : refreshSmall)();
    }
  }

  let nameTimer = null;
  nameInput.addEventListener('input', () => {
    clearTimeout(nameTimer);
    nameTimer = setTimeout(() => { offset = 0; loadTable(); }, 250);
  });

  let unsubscribe = () => {};
  // Everything at once: the summary, the graph, the timeline and the table
  // do not wait for each other.
  let missing = false;
  loadGraph();
  loadTimeline();
  loadTable();
  getJson(`/api/sessions/${id}`).then((s) => {
    if (disposed) return;
    summary = s;
    lastChanges = s.changes ?? -2;
    lastTasks = s.tasks;
    renderHeader();
    renderActors();
    loadFailures();
    unsubscribe = ctx.subscribe(id, onUpdate);
  }).catch((e) => {
    missing = true;
    clear(root).append(h('section', { class: 'panel' }, h('h1', {}, `Session ${id}`),
      h('p', { class: 'error', 'data-testid': 'error' }, e.message), h('p', {}, link('/', 'Back to the overview'))));
  });

  return {
    dispose() {
      disposed = true;
      clearTimeout(nameTimer);
      unsubscribe();
    },
  };
}

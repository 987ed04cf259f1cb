// Tasks over time, one lane per governor. Up to a few thousand tasks are
// drawn as bars; beyond that the server sends, per lane, how many tasks ran
// on average in each time bucket, drawn as a heat strip.
import { clear, formatBytes, formatCount, formatDuration, h, STATES, svg } from './dom.js';

const LANE = 24;
const LABEL = 130;
const SUBROW = 9;
const SUBROWS = 8;

export function drawTimeline(container, data, onOpenTask) {
  clear(container);
  if (data.mode === 'omitted') {
    container.append(h('p', { class: 'empty' }, `This timeline was too big to keep (${formatBytes(data.bytes)}) when the session closed.`));
    return;
  }
  if (!data.lanes.length) {
    container.append(h('p', { class: 'empty' }, 'No task has run yet.'));
    return;
  }
  const width = Math.max(400, container.clientWidth || 900);
  const plot = width - LABEL - 10;
  const span = Math.max(1, data.endUs - data.startUs);
  // Tasks that overlap in time on one governor go on sub-rows of its lane.
  const rowsOf = (lane) => {
    if (data.mode !== 'tasks') return { rows: 1, row: [] };
    const order = lane.bars.map((b, k) => k).sort((a, b) => lane.bars[a][1] - lane.bars[b][1]);
    const ends = [];
    const row = [];
    for (const k of order) {
      const [, start, duration] = lane.bars[k];
      let r = ends.findIndex((end) => end <= start);
      if (r < 0) {
        if (ends.length < SUBROWS) r = ends.push(0) - 1; else r = ends.indexOf(Math.min(...ends));
      }
      ends[r] = start + duration;
      row[k] = r;
    }
    return { rows: Math.max(1, ends.length), row };
  };
  const layout = data.lanes.map(rowsOf);
  const heights = layout.map((l) => Math.max(LANE, l.rows * SUBROW + 8));
  const tops = heights.map((_, i) => heights.slice(0, i).reduce((a, b) => a + b, 0));
  const lanesHeight = heights.reduce((a, b) => a + b, 0);
  const height = lanesHeight + 22;
  const root = svg('svg', { class: 'timeline', width, height, viewBox: `0 0 ${width} ${height}`, 'data-testid': 'timeline' });
  data.lanes.forEach((lane, i) => {
    const y = tops[i];
    root.append(svg('text', { x: 4, y: y + 16, class: 'lane-label' }, lane.governor || '(unknown)'));
    if (lane.running) {
      root.append(svg('text', { x: LABEL - 6, y: y + 16, class: 'lane-running' }, `${lane.running}▶`,
        svg('title', {}, `${lane.running} running now`)));
    }
    root.append(svg('rect', { x: LABEL, y: y + 2, width: plot, height: heights[i] - 4, class: 'lane-bg' }));
    if (data.mode === 'tasks') {
      const rowHeight = (heights[i] - 8) / layout[i].rows;
      lane.bars.forEach(([id, start, duration, stateIndex], k) => {
        const state = STATES[stateIndex] || 'finished';
        const x = LABEL + (start / span) * plot;
        const w = Math.max(1.5, (duration / span) * plot);
        const by = y + 4 + layout[i].row[k] * rowHeight;
        const bar = svg('rect', { x: x.toFixed(1), y: by.toFixed(1), width: w.toFixed(1), height: Math.max(2, rowHeight - 1.5).toFixed(1), class: `bar state-${state}` },
          svg('title', {}, `#${id} ${state}, ${formatDuration(duration)}`));
        bar.addEventListener('click', () => onOpenTask(id));
        root.append(bar);
      });
    } else {
      const max = Math.max(1, ...data.lanes.flatMap((l) => l.busy));
      const cell = plot / lane.busy.length;
      lane.busy.forEach((busy, k) => {
        if (busy <= 0 && !lane.failed[k]) return;
        root.append(svg('rect', {
          x: (LABEL + k * cell).toFixed(1), y: y + 4, width: (cell + 0.5).toFixed(1), height: heights[i] - 8,
          class: lane.failed[k] ? 'heat failed' : 'heat', style: { opacity: String(0.15 + 0.85 * (busy / max)) },
        }, svg('title', {}, `${busy.toFixed(2)} tasks running on average${lane.failed[k] ? `, ${lane.failed[k]} failed` : ''}`)));
      });
    }
  });
  const axisY = lanesHeight + 14;
  for (let k = 0; k <= 5; k++) {
    const x = LABEL + (k / 5) * plot;
    root.append(svg('line', { x1: x, x2: x, y1: 0, y2: axisY - 10, class: 'tick' }));
    root.append(svg('text', { x, y: axisY, class: `axis ${k === 5 ? 'end' : k === 0 ? 'start' : ''}` }, formatDuration((k / 5) * span) || '0')); 
  }
  container.append(root);
  container.append(h('p', { class: 'muted small' }, data.mode === 'tasks'
    ? `${formatCount(data.timed)} finished tasks by governor; click a bar for the task.`
    : `${formatCount(data.timed)} finished tasks by governor, as the average number running in each of ${data.lanes[0].busy.length} time slices.`));
}

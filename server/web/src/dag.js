// The task graph drawn with dagre (laid out once per graph shape, recoloured
// on updates). Small sessions show one node per task; big ones one node per
// task-name group with its counts by state, so the drawing never grows with
// the number of tasks.
import dagre from '@dagrejs/dagre';
import { clear, formatBytes, formatCount, h, STATES, svg } from './dom.js';

const TASK_HEIGHT = 26;
const GROUP_HEIGHT = 46;

function textWidth(text, px) {
  return Math.min(220, Math.max(48, text.length * px + 20));
}

// The state a group node is coloured by: failures show first.
function groupState(counts) {
  for (const state of ['failed', 'running', 'ready', 'waiting']) {
    if (counts[state]) return state;
  }
  if (counts.finished) return 'finished';
  if (counts.skipped) return 'skipped';
  return counts.cancelled ? 'cancelled' : 'waiting';
}

export class DagView {
  constructor(container, { onOpenTask, onPickGroup }) {
    this.container = container;
    this.onOpenTask = onOpenTask;
    this.onPickGroup = onPickGroup;
    this.shape = null;
    this.nodes = new Map();
    this.view = null;
  }

  // graph: the /api/sessions/N/graph answer.
  update(graph) {
    if (graph.mode === 'omitted') {
      this.shape = null;
      clear(this.container).append(h('p', { class: 'empty' },
        `This graph was too big to keep (${formatBytes(graph.bytes)}) when the session closed.`));
      return;
    }
    const shape = `${graph.mode}:${graph.nodes.length}:${graph.edges.length}`;
    if (shape !== this.shape) {
      this.shape = shape;
      this.draw(graph);
    } else {
      this.recolour(graph);
    }
  }

  // Counts per group from a live update: rows parallel to the nodes.
  updateGroups(rows) {
    if (!this.shape || !this.shape.startsWith('groups')) return;
    rows.forEach((row, i) => {
      const counts = {};
      STATES.forEach((s, k) => { counts[s] = row[k] || 0; });
      this.paintGroup(i, counts);
    });
  }

  paintGroup(id, counts) {
    const node = this.nodes.get(id);
    if (!node) return;
    const state = groupState(counts);
    node.g.setAttribute('class', `node group state-${state}`);
    node.g.dataset.state = state;
    const total = STATES.reduce((a, s) => a + (counts[s] || 0), 0) || 1;
    let x = node.barX;
    for (const state2 of STATES) {
      const seg = node.segments[state2];
      const w = ((counts[state2] || 0) / total) * node.barWidth;
      seg.setAttribute('x', x.toFixed(1));
      seg.setAttribute('width', w.toFixed(1));
      x += w;
    }
    const done = (counts.finished || 0);
    node.countText.textContent = `${formatCount(done)} / ${formatCount(total)} done${counts.failed ? `, ${formatCount(counts.failed)} failed` : ''}`;
  }

  recolour(graph) {
    if (graph.mode === 'tasks') {
      for (const n of graph.nodes) {
        const node = this.nodes.get(n.id);
        if (!node) continue;
        node.g.setAttribute('class', `node task state-${n.state}`);
        node.g.dataset.state = n.state;
        node.title.textContent = `${n.name || 'task'} #${n.id}: ${n.state}`;
      }
    } else if (graph.mode === 'groups') {
      for (const n of graph.nodes) this.paintGroup(n.id, n.counts);
    }
  }

  draw(graph) {
    const container = clear(this.container);
    this.nodes.clear();
    if (!graph.nodes.length) {
      container.append(h('p', { class: 'empty' }, 'No tasks submitted yet.'));
      return;
    }
    const g = new dagre.graphlib.Graph({ multigraph: false });
    g.setGraph({ rankdir: 'LR', nodesep: 10, ranksep: graph.mode === 'tasks' ? 36 : 60, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const n of graph.nodes) {
      const label = graph.mode === 'tasks' ? (n.name || `#${n.id}`) : n.name;
      const width = graph.mode === 'tasks' ? textWidth(label, 6.6) : Math.max(150, textWidth(label, 7.2));
      g.setNode(String(n.id), { width, height: graph.mode === 'tasks' ? TASK_HEIGHT : GROUP_HEIGHT, label, data: n });
    }
    for (const e of graph.edges) {
      const [from, to, count] = e;
      if (g.hasNode(String(from)) && g.hasNode(String(to))) g.setEdge(String(from), String(to), { count });
    }
    dagre.layout(g);
    const { width, height } = g.graph();
    const root = svg('svg', {
      class: 'dag', viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'xMinYMin meet',
      role: 'img', 'aria-label': `task graph: ${graph.nodes.length} ${graph.mode === 'tasks' ? 'tasks' : 'groups'}`,
      'data-testid': 'dag',
    });
    root.append(svg('defs', {}, svg('marker', {
      id: 'arrow', viewBox: '0 0 10 10', refX: '9', refY: '5', markerWidth: '6', markerHeight: '6', orient: 'auto-start-reverse',
    }, svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'arrow' }))));
    const layer = svg('g', {});
    root.append(layer);
    for (const edgeId of g.edges()) {
      const edge = g.edge(edgeId);
      const d = edge.points.map((p, i) => `${i ? 'L' : 'M'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ');
      layer.append(svg('path', { d, class: 'edge', 'marker-end': 'url(#arrow)' }));
      if (graph.mode === 'groups' && edge.count > 1) {
        const mid = edge.points[Math.floor(edge.points.length / 2)];
        layer.append(svg('text', { x: mid.x, y: mid.y - 4, class: 'edge-label' }, formatCount(edge.count)));
      }
    }
    for (const id of g.nodes()) {
      const node = g.node(id);
      const n = node.data;
      const x = node.x - node.width / 2;
      const y = node.y - node.height / 2;
      const title = svg('title', {}, '');
      const group = svg('g', { tabindex: '0', role: 'link' }, title);
      group.append(svg('rect', { x, y, width: node.width, height: node.height, rx: 6, class: 'box' }));
      if (graph.mode === 'tasks') {
        group.append(svg('text', { x: node.x, y: node.y + 4, class: 'label' }, node.label.length > 30 ? `${node.label.slice(0, 29)}…` : node.label));
        group.dataset.task = n.id;
        const open = () => this.onOpenTask(n.id);
        group.addEventListener('click', open);
        group.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
        this.nodes.set(n.id, { g: group, title });
      } else {
        group.append(svg('text', { x: x + 8, y: y + 16, class: 'label left' }, node.label.length > 28 ? `${node.label.slice(0, 27)}…` : node.label));
        const countText = svg('text', { x: x + 8, y: y + 30, class: 'count left' }, '');
        group.append(countText);
        const barX = x + 8;
        const barWidth = node.width - 16;
        const segments = {};
        for (const state of STATES) {
          segments[state] = svg('rect', { x: barX, y: y + 35, width: 0, height: 5, class: `seg state-${state}` });
          group.append(segments[state]);
        }
        title.textContent = `${n.name}: ${formatCount(n.tasks)} tasks (click to list them)`;
        const pick = () => this.onPickGroup(n.name);
        group.addEventListener('click', pick);
        group.addEventListener('keydown', (e) => { if (e.key === 'Enter') pick(); });
        this.nodes.set(n.id, { g: group, title, countText, segments, barX, barWidth });
      }
      layer.append(group);
    }
    const frame = h('div', { class: 'dag-frame', style: { height: `${Math.min(520, Math.max(120, height + 10))}px` } }, root);
    container.append(frame);
    if (graph.mode === 'groups') {
      container.append(h('p', { class: 'muted small' },
        `${formatCount(graph.tasks)} tasks drawn as ${graph.nodes.length} groups of task names (a task's group is its name before "/" or "[", or without its trailing number). Click a group to list its tasks.`));
    }
    this.enablePanZoom(root, width, height);
    this.recolour(graph);
  }

  enablePanZoom(root, width, height) {
    const view = { x: 0, y: 0, w: width, h: height };
    const apply = () => root.setAttribute('viewBox', `${view.x} ${view.y} ${view.w} ${view.h}`);
    root.addEventListener('wheel', (e) => {
      e.preventDefault();
      const rect = root.getBoundingClientRect();
      const fx = (e.clientX - rect.left) / rect.width;
      const fy = (e.clientY - rect.top) / rect.height;
      const scale = e.deltaY > 0 ? 1.15 : 1 / 1.15;
      const nw = Math.min(width * 4, Math.max(40, view.w * scale));
      const nh = (nw / view.w) * view.h;
      view.x += (view.w - nw) * fx;
      view.y += (view.h - nh) * fy;
      view.w = nw;
      view.h = nh;
      apply();
    }, { passive: false });
    let drag = null;
    root.addEventListener('pointerdown', (e) => {
      if (e.target.closest('g[role=link]')) return;
      drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y };
      root.setPointerCapture(e.pointerId);
    });
    root.addEventListener('pointermove', (e) => {
      if (!drag) return;
      const rect = root.getBoundingClientRect();
      const k = view.w / rect.width;
      view.x = drag.vx - (e.clientX - drag.x) * k;
      view.y = drag.vy - (e.clientY - drag.y) * k;
      apply();
    });
    root.addEventListener('pointerup', () => { drag = null; });
    root.addEventListener('dblclick', () => {
      Object.assign(view, { x: 0, y: 0, w: width, h: height });
      apply();
    });
  }
}

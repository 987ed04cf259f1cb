// Small DOM helpers: elements built with text nodes only (never innerHTML
// with data), SVG elements, and number/time formatting.

const SVG_NS = 'http://www.w3.org/2000/svg';

// Appends children, skipping null/undefined/false, flattening arrays.
export function append(node, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttributes(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      node.addEventListener(key.slice(2), value);
    } else if (key === 'style' && typeof value === 'object') {
      Object.assign(node.style, value);
    } else if (key === 'dataset') {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

// h('div', {class: 'x'}, 'text', child, [more]) -> HTMLElement
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  return append(node, children);
}

export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttributes(node, attrs);
  return append(node, children);
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// An internal link handled by the router (no reload).
export function link(href, ...children) {
  return h('a', { href, 'data-link': true }, ...children);
}

export const STATES = ['waiting', 'ready', 'running', 'finished', 'failed', 'cancelled', 'skipped'];

export function stateBadge(state) {
  return h('span', { class: `badge state-${state}`, 'data-state': state }, state);
}

export function formatCount(n) {
  return Number(n || 0).toLocaleString('en-US');
}

export function formatBytes(n) {
  n = Number(n || 0);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}

export function formatDuration(us) {
  if (us === null || us === undefined) return '';
  const ms = us / 1000;
  if (ms < 1) return `${Math.round(us)} µs`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function formatTime(us) {
  if (!us) return '';
  return new Date(us / 1000).toLocaleString();
}

export function formatRate(perSecond) {
  if (perSecond >= 100) return Math.round(perSecond).toLocaleString('en-US');
  return perSecond.toFixed(perSecond >= 10 ? 1 : 2);
}

// A horizontal bar split by task state.
export function stateBar(counts, total) {
  const bar = h('div', { class: 'state-bar', role: 'img' });
  const sum = total || STATES.reduce((a, s) => a + (counts[s] || 0), 0);
  const parts = [];
  for (const state of STATES) {
    const n = counts[state] || 0;
    if (!n) continue;
    parts.push(`${state} ${formatCount(n)}`);
    bar.append(h('span', { class: `seg state-${state}`, style: { flexGrow: String(n) }, title: `${state}: ${formatCount(n)}` }));
  }
  if (!sum) bar.append(h('span', { class: 'seg empty', style: { flexGrow: '1' } }));
  bar.setAttribute('aria-label', parts.join(', ') || 'no tasks');
  return bar;
}

export async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: 'application/json' } });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const error = new Error((body && body.error) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

// Calls fn at most once per `ms`, the last call winning.
export function throttle(fn, ms) {
  let timer = null;
  let last = 0;
  let pending = false;
  return function throttled() {
    const now = Date.now();
    if (now - last >= ms && !timer) {
      last = now;
      fn();
      return;
    }
    pending = true;
    if (!timer) {
      timer = setTimeout(() => {
        timer = null;
        if (pending) {
          pending = false;
          last = Date.now();
          fn();
        }
      }, Math.max(0, ms - (now - last)));
    }
  };
}

// The status page: a small single-page app. Routes are real paths
// (/, /sessions/N, /sessions/N/tasks/M) that the server answers with this
// same page; data comes from the JSON API and live updates from
// server-sent events (/api/events).
import { clear, h, link } from './dom.js';
import { overviewPage } from './overview.js';
import { sessionPage } from './session.js';
import { taskPage } from './task.js';

const app = document.getElementById('app');
const crumbs = document.getElementById('crumbs');
const live = document.getElementById('live');
let current = null;

function setLive(state, text) {
  live.dataset.state = state;
  live.querySelector('.live-text').textContent = text;
}

// One EventSource per page: the overview (session 0) or one session. The
// server sends a payload when it changed, at most once a second.
function subscribe(session, onUpdate) {
  const url = session ? `/api/events?session=${session}` : '/api/events';
  const source = new EventSource(url);
  setLive('connecting', 'connecting');
  source.addEventListener('open', () => setLive('live', 'live'));
  source.addEventListener('error', () => {
    setLive('down', source.readyState === EventSource.CLOSED ? 'disconnected' : 'reconnecting');
  });
  source.addEventListener('update', (event) => {
    setLive('live', 'live');
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    onUpdate(data);
  });
  return () => source.close();
}

export function setCrumbs(items) {
  clear(crumbs);
  for (const item of items) {
    crumbs.append(h('span', { class: 'sep' }, '›'));
    crumbs.append(item.href ? link(item.href, item.text) : h('span', {}, item.text));
  }
}

function notFound(message) {
  setCrumbs([{ text: 'not found' }]);
  clear(app).append(
    h('section', { class: 'panel' }, h('h1', {}, 'Not found'), h('p', {}, message), h('p', {}, link('/', 'Back to the overview'))),
  );
  return { dispose() {} };
}

function route() {
  if (current) current.dispose();
  current = null;
  window.scrollTo(0, 0);
  const path = location.pathname.replace(/\/+$/, '') || '/';
  const ctx = { subscribe, setCrumbs, navigate };
  let m;
  if (path === '/') {
    current = overviewPage(app, ctx);
  } else if ((m = path.match(/^\/sessions\/(\d+)$/))) {
    current = sessionPage(app, ctx, Number(m[1]));
  } else if ((m = path.match(/^\/sessions\/(\d+)\/tasks\/(\d+)$/))) {
    current = taskPage(app, ctx, Number(m[1]), Number(m[2]));
  } else {
    current = notFound(`Nothing at ${path}.`);
  }
}

export function navigate(href) {
  if (href === location.pathname + location.search) return;
  history.pushState(null, '', href);
  route();
}

document.addEventListener('click', (event) => {
  const a = event.target.closest('a[data-link]');
  if (!a || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', route);
route();

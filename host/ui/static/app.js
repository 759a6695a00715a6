// chime dashboard: the sessions list, a session page and its history,
// kept current by the host's change stream (GET /api/events).

import { api, token, setToken, hostNow, authHeaders, explain, explainControl } from './api.js';
import { h, duration, when, ago, table } from './dom.js';
import { panels } from './panels.js';
import { timeline } from './timeline.js';

const view = document.getElementById('view');
const banner = document.getElementById('banner');
const crumbs = document.getElementById('crumbs');
const enc = encodeURIComponent;

const state = {
  route: null, // {name, sid}
  filter: '',
  span: 24 * 3600e3, // the timeline's half width
  inputs: new Map(), // form values kept across re-renders
  seq: 0, // render generation: a late answer for an old view is dropped
  message: null, // {text, ok} of the last control
};

function showBanner(text, info) {
  banner.hidden = !text;
  banner.className = info ? 'info' : '';
  banner.textContent = text || '';
}

// --- token ---

function tokenUI() {
  const has = !!token();
  document.getElementById('token-state').textContent = has ? 'token set: controls on' : 'read-only';
  document.getElementById('token').hidden = has;
  document.getElementById('token-save').hidden = has;
  document.getElementById('token-clear').hidden = !has;
}

document.getElementById('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = document.getElementById('token');
  const v = input.value.trim();
  input.value = '';
  if (!v) return;
  setToken(v);
  tokenUI();
  stream.restart();
  render();
});
document.getElementById('token-clear').addEventListener('click', () => {
  setToken('');
  tokenUI();
  stream.restart();
  render();
});

// --- routing ---

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 's' && parts[1]) return { name: parts[2] === 'history' ? 'history' : 'session', sid: parts[1] };
  return { name: 'sessions' };
}

window.addEventListener('hashchange', () => { state.message = null; render(); });

async function render() {
  state.route = parseRoute();
  const seq = ++state.seq;
  const r = state.route;
  crumbs.replaceChildren();
  if (r.sid) {
    crumbs.append(h('a', { href: '#/' }, 'sessions'), ' / ', h('a', { href: '#/s/' + enc(r.sid) }, r.sid));
    if (r.name === 'history') crumbs.append(' / history');
  }
  const node = r.name === 'sessions' ? await sessionsView(seq) : r.name === 'history' ? await historyView(seq, r.sid) : await sessionView(seq, r.sid);
  if (node && seq === state.seq) {
    const focus = document.activeElement && document.activeElement.id;
    view.replaceChildren(node);
    if (focus) { const el = document.getElementById(focus); if (el) el.focus(); }
    document.body.dataset.ready = r.name;
  }
}

// refresh re-renders at most every 300 ms however many changes arrive.
let refreshTimer = null;
function refresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; render(); }, 300);
}

// --- sessions list ---

async function sessionsView(seq) {
  const r = await api('/api/sessions');
  if (seq !== state.seq) return null;
  if (!r.ok) { showBanner(explain(r)); return h('p', { class: 'muted', 'data-error': r.status }, 'No sessions to show.'); }
  showBanner('');
  const all = r.data || [];
  const now = hostNow();
  const filter = h('input', {
    id: 'filter', type: 'search', placeholder: 'filter by id', value: state.filter,
    oninput: (e) => { state.filter = e.target.value; draw(); },
  });
  const body = h('div');
  function draw() {
    const f = state.filter.toLowerCase();
    const rows = all.filter((x) => !f || x.id.toLowerCase().includes(f)).map((x) => h('tr', { 'data-session': x.id },
      h('td', null, h('a', { href: '#/s/' + enc(x.id), class: 'mono' }, x.id), x.route ? h('div', { class: 'muted' }, x.route) : null),
      h('td', null, ago(x.lastSeenAt, now)),
      h('td', { class: 'num' }, x.taskCount),
      h('td', { class: 'num' }, x.liveTimers ?? '—'),
      h('td', { 'data-role': 'heartbeat' }, x.heartbeat ? ['every ' + x.heartbeat.every,
        x.heartbeat.nextAt ? h('div', { class: 'muted' }, 'next ', ago(x.heartbeat.nextAt, now)) : null] : h('span', { class: 'muted' }, 'off')),
      h('td', null, x.lastChannel || h('span', { class: 'muted' }, '—')),
      h('td', null, stopMessageText(x.stopMessage))));
    body.replaceChildren(table(['session', 'last seen', 'tasks', 'live timers', 'heartbeat', 'last channel', 'stopMessage'], rows,
      all.length ? 'No session matches the filter.' : 'No sessions yet: send a request through chime.'));
  }
  draw();
  return h('section', { class: 'panel', 'data-panel': 'sessions' },
    h('h2', null, 'Sessions', h('span', { class: 'count' }, all.length + '')), h('div', { class: 'filter' }, filter), body);
}

function stopMessageText(m) {
  if (!m) return h('span', { class: 'muted' }, 'none');
  return h('span', null, `armed, used ${m.used}/${m.maxRepeats || '∞'}`, m.text ? h('div', { class: 'muted' }, m.text) : null);
}

// --- a session ---

async function act(method, path, body, label) {
  const r = await api(path, { method, body });
  state.message = r.ok ? { text: 'Done: ' + (label || method + ' ' + path), ok: true } : { text: explainControl(r), ok: false };
  await render();
}

async function sessionView(seq, sid) {
  const loads = await Promise.all(panels.map((p) => api(p.path(sid), { text: p.text })));
  const list = await api('/api/sessions', { text: true });
  if (seq !== state.seq) return null;
  const refused = loads.find((r) => r.status === 401 || r.status === 403 || r.status === 0);
  if (refused) { showBanner(explain(refused)); return h('p', { class: 'muted', 'data-error': refused.status }, 'This session cannot be shown.'); }
  showBanner('');
  const data = {};
  const ctx = { sid, act, inputs: state.inputs, now: hostNow };
  const sections = [];
  panels.forEach((p, i) => {
    const r = loads[i];
    if (r.status === 404 && !p.core) return; // the host has no such feature
    let content;
    if (r.ok) { data[p.key] = r.data; content = p.render(r.data, ctx); } else content = h('p', { class: 'msg err' }, explain(r));
    sections.push(h('section', { class: 'panel', 'data-panel': p.key },
      h('h2', null, p.title, r.ok && p.count ? h('span', { class: 'count' }, p.count(r.data)) : null), content));
  });
  const me = list.ok ? (list.data || []).find((x) => x.id === sid) : null;
  const head = h('section', { class: 'panel', 'data-panel': 'summary' },
    h('h2', null, h('span', { class: 'mono' }, sid), h('a', { href: '#/s/' + enc(sid) + '/history', class: 'count' }, 'history →')),
    me ? h('dl', { class: 'kv' },
      h('dt', null, 'last seen'), h('dd', null, when(me.lastSeenAt), ' (', ago(me.lastSeenAt, hostNow()), ')'),
      h('dt', null, 'stopMessage'), h('dd', null, stopMessageText(me.stopMessage)),
      me.lastChannel ? [h('dt', null, 'last channel'), h('dd', null, me.lastChannel)] : null,
      me.route ? [h('dt', null, 'route'), h('dd', null, me.route)] : null) : h('p', { class: 'muted' }, 'Not in the session list (yet).'),
    h('div', { class: 'controls' }, h('button', {
      type: 'button', 'data-action': 'wake', title: 'wake the agent now (a manual run)',
      onclick: () => act('POST', '/api/sessions/' + enc(sid) + '/wake', { reason: 'manual' }, 'wake requested'),
    }, 'Wake now')),
    state.message ? h('p', { class: 'msg ' + (state.message.ok ? 'ok' : 'err'), id: 'control-message', role: 'status' }, state.message.text) : null);
  return h('div', null, head, timelinePanel(data), h('div', { class: 'grid' }, sections));
}

function timelinePanel(data) {
  const zoom = [[3600e3, '1 h'], [6 * 3600e3, '6 h'], [24 * 3600e3, '24 h']].map(([ms, label]) => h('button', {
    type: 'button', class: state.span === ms ? 'on' : '', onclick: () => { state.span = ms; render(); },
  }, '±' + label));
  const legend = [['task', 'clock task due'], ['run', 'running / delivered'], ['wait', 'waited on'],
    ['pause', 'paused'], ['bg', 'background'], ['stop', 'stopped / failed']];
  return h('section', { class: 'panel timeline', 'data-panel': 'timeline' },
    h('h2', null, 'Timeline', h('span', { class: 'count' }, 'past and next ' + duration(state.span).replace(/:00:00$/, ' h')), h('span', { class: 'zoom' }, zoom)),
    timeline(data, hostNow(), state.span),
    h('div', { class: 'legend' }, legend.map(([c, l]) => h('span', null, h('i', { class: 'l-' + c }), l)),
      h('span', null, 'lighter: expected')));
}

// --- history ---

async function historyView(seq, sid) {
  const r = await api('/api/sessions/' + enc(sid) + '/history', { text: true });
  if (seq !== state.seq) return null;
  if (!r.ok) { showBanner(explain(r)); return h('p', { class: 'muted', 'data-error': r.status }, 'No history to show.'); }
  showBanner('');
  const rows = (r.data.history || []).map((e) => h('tr', { 'data-kind': e.kind },
    h('td', null, when(e.at)), h('td', null, e.kind), h('td', { class: 'mono' }, e.id),
    h('td', null, h('span', { class: 'badge ' + String(e.status).split(' ')[0] }, e.status)),
    h('td', null, e.reason ?? h('span', { class: 'muted' }, token() ? '' : 'needs the token'))));
  return h('section', { class: 'panel', 'data-panel': 'history' },
    h('h2', null, 'History', h('span', { class: 'count' }, rows.length + ' transitions, newest first')),
    table(['at', 'kind', 'id', 'state', 'reason / error'], rows, 'Nothing recorded for this session.'));
}

// --- live countdowns ---

setInterval(() => {
  for (const el of document.querySelectorAll('.countdown[data-run="1"]')) {
    const left = Number(el.dataset.rem) - (performance.now() - Number(el.dataset.t0));
    el.textContent = duration(left);
  }
}, 250);

// --- the change stream ---
// fetch, not EventSource: EventSource cannot send the token header.

const stream = (() => {
  let ctrl = null, backoff = 1000;
  const live = document.getElementById('live');
  const setLive = (on, why) => { live.className = 'live ' + (on ? 'on' : 'off'); live.textContent = on ? 'live' : 'offline'; live.title = why || ''; };
  async function run(c) {
    try {
      const res = await fetch('/api/events', { headers: authHeaders(), signal: c.signal, cache: 'no-store', credentials: 'omit' });
      if (!res.ok) {
        setLive(false, 'change stream refused: ' + res.status);
        if (res.status === 401 || res.status === 403) return; // until the token changes
        throw new Error('status ' + res.status);
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          onEvent(buf.slice(0, i));
          buf = buf.slice(i + 2);
        }
      }
      throw new Error('stream ended');
    } catch (e) {
      if (c.signal.aborted) return;
      setLive(false, String(e));
      setTimeout(() => { if (ctrl === c) { run(c); } }, backoff);
      backoff = Math.min(backoff * 2, 30000);
    }
  }
  function onEvent(block) {
    let event = 'message', data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data += line.slice(5).trim();
    }
    if (event === 'ready') { setLive(true); backoff = 1000; refresh(); return; }
    if (event !== 'change') return;
    let sid = '*';
    try { sid = JSON.parse(data).session; } catch { /* treat as any */ }
    const r = state.route || {};
    if (r.name === 'sessions' || sid === '*' || sid === r.sid) refresh();
  }
  return {
    restart() {
      if (ctrl) ctrl.abort();
      ctrl = new AbortController();
      run(ctrl);
    },
  };
})();

tokenUI();
stream.restart();
render();

// Small DOM and formatting helpers. Text always goes in as text nodes, so
// task text and reasons cannot inject markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, v);
  }
  append(el, children);
  return el;
}

// duration formats ms as 1:02:03 or 2:03.
export function duration(ms) {
  const t = Math.max(0, Math.ceil(ms / 1000));
  const hh = Math.floor(t / 3600), mm = Math.floor((t % 3600) / 60), ss = t % 60;
  const p = (n) => String(n).padStart(2, '0');
  return hh > 0 ? `${hh}:${p(mm)}:${p(ss)}` : `${mm}:${p(ss)}`;
}

// when formats a Unix ms time; 0 is "—".
export function when(ms) {
  if (!ms) return '—';
  const d = new Date(ms);
  const today = new Date();
  const same = d.toDateString() === today.toDateString();
  return same ? d.toLocaleTimeString() : d.toLocaleString();
}

// ago formats a Unix ms time relative to now ("3 min ago", "in 2 h").
export function ago(ms, now) {
  if (!ms) return '—';
  const d = ms - now, a = Math.abs(d);
  let v;
  if (a < 45e3) v = Math.round(a / 1e3) + ' s';
  else if (a < 90 * 60e3) v = Math.round(a / 60e3) + ' min';
  else if (a < 36 * 3600e3) v = Math.round(a / 3600e3) + ' h';
  else v = Math.round(a / 86400e3) + ' d';
  return d < 0 ? v + ' ago' : 'in ' + v;
}

export function table(headers, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  return h('table', null,
    h('thead', null, h('tr', null, headers.map((x) => h('th', null, x)))),
    h('tbody', null, rows));
}

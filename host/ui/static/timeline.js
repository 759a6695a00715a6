// The timeline: one SVG picture of a session around now — clock tasks,
// timer spans (by state), and, where the host has them, cron jobs,
// heartbeat runs and deliveries. Each lane draws from the data its panel
// fetched; a lane without data is left out.

import { s, duration, when } from './dom.js';

const W = 1000, LEFT = 120, RIGHT = 990, ROW = 22, TOP = 24;
const LIVE = new Set(['Running', 'Waiting', 'Paused', 'Background']);

export function timeline(data, now, spanMs) {
  const t0 = now - spanMs, t1 = now + spanMs;
  const x = (t) => LEFT + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * (RIGHT - LEFT);
  const inside = (t) => t >= t0 && t <= t1;
  const lanes = [];

  if (data.tasks) {
    const marks = [];
    for (const t of data.tasks) {
      const label = `task ${t.taskId}${t.task ? ': ' + t.task : ''} — due ${when(t.dueAt)}${t.repeat ? ' (' + t.repeat + ')' : ''}`;
      if (inside(t.dueAt)) marks.push(diamond(x(t.dueAt), t.deliveredAt ? 'mark delivered' : 'mark task', label, 'task', t.taskId));
      const d = t.lastDeliveredAt || t.deliveredAt;
      if (d && d !== t.dueAt && inside(d)) marks.push(dot(x(d), 'mark delivered', `delivered ${when(d)}: task ${t.taskId}`, 'task-delivered', t.taskId));
    }
    lanes.push({ label: 'clock tasks', rows: [marks] });
  }
  if (data.timers) {
    const rows = [];
    const shown = data.timers.filter((t) => {
      const end = t.finishedAt || t.endAt || (t.pauseUntil ? t.pauseUntil + t.remainingMs : now);
      return end >= t0 && t.createdAt <= t1;
    }).slice(-10);
    for (const t of shown) rows.push(timerRow(t, now, x));
    lanes.push({ label: 'timers', rows: rows.length ? rows : [[]], labels: shown.map((t) => t.timerId) });
  }
  if (Array.isArray(data.jobs) && data.jobs.length) {
    const marks = [];
    for (const j of data.jobs) {
      const name = j.name || j.jobId;
      if (j.enabled && j.nextRunAt && inside(j.nextRunAt)) marks.push(dot(x(j.nextRunAt), 'mark job future', `job ${name}: next run ${when(j.nextRunAt)}`, 'job', j.jobId));
      if (j.lastRunAt && inside(j.lastRunAt)) marks.push(dot(x(j.lastRunAt), 'mark job', `job ${name}: ran ${when(j.lastRunAt)} (${j.lastStatus || ''})`, 'job-run', j.jobId));
    }
    lanes.push({ label: 'cron jobs', rows: [marks] });
  }
  if (data.runs && data.runs.runs) {
    // Every wake run: heartbeat, cron, manual, hook; and the next
    // heartbeat wake, drawn lighter.
    const marks = data.runs.runs.filter((r) => inside(r.startedAt)).map((r) => {
      const a = x(r.startedAt), b = Math.max(a + 3, x(r.startedAt + (r.durationMs || 0)));
      return rect(a, b, 'seg run ' + r.status, `${r.reason} run: ${r.status}${r.why ? ' (' + r.why + ')' : ''}, ${when(r.startedAt)}`, 'run', r.id);
    });
    const hb = data.heartbeat;
    if (hb && hb.enabled && hb.nextAt && inside(hb.nextAt)) {
      marks.push(dot(x(hb.nextAt), 'mark job future', `next heartbeat wake ${when(hb.nextAt)} (every ${hb.every})`, 'heartbeat-next', 'heartbeat'));
    }
    lanes.push({ label: 'runs (wakes)', rows: [marks] });
  }
  if (Array.isArray(data.deliveries)) {
    const marks = [];
    for (const d of data.deliveries) {
      const label = `delivery ${d.id} (${d.reason}, ${d.connector}): ${d.state}, ${d.attempts} attempts`;
      const at = d.deliveredAt || d.updatedAt || d.enqueuedAt;
      if (at && inside(at)) marks.push(dot(x(at), 'mark ' + d.state, label + ', ' + when(at), 'delivery', d.id));
      if (d.nextAt && d.state !== 'delivered' && d.state !== 'failed' && inside(d.nextAt)) {
        marks.push(dot(x(d.nextAt), 'mark ' + d.state + ' future', label + ', next attempt ' + when(d.nextAt), 'delivery-next', d.id));
      }
    }
    lanes.push({ label: 'deliveries', rows: [marks] });
  }

  let y = TOP;
  const body = [];
  for (const lane of lanes) {
    lane.rows.forEach((row, i) => {
      const g = s('g', { transform: `translate(0 ${y})` });
      g.append(s('line', { x1: LEFT, x2: RIGHT, y1: ROW / 2, y2: ROW / 2, class: 'grid-line' }));
      const label = lane.labels && lane.labels[i] ? lane.labels[i] : i === 0 ? lane.label : '';
      g.append(s('text', { x: 4, y: 15, class: 'lane-label' }, label));
      for (const m of row) g.append(m);
      body.push(g);
      y += ROW;
    });
    y += 6;
  }
  const height = y + 6;
  const axis = [];
  const step = spanMs <= 3600e3 ? 15 * 60e3 : spanMs <= 6 * 3600e3 ? 3600e3 : 4 * 3600e3;
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t);
    axis.push(s('line', { x1: x(t), x2: x(t), y1: 14, y2: height, class: 'grid-line' }));
    axis.push(s('text', { x: x(t), y: 11, 'text-anchor': 'middle' },
      d.getHours().toString().padStart(2, '0') + ':' + d.getMinutes().toString().padStart(2, '0')));
  }
  const nowLine = s('line', { x1: x(now), x2: x(now), y1: 14, y2: height, class: 'now' });
  return s('svg', { viewBox: `0 0 ${W} ${height}`, role: 'img', 'aria-label': 'session timeline', 'data-span': spanMs },
    axis, body, nowLine, s('text', { x: x(now) + 3, y: height - 3, fill: 'currentColor' }, 'now'));
}

// timerRow turns a timer's transitions into spans, each in its state's
// colour; what is still to come is drawn lighter.
function timerRow(t, now, x) {
  const hist = (t.history || []).slice().sort((a, b) => a.at - b.at);
  const out = [];
  const span = (a, b, status, future) => {
    if (b <= a) return;
    const xa = x(a), xb = Math.max(x(b), xa + 3);
    const label = `timer ${t.timerId}${t.reason ? ' "' + t.reason + '"' : ''}: ${status} ${when(a)} – ${when(b)}${future ? ' (expected)' : ''}`;
    out.push(rect(xa, xb, 'seg ' + status + (future ? ' future' : ''), label, 'timer', t.timerId));
  };
  for (let i = 0; i < hist.length; i++) {
    const cur = hist[i];
    const next = hist[i + 1];
    if (!LIVE.has(cur.status)) break;
    if (next) { span(cur.at, next.at, cur.status, false); continue; }
    // The last transition of a live timer: up to now, then what is expected.
    if (cur.status === 'Paused') {
      const resume = t.pauseUntil || now;
      span(cur.at, now, 'Paused', false);
      span(now, resume, 'Paused', true);
      span(resume, resume + t.remainingMs, 'Running', true);
    } else {
      span(cur.at, now, cur.status, false);
      span(now, t.endAt || now, cur.status, true);
    }
  }
  if (t.finishedAt && hist.length) {
    out.push(dot(x(t.finishedAt), 'mark end ' + t.status, `timer ${t.timerId}: ${t.status} ${when(t.finishedAt)} after ${duration(t.finishedAt - t.createdAt)}`, 'timer-end', t.timerId));
  }
  return out;
}

function rect(xa, xb, cls, label, kind, id) {
  return s('rect', { x: xa, y: 5, width: xb - xa, height: ROW - 10, rx: 2, class: cls, 'data-kind': kind, 'data-id': id }, s('title', null, label));
}

function dot(cx, cls, label, kind, id) {
  return s('circle', { cx, cy: ROW / 2, r: 4, class: cls, 'data-kind': kind, 'data-id': id }, s('title', null, label));
}

function diamond(cx, cls, label, kind, id) {
  const c = ROW / 2, r = 6;
  return s('path', { d: `M${cx} ${c - r}L${cx + r} ${c}L${cx} ${c + r}L${cx - r} ${c}Z`, class: cls, 'data-kind': kind, 'data-id': id }, s('title', null, label));
}

// The panels of a session page. Each renders from its own API call; a
// panel that is not core hides itself while its API answers 404, so a
// host without that feature simply shows no such panel. Adding a feature
// to the page is adding one entry here (and, for the timeline, one lane in
// timeline.js).

import { h, duration, when, ago, table } from './dom.js';

const enc = encodeURIComponent;
const base = (sid) => '/api/sessions/' + enc(sid);
const LIVE = new Set(['Running', 'Waiting', 'Paused', 'Background']);

// countdown is a span the page's ticker updates (see app.js): it counts
// rem ms down from now when running, and stands still when not.
export function countdown(rem, running) {
  return h('span', {
    class: 'countdown',
    dataset: { rem: String(rem), t0: String(performance.now()), run: running ? '1' : '' },
  }, duration(rem));
}

function timersPanel() {
  return {
    key: 'timers', title: 'Timers', core: true, text: true,
    path: (sid) => base(sid) + '/timers',
    count: (d) => d.filter((t) => LIVE.has(t.status)).length + ' live',
    render(d, ctx) {
      const rows = d.slice().reverse().map((t) => {
        const live = LIVE.has(t.status);
        const running = live && t.status !== 'Paused';
        const btn = (label, action, cls, body) => h('button', {
          type: 'button', class: cls, 'data-action': action,
          onclick: () => ctx.act('POST', base(ctx.sid) + '/timers/' + enc(t.timerId) + '/' + action,
            Object.assign({ reason: action + ' from the dashboard' }, body ? body() : {}), action + ' timer ' + t.timerId),
        }, label);
        const secs = h('input', {
          type: 'number', min: '1', step: '1', 'aria-label': 'pause seconds', 'data-pause-seconds': t.timerId,
          value: ctx.inputs.get('pause:' + t.timerId) || '60',
          oninput: (e) => ctx.inputs.set('pause:' + t.timerId, e.target.value),
        });
        const controls = !live ? h('span', { class: 'muted' }, 'ended ' + when(t.finishedAt))
          : h('div', { class: 'controls' },
            t.status === 'Paused'
              ? btn('Resume', 'resume')
              : [btn('Pause', 'pause', '', () => ({ pauseSeconds: Number(secs.value) })), secs, h('span', { class: 'muted' }, 's')],
            t.status !== 'Background' && t.status !== 'Paused' ? btn('Cancel', 'cancel') : null,
            btn('Stop', 'stop', 'danger'));
        let left = h('span', { class: 'muted' }, '—');
        if (live) {
          left = h('span', null, countdown(t.remainingMs, running),
            t.status === 'Paused' && t.pauseUntil
              ? h('span', { class: 'muted' }, ' · resumes ', ago(t.pauseUntil, ctx.now())) : null);
        }
        return h('tr', { 'data-timer': t.timerId, 'data-status': t.status },
          h('td', null, h('span', { class: 'mono' }, t.timerId), t.reason ? h('div', { class: 'muted' }, t.reason) : null),
          h('td', null, h('span', { class: 'badge ' + t.status, 'data-role': 'status' }, t.status)),
          h('td', { class: 'num' }, left),
          h('td', { class: 'num' }, duration(t.totalMs)),
          h('td', null, controls));
      });
      return table(['timer', 'state', 'left', 'total', 'controls'], rows, 'No timers in this session.');
    },
  };
}

function tasksPanel() {
  return {
    key: 'tasks', title: 'Clock tasks', core: true, text: true,
    path: (sid) => base(sid) + '/tasks',
    count: (d) => d.length + '',
    render(d, ctx) {
      const rows = d.slice().sort((a, b) => a.dueAt - b.dueAt).map((t) => {
        const state = t.reserved ? 'reserved' : t.deliveredAt ? 'delivered' : t.dueAt <= ctx.now() ? 'due' : 'pending';
        return h('tr', { 'data-task': t.taskId },
          h('td', null, h('span', { class: 'mono' }, t.taskId), t.kind === 'notice' ? h('span', { class: 'muted' }, ' (timer notice)') : null),
          h('td', null, t.task !== undefined ? t.task : h('span', { class: 'muted', title: 'task text needs the token' }, 'hidden')),
          h('td', null, when(t.dueAt), h('div', { class: 'muted' }, ago(t.dueAt, ctx.now()))),
          h('td', null, t.repeat ? t.repeat + (t.maxRuns ? ` (${t.runs}/${t.maxRuns})` : ` (${t.runs} runs)`) : '—'),
          h('td', null, h('span', { class: 'badge ' + (state === 'delivered' ? 'delivered' : 'queued') }, state)));
      });
      return table(['task', 'text', 'due', 'repeat', 'state'], rows, 'No clock tasks.');
    },
  };
}

// --- planned panels: shown when the host has the API ---

function jobsPanel() {
  return {
    key: 'jobs', title: 'Cron jobs', text: true,
    path: (sid) => base(sid) + '/jobs',
    count: (d) => (d.jobs || []).length + '',
    render(d, ctx) {
      const jb = (jid) => base(ctx.sid) + '/jobs/' + enc(jid);
      const rows = (d.jobs || []).map((j) => h('tr', { 'data-job': j.id },
        h('td', null, j.name || h('span', { class: 'mono' }, j.id)),
        h('td', null, j.kind, ' ', h('span', { class: 'mono' }, j.schedule), j.tz ? h('div', { class: 'muted' }, j.tz) : null),
        h('td', null, j.target || '—'),
        h('td', null, j.enabled ? when(j.nextRunAt) : h('span', { class: 'badge Paused' }, 'paused')),
        h('td', null, when(j.lastRunAt), j.lastStatus ? h('div', { class: 'muted' }, j.lastStatus) : null),
        h('td', null, h('div', { class: 'controls' },
          h('button', { type: 'button', 'data-action': 'run', onclick: () => ctx.act('POST', jb(j.id) + '/run', {}, 'run job ' + (j.name || j.id)) }, 'Run now'),
          j.enabled
            ? h('button', { type: 'button', 'data-action': 'pause', onclick: () => ctx.act('POST', jb(j.id) + '/pause', {}, 'pause job ' + (j.name || j.id)) }, 'Pause')
            : h('button', { type: 'button', 'data-action': 'resume', onclick: () => ctx.act('POST', jb(j.id) + '/resume', {}, 'resume job ' + (j.name || j.id)) }, 'Resume'),
          h('button', { type: 'button', class: 'danger', 'data-action': 'delete', onclick: () => ctx.act('DELETE', jb(j.id), undefined, 'delete job ' + (j.name || j.id)) }, 'Delete')))));
      const f = (name, ph) => h('input', { type: 'text', name, placeholder: ph });
      const kind = h('select', { name: 'kind' }, ['cron', 'every', 'at'].map((k) => h('option', { value: k }, k)));
      const form = h('form', {
        class: 'inline', 'data-form': 'add-job',
        onsubmit: (e) => {
          e.preventDefault();
          const v = Object.fromEntries(new FormData(e.target));
          ctx.act('POST', base(ctx.sid) + '/jobs', { name: v.name, kind: v.kind, schedule: v.schedule, tz: v.tz, target: v.target }, 'add job ' + v.name);
        },
      }, f('name', 'name'), kind, f('schedule', '*/5 * * * * or 10m'), f('tz', 'time zone (optional)'), f('target', 'prompt / target'),
      h('button', { type: 'submit' }, 'Add job'));
      return h('div', null, table(['job', 'schedule', 'target', 'next run', 'last run', ''], rows, 'No cron jobs.'), form);
    },
  };
}

function heartbeatPanel() {
  return {
    key: 'heartbeat', title: 'Heartbeat', text: true,
    path: (sid) => base(sid) + '/heartbeat',
    count: (d) => (d.enabled ? 'on' : 'off'),
    render(d, ctx) {
      const ah = d.activeHours || {};
      const inp = (name, value, attrs) => h('input', Object.assign({ type: 'text', name, value: value ?? '' }, attrs || {}));
      return h('form', {
        class: 'inline', 'data-form': 'heartbeat',
        onsubmit: (e) => {
          e.preventDefault();
          const fd = new FormData(e.target);
          ctx.act('PUT', base(ctx.sid) + '/heartbeat', {
            enabled: fd.get('enabled') === 'on', every: fd.get('every'), prompt: fd.get('prompt'),
            activeHours: { start: fd.get('start'), end: fd.get('end'), timezone: fd.get('timezone') },
            onlyWhenPending: fd.get('onlyWhenPending') === 'on',
          }, 'save heartbeat');
        },
      },
      h('label', null, h('input', { type: 'checkbox', name: 'enabled', checked: !!d.enabled }), ' enabled'),
      h('label', null, 'every ', inp('every', d.every, { size: 5 })),
      h('label', null, 'prompt ', inp('prompt', d.prompt)),
      h('label', null, 'active ', inp('start', ah.start, { size: 5, placeholder: '09:00' }), '–', inp('end', ah.end, { size: 5, placeholder: '18:00' })),
      inp('timezone', ah.timezone, { placeholder: 'time zone' }),
      h('label', null, h('input', { type: 'checkbox', name: 'onlyWhenPending', checked: !!d.onlyWhenPending }), ' only when pending'),
      h('button', { type: 'submit' }, 'Save'));
    },
  };
}

function eventsPanel() {
  return {
    key: 'events', title: 'Pending system events', text: true,
    path: (sid) => base(sid) + '/events',
    count: (d) => (d.events || []).length + '',
    render(d, ctx) {
      const rows = (d.events || []).map((e) => h('tr', null,
        h('td', { class: 'mono' }, e.contextKey), h('td', null, e.text ?? h('span', { class: 'muted' }, 'hidden')),
        h('td', null, when(e.at), h('div', { class: 'muted' }, ago(e.at, ctx.now())))));
      return table(['context', 'text', 'at'], rows, 'No pending events.');
    },
  };
}

function runsPanel() {
  return {
    key: 'runs', title: 'Runs', text: true,
    path: (sid) => base(sid) + '/runs',
    count: (d) => (d.runs || []).length + '',
    render(d) {
      const rows = (d.runs || []).slice(0, 50).map((r) => h('tr', { 'data-run': r.id },
        h('td', null, r.reason), h('td', null, h('span', { class: 'badge ' + r.status }, r.status)),
        h('td', null, when(r.startedAt)), h('td', { class: 'num' }, r.durationMs ? (r.durationMs / 1000).toFixed(1) + ' s' : '—')));
      return table(['reason', 'status', 'started', 'took'], rows, 'No runs yet.');
    },
  };
}

function deliveriesPanel() {
  return {
    key: 'deliveries', title: 'Deliveries', text: true,
    path: (sid) => base(sid) + '/deliveries',
    count: (d) => (d.deliveries || []).filter((x) => x.state === 'failed').length + ' failed',
    render(d, ctx) {
      const rows = (d.deliveries || []).map((x) => h('tr', { 'data-delivery': x.id },
        h('td', { class: 'mono' }, x.id), h('td', null, x.connector),
        h('td', null, h('span', { class: 'badge ' + x.state }, x.state)),
        h('td', { class: 'num' }, x.attempts), h('td', null, when(x.nextAttemptAt)),
        h('td', null, x.lastError || ''),
        h('td', null, x.state === 'failed' ? h('button', {
          type: 'button', 'data-action': 'retry',
          onclick: () => ctx.act('POST', base(ctx.sid) + '/deliveries/' + enc(x.id) + '/retry', {}, 'retry delivery ' + x.id),
        }, 'Retry') : null)));
      return table(['delivery', 'connector', 'state', 'attempts', 'next attempt', 'last error', ''], rows, 'No deliveries.');
    },
  };
}

// panels in page order.
export const panels = [timersPanel(), tasksPanel(), jobsPanel(), heartbeatPanel(), eventsPanel(), runsPanel(), deliveriesPanel()];

// The panels of a session page. Each renders from its own API call
// (docs/dashboard.md lists them); a panel that is not core hides itself
// if its API answers 404 (an older host without that feature). Adding a feature
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

// --- scheduler, cron and delivery panels (docs/host-api.md) ---

function jobsPanel() {
  return {
    key: 'jobs', title: 'Cron jobs', text: true,
    path: (sid) => base(sid) + '/jobs',
    count: (d) => d.length + '',
    render(d, ctx) {
      const jb = (jid) => base(ctx.sid) + '/jobs/' + enc(jid);
      const rows = d.map((j) => {
        const name = j.name || j.jobId;
        const btn = (label, action, method, cls) => h('button', {
          type: 'button', class: cls, 'data-action': action,
          onclick: () => ctx.act(method, action === 'delete' ? jb(j.jobId) : jb(j.jobId) + '/' + action, undefined, action + ' job ' + name),
        }, label);
        return h('tr', { 'data-job': j.jobId, 'data-enabled': j.enabled ? '1' : '0' },
          h('td', null, j.name ? j.name : null, h('div', { class: j.name ? 'muted mono' : 'mono' }, j.jobId),
            j.source === 'config' ? h('div', { class: 'muted' }, 'from the host config') : null),
          h('td', null, j.kind, ' ', h('span', { class: 'mono' }, j.schedule), j.tz ? h('div', { class: 'muted' }, j.tz) : null),
          h('td', null, j.target || 'main', h('div', { class: j.text !== undefined ? '' : 'muted' }, j.text !== undefined ? j.text : 'text needs the token')),
          h('td', null, j.enabled ? when(j.nextRunAt) : h('span', { class: 'badge Paused' }, 'paused'),
            j.enabled && j.nextRunAt ? h('div', { class: 'muted' }, ago(j.nextRunAt, ctx.now())) : null),
          h('td', { 'data-role': 'last-run' }, when(j.lastRunAt),
            j.lastStatus ? h('div', null, h('span', { class: 'badge ' + j.lastStatus }, j.lastStatus), ' ', j.runs + ' runs') : null,
            j.lastError ? h('div', { class: 'muted' }, j.lastError) : null),
          h('td', null, h('div', { class: 'controls' },
            btn('Run now', 'run', 'POST'),
            j.enabled ? btn('Pause', 'pause', 'POST') : btn('Resume', 'resume', 'POST'),
            btn('Delete', 'delete', 'DELETE', 'danger'))));
      });
      const keep = (name) => ({ value: ctx.inputs.get('job:' + name) || '', oninput: (e) => ctx.inputs.set('job:' + name, e.target.value) });
      const f = (name, ph, attrs) => h('input', Object.assign({ type: 'text', name, placeholder: ph, 'aria-label': name }, keep(name), attrs || {}));
      const kind = h('select', { name: 'kind', 'aria-label': 'kind' },
        [['', 'kind: from schedule'], ['every', 'every'], ['cron', 'cron'], ['at', 'at']].map(([k, l]) => h('option', { value: k }, l)));
      const target = h('select', { name: 'target', 'aria-label': 'target' }, ['main', 'isolated'].map((k) => h('option', { value: k }, k)));
      const form = h('form', {
        class: 'inline', 'data-form': 'add-job',
        onsubmit: (e) => {
          e.preventDefault();
          const v = Object.fromEntries(new FormData(e.target));
          for (const k of ['name', 'schedule', 'tz', 'text']) ctx.inputs.delete('job:' + k);
          ctx.act('POST', base(ctx.sid) + '/jobs',
            { name: v.name, kind: v.kind, schedule: v.schedule, tz: v.tz, text: v.text, target: v.target }, 'add job ' + (v.name || v.schedule));
        },
      }, f('name', 'name (optional)', { size: 10 }), kind, f('schedule', '10m, 0 9 * * 1-5 or 2026-12-01T09:00', { size: 16 }),
      f('tz', 'time zone (optional)', { size: 10 }), target, f('text', 'what the agent is told'),
      h('button', { type: 'submit' }, 'Add job'));
      return h('div', null, table(['job', 'schedule', 'target and text', 'next run', 'last run', ''], rows, 'No cron jobs.'), form);
    },
  };
}

function heartbeatPanel() {
  return {
    key: 'heartbeat', title: 'Heartbeat', text: true,
    path: (sid) => base(sid) + '/heartbeat',
    count: (d) => (d.enabled ? 'every ' + d.every : 'off'),
    render(d, ctx) {
      const ah = d.activeHours || {};
      // Typed values survive the re-renders that change notices cause.
      const inp = (name, value, attrs) => h('input', Object.assign({
        type: 'text', name, value: ctx.inputs.get('hb:' + name) ?? value ?? '', 'aria-label': name,
        oninput: (e) => ctx.inputs.set('hb:' + name, e.target.value),
      }, attrs || {}));
      const form = h('form', {
        class: 'inline', 'data-form': 'heartbeat',
        onsubmit: (e) => {
          e.preventDefault();
          const fd = new FormData(e.target);
          for (const k of ['every', 'prompt', 'start', 'end', 'timezone']) ctx.inputs.delete('hb:' + k);
          ctx.act('PUT', base(ctx.sid) + '/heartbeat', {
            enabled: fd.get('enabled') === 'on', every: fd.get('every'), prompt: fd.get('prompt'),
            activeHours: { start: fd.get('start'), end: fd.get('end'), timezone: fd.get('timezone') },
            onlyWhenPending: fd.get('onlyWhenPending') === 'on',
          }, 'save heartbeat');
        },
      },
      h('label', null, h('input', { type: 'checkbox', name: 'enabled', checked: !!d.enabled }), ' enabled'),
      h('label', null, 'every ', inp('every', d.every, { size: 6, placeholder: '30m' })),
      h('label', null, 'prompt ', inp('prompt', d.prompt, { placeholder: 'the default prompt' })),
      h('label', null, 'active ', inp('start', ah.start, { size: 5, placeholder: '09:00' }), '–', inp('end', ah.end, { size: 5, placeholder: '18:00' })),
      inp('timezone', ah.timezone, { placeholder: 'time zone', size: 12 }),
      h('label', null, h('input', { type: 'checkbox', name: 'onlyWhenPending', checked: !!d.onlyWhenPending }), ' only when pending'),
      h('button', { type: 'submit' }, 'Save'),
      d.source === 'session' ? h('button', {
        type: 'button', 'data-action': 'reset-heartbeat',
        onclick: () => ctx.act('DELETE', base(ctx.sid) + '/heartbeat', undefined, 'heartbeat back to the host config'),
      }, 'Use host default') : null);
      return h('div', null,
        h('p', { class: 'muted', 'data-role': 'heartbeat-state' },
          d.source === 'session' ? 'Set for this session. ' : 'The host config\'s default. ',
          d.nextAt ? ['Next wake ', when(d.nextAt), ' (', ago(d.nextAt, ctx.now()), ').'] : 'No wake planned.'),
        form);
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
        h('td', { class: 'mono' }, e.contextKey || '—'), h('td', null, e.text ?? h('span', { class: 'muted' }, 'hidden')),
        h('td', null, e.source || ''),
        h('td', null, when(e.at), h('div', { class: 'muted' }, ago(e.at, ctx.now())))));
      const keep = (name) => ({ value: ctx.inputs.get('event:' + name) || '', oninput: (e) => ctx.inputs.set('event:' + name, e.target.value) });
      const form = h('form', {
        class: 'inline', 'data-form': 'add-event',
        onsubmit: (e) => {
          e.preventDefault();
          const v = Object.fromEntries(new FormData(e.target));
          ctx.inputs.delete('event:text'); ctx.inputs.delete('event:contextKey');
          ctx.act('POST', base(ctx.sid) + '/events', { text: v.text, contextKey: v.contextKey }, 'queue a system event');
        },
      }, h('input', Object.assign({ type: 'text', name: 'text', placeholder: 'event text', 'aria-label': 'event text' }, keep('text'))),
      h('input', Object.assign({ type: 'text', name: 'contextKey', placeholder: 'context key (optional)', size: 14, 'aria-label': 'context key' }, keep('contextKey'))),
      h('button', { type: 'submit' }, 'Queue event'));
      return h('div', null, table(['context', 'text', 'source', 'at'], rows, 'No pending events.'), form);
    },
  };
}

function runsPanel() {
  return {
    key: 'runs', title: 'Runs', text: true,
    path: (sid) => base(sid) + '/runs',
    count: (d) => (d.runs || []).length + '',
    render(d) {
      const rows = (d.runs || []).slice(0, 50).map((r) => h('tr', { 'data-run': r.id, 'data-reason': r.reason },
        h('td', null, r.reason, h('div', { class: 'muted mono' }, r.id)),
        h('td', null, h('span', { class: 'badge ' + r.status }, r.status), r.why ? h('div', { class: 'muted' }, r.why) : null,
          r.error ? h('div', { class: 'muted' }, r.error) : null),
        h('td', null, when(r.startedAt)),
        h('td', { class: 'num' }, r.durationMs ? (r.durationMs / 1000).toFixed(1) + ' s' : '—'),
        h('td', { class: 'num' }, r.inputTokens || r.outputTokens ? (r.inputTokens || 0) + ' / ' + (r.outputTokens || 0) : '—'),
        h('td', null, r.reply ? r.reply : h('span', { class: 'muted' }, ''))));
      return table(['reason', 'status', 'started', 'took', 'tokens in / out', 'reply'], rows, 'No runs yet.');
    },
  };
}

function deliveriesPanel() {
  return {
    key: 'deliveries', title: 'Deliveries', text: true,
    path: (sid) => base(sid) + '/deliveries',
    count: (d) => d.filter((x) => x.state === 'failed' || x.state === 'unknown').length + ' failed or unknown',
    render(d, ctx) {
      const rows = d.map((x) => h('tr', { 'data-delivery': x.id, 'data-state': x.state },
        h('td', null, h('span', { class: 'mono' }, x.id), h('div', { class: 'muted' }, x.reason)),
        h('td', null, x.connector),
        h('td', null, h('span', { class: 'badge ' + x.state, 'data-role': 'state' }, x.state)),
        h('td', { class: 'num', 'data-role': 'attempts' }, x.attempts),
        h('td', null, x.deliveredAt ? ['delivered ', when(x.deliveredAt)] : x.nextAt ? ['next ', when(x.nextAt)] : '—'),
        h('td', null, x.text !== undefined ? x.text : null, x.lastError ? h('div', { class: 'muted' }, x.lastError) : null),
        h('td', null, x.state === 'failed' || x.state === 'unknown' ? h('button', {
          type: 'button', 'data-action': 'retry',
          onclick: () => ctx.act('POST', base(ctx.sid) + '/deliveries/' + enc(x.id) + '/retry', undefined, 'retry delivery ' + x.id),
        }, 'Retry') : null)));
      return table(['delivery', 'connector', 'state', 'attempts', 'when', 'text / last error', ''], rows, 'No deliveries.');
    },
  };
}

// panels in page order.
export const panels = [timersPanel(), tasksPanel(), jobsPanel(), heartbeatPanel(), eventsPanel(), runsPanel(), deliveriesPanel()];

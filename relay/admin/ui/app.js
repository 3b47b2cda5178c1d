// Postino's queue dashboard. It reads the admin API beside it (same origin,
// fetch only) and draws what it gets. No framework and no build step: the
// relay serves this file as it is, and the page's Content-Security-Policy
// allows no inline script or style, so everything below builds DOM nodes and
// sets styles through the CSSOM only.
'use strict';

const TOKEN_KEY = 'postino.admin.token';
const REFRESH_MS = 5000;

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;

// el builds an element: el('td', {class: 'x', dataset: {id: 'a'}}, child, 'text').
// Text goes in as text nodes, never as HTML, so nothing a message carries
// (a subject, a reason, an address) can inject markup.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false || c === '') continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

// ---- the API -------------------------------------------------------------

// AuthNeeded is thrown when the API answered 401: the token form is shown
// and the caller just stops.
class AuthNeeded extends Error {}

// api calls the admin API with the token, if one was given, and returns the
// parsed JSON (or the Response itself with raw: true, for downloads). An
// error answer becomes an Error carrying the API's own words.
async function api(path, opts = {}) {
  const headers = new Headers(opts.headers);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.set('Authorization', 'Bearer ' + token);
  const resp = await fetch(path, {method: opts.method || 'GET', headers, cache: 'no-store'});
  if (resp.status === 401) {
    askToken(token ? 'That token was refused.' : '');
    throw new AuthNeeded('the admin API wants a token');
  }
  if (!resp.ok) {
    let msg = `${resp.status} ${resp.statusText}`;
    try {
      const body = await resp.json();
      if (body && body.error) msg = body.error;
    } catch (_) { /* not JSON: keep the HTTP status */ }
    throw new Error(msg);
  }
  return opts.raw ? resp : resp.json();
}

function askToken(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  const first = $('#auth').hidden;
  $('#auth').hidden = false;
  $('#main').hidden = true;
  $('#auth-error').textContent = why;
  $('#auth-error').hidden = !why;
  if (first) $('#token').focus();
  setUpdated('waiting for the admin token', true);
}

// ---- small helpers -------------------------------------------------------

// kind picks a status's colour. The statuses themselves come from the
// server; only their look is decided here.
function kind(status) {
  const s = String(status).toUpperCase();
  if (/FAILED|INVALID|BOUNCED|PEC-NOT-|COMPLAINED/.test(s)) return 'bad';
  if (/SENT|PEC-DELIVERED/.test(s)) return 'good';
  if (/DELAYED|DEFERRED|PENDING|PARKED/.test(s)) return 'warn';
  if (/PEC-ACCEPTED/.test(s)) return 'info';
  return 'neutral';
}

function badge(status) {
  return el('span', {class: 'badge ' + kind(status)}, status);
}

const pad = n => String(n).padStart(2, '0');

// fmtTime shows an API time in the browser's zone; Go's zero time is none.
function fmtTime(iso) {
  const d = new Date(iso);
  if (!iso || isNaN(d) || d.getFullYear() < 1971) return '';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

const hhmm = d => `${pad(d.getHours())}:${pad(d.getMinutes())}`;

// zoneText names the zone the page shows times in, once, in the header:
// every time on the page is fmtTime's, in that zone.
function zoneText() {
  const off = -new Date().getTimezoneOffset();
  const sign = off < 0 ? '-' : '+';
  const utc = `UTC${sign}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return `times in ${name && name !== 'UTC' ? name + ', ' : ''}${utc}`;
}

// The times the relay writes inside its texts (RFC 3339), and the SMTP
// replies in them (550 5.1.1): the first are shown as fmtTime shows times,
// the second set apart from the words around them.
const ISO_TIME = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)/g;
const SMTP_REPLY = /\b[245]\d\d(?: [245]\.\d{1,3}\.\d{1,3})?(?=\s)/g;

// readable is a text of the relay's with its times in the page's format.
const readable = text => String(text || '').replace(ISO_TIME, t => fmtTime(t) || t);

// reasonView shows a reason: times as the page shows them, SMTP replies
// in code type, the rest as text.
function reasonView(text, cls) {
  const t = readable(text);
  const parts = [];
  let at = 0;
  for (const m of t.matchAll(SMTP_REPLY)) {
    parts.push(t.slice(at, m.index), el('code', {class: 'smtp'}, m[0]));
    at = m.index + m[0].length;
  }
  parts.push(t.slice(at));
  return el('span', {class: cls || 'reason', title: t}, parts);
}

function fmtSize(n) {
  if (!(n > 0)) return '';
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

// redraw replaces a box's content only when its data changed: the overview
// refreshes every few seconds, and redrawing the same thing would make a
// button vanish under the pointer mid-click (and lose the scroll position).
function redraw(box, data, build) {
  const sig = JSON.stringify(data);
  if (box.dataset.sig === sig) return;
  box.dataset.sig = sig;
  box.replaceChildren(...[build(data)].flat());
}

function notify(text, error) {
  const n = $('#notice');
  n.textContent = text;
  n.classList.toggle('error', !!error);
  n.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { n.hidden = true; }, error ? 10000 : 5000);
}

function setUpdated(text, error) {
  const u = $('#updated');
  u.textContent = text;
  u.classList.toggle('error', !!error);
}

// ---- overview ------------------------------------------------------------

let last = {counts: {}, minutes: [], ready: null, suspended: []};
let busy = false;

// refresh reloads the overview and the open message. Ticks that come while
// one is still running are dropped rather than queued.
async function refresh() {
  if (busy || !$('#auth').hidden) return;
  busy = true;
  try {
    const stats = await api('/v1/stats');
    // Why READY messages wait takes a read of them: asked apart, and only
    // when there are some.
    const ready = (stats.counts || {}).READY ? await api('/v1/stats/ready') : null;
    // So do the latest failed, bounced and undelivered messages.
    const listed = Object.entries(stats.counts || {}).some(([st, n]) => n > 0 && LISTED.test(st));
    const recent = listed ? await api('/v1/stats/recent') : {};
    const suspended = stats.suspended_batches || [];
    // A batch suspended or activated since: its campaign row changes now.
    if (String(suspended) !== String(last.suspended)) campaignTick = 0;
    last = {counts: stats.counts || {}, minutes: stats.minutes || [], ready, suspended};
    drawQueue();
    drawSuspended();
    drawCharts();
    drawRecent(recent);
    await drawSupCounts();
    await drawSites();
    // A batch's progress reads its messages: every sixth refresh, after
    // an action, and when a batch was suspended or activated.
    if (campaignTick++ % 6 === 0) await drawCampaigns();
    if (openId) await showMessage(openId);
    setUpdated('updated ' + fmtTime(new Date().toISOString()), false);
  } catch (err) {
    if (!(err instanceof AuthNeeded)) setUpdated('cannot read the API: ' + err.message, true);
  } finally {
    busy = false;
  }
}

// drawQueue lists the statuses in name order (stable, so rows do not jump
// about as counts change), each with a bar against the largest count.
function drawQueue() {
  const counts = last.counts;
  const showEmpty = $('#show-empty').checked;
  const names = Object.keys(counts).sort();
  const max = Math.max(1, ...Object.values(counts));
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  $('#queue-total').textContent = total;
  const ready = last.ready;
  redraw($('#queue tbody'), {counts, showEmpty, ready}, () => {
    const bar = (n, cls) => {
      const b = el('span', {class: 'bar ' + cls});
      b.style.width = (100 * n / max).toFixed(1) + '%';
      return b;
    };
    const rows = names.filter(n => showEmpty || counts[n] > 0).flatMap(n => [
      el('tr', {dataset: {status: n}},
        el('th', {}, el('button', {type: 'button', class: 'plain', dataset: {list: n},
          title: `List the messages that are ${n}`}, badge(n))),
        el('td', {class: 'count'}, counts[n]),
        el('td', {class: 'bar-cell'}, bar(counts[n], kind(n)))),
      ...(n === 'READY' && ready ? waitingRows(ready, bar) : []),
    ]);
    return rows.length ? rows : el('tr', {class: 'empty'}, el('td', {colspan: 3}, 'The outbox is empty.'));
  });
}

// WAITING says what each kind of READY message waits for.
const WAITING = {
  due: 'due now',
  deferred: 'deferred: a try failed for now, retried later',
  scheduled: 'scheduled: to leave at the time the app asked',
  suspended: 'held: its batch is suspended',
};

// waitingRows break READY down by what its messages wait for.
function waitingRows(ready, bar) {
  const rows = Object.keys(WAITING).filter(w => ready[w] > 0).map(w =>
    el('tr', {class: 'waiting', dataset: {waiting: w}},
      el('th', {}, WAITING[w]),
      el('td', {class: 'count'}, ready[w]),
      el('td', {class: 'bar-cell'}, bar(ready[w], w === 'due' ? 'neutral' : 'warn'))));
  if (ready.partial) {
    rows.push(el('tr', {class: 'waiting note'}, el('td', {colspan: 3}, `among the first ${ready.counted} in line`)));
  }
  return rows;
}

// drawSuspended lists the suspended batches, each with its Activate.
function drawSuspended() {
  redraw($('#suspended-batches'), last.suspended, codes => codes.length
    ? el('ul', {class: 'batches'}, codes.map(c => el('li', {dataset: {batch: c}},
      el('code', {}, c),
      el('button', {type: 'button', class: 'secondary', dataset: {action: 'activate', batch: c}}, 'Activate'))))
    : el('p', {class: 'empty'}, 'No batch is suspended.'));
}

let campaignTick = 0;

// pct writes a share (0.05) as a percentage.
const pct = f => (100 * f).toFixed(1) + '%';

// drawCampaigns lists the batches with their progress, and the brake's
// rates against its thresholds; a rate over its threshold is marked, and
// a tripped batch says why.
async function drawCampaigns() {
  const page = await api('/v1/batches?limit=20');
  redraw($('#campaigns'), page, p => {
    const batches = p.batches || [];
    if (!batches.length) return el('p', {class: 'empty'}, 'No batch has sent anything yet.');
    const rate = (r, max, tried, min) => el('td', {class: 'count' + (tried >= min && r > max ? ' over' : ''),
      title: `threshold ${pct(max)}, counted once ${min} are tried`}, pct(r));
    return el('table', {class: 'campaigns'},
      el('thead', {}, el('tr', {}, ...['batch', 'sent', 'failed', 'bounced', 'suppressed', 'waiting', 'held', 'hard', 'complaints', '']
        .map(h => el('th', {}, h)))),
      el('tbody', {}, batches.map(b => {
        const g = b.progress, k = b.brake, tried = k.sent + k.hard;
        return [
          el('tr', {dataset: {batch: b.code}},
            el('th', {}, el('code', {}, b.code), b.suspended ? badge(b.tripped ? 'TRIPPED' : 'SUSPENDED') : ''),
            ...[g.sent, g.failed, g.bounced, g.suppressed, g.waiting + g.in_flight, g.held].map(n => el('td', {class: 'count'}, n)),
            rate(k.hard_rate, k.max_hard_rate, tried, k.min_sent),
            rate(k.complaint_rate, k.max_complaint_rate, tried, k.min_sent),
            el('td', {}, b.suspended
              ? el('button', {type: 'button', class: 'secondary', dataset: {action: 'activate', batch: b.code}}, 'Activate')
              : '')),
          ...(b.tripped ? [el('tr', {class: 'waiting note'}, el('td', {colspan: 10}, b.tripped))] : []),
        ];
      }).flat()));
  });
}

// SITE_KIND is the badge colour of a site's state.
const SITE_KIND = {up: 'good', 'backing off': 'warn', down: 'bad', suspended: 'bad'};

// localTimes shows the UTC times a text of the relay's holds (RFC 3339)
// in the browser's zone, as the page shows every time.
const localTimes = t => t.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, fmtTime);

// drawSites lists the sites of MX delivery: their state (why, until
// when), domains, mail queued and in flight, sessions and rate now
// against the rule's; each with Suspend for the chosen time, or Resume.
async function drawSites() {
  const res = await api('/v1/destinations');
  redraw($('#site-list'), res, r => {
    const sites = r.sites || [];
    if (!sites.length) return el('p', {class: 'empty'}, 'No mail went to an MX host lately.');
    const rate = n => n ? n.toFixed(n < 10 ? 1 : 0) : '–';
    return el('table', {class: 'campaigns sites'},
      el('thead', {}, el('tr', {}, ...['site', 'domains', 'queued', 'in flight', 'sessions', 'per minute', '']
        .map(h => el('th', {}, h)))),
      el('tbody', {}, sites.map(s => [
        el('tr', {dataset: {site: s.key, state: s.state}},
          el('th', {}, el('code', {}, s.key), ' ', el('span', {class: 'badge ' + (SITE_KIND[s.state] || 'neutral')}, s.state)),
          el('td', {class: 'count', title: (s.domains || []).join(' ')}, (s.domains || []).length),
          el('td', {class: 'count'}, s.queued),
          el('td', {class: 'count'}, s.in_flight),
          el('td', {class: 'count', title: `the rule allows ${s.limits.sessions}; share ${s.share.toFixed(2)}`}, `${s.sessions} / ${s.now.sessions}`),
          el('td', {class: 'count'}, rate(s.now.messages_per_minute)),
          el('td', {}, s.state === 'suspended'
            ? el('button', {type: 'button', class: 'secondary', dataset: {action: 'site-resume', site: s.key}}, 'Resume')
            : el('button', {type: 'button', class: 'secondary', dataset: {action: 'site-suspend', site: s.key}}, 'Suspend'))),
        ...(s.why ? [el('tr', {class: 'waiting note'}, el('td', {colspan: 7}, localTimes(s.why)))] : []),
      ]).flat()));
  });
}

// TRAFFIC are the outcomes the first chart shows side by side each
// minute, with the colour the stylesheet gives each.
const TRAFFIC = [['ACCEPTED', 'accepted'], ['SENT', 'sent'], ['DEFERRED', 'deferred']];

// drawCharts: the traffic (accepted, sent and deferred each minute), and
// the failures: the outcomes coloured bad (FAILED, INVALID, BOUNCED),
// added up. The outbox counts them, whichever relay did the work.
function drawCharts() {
  const minutes = last.minutes;
  const of = (m, k) => (m.outcomes || {})[k] || 0;
  const sum = a => a.reduce((x, y) => x + y, 0);
  const traffic = TRAFFIC.map(([k, name]) => ({name, values: minutes.map(m => of(m, k))}));
  const byOutcome = {};
  const failures = minutes.map(m => {
    let n = 0;
    for (const [k, v] of Object.entries(m.outcomes || {})) {
      if (kind(k) !== 'bad' || !v) continue;
      n += v;
      byOutcome[k] = (byOutcome[k] || 0) + v;
    }
    return n;
  });
  redraw($('#total-throughput'), traffic.map(s => sum(s.values)), () => traffic.map(s =>
    el('span', {class: 'key ' + s.name, dataset: {series: s.name}}, `${s.name} ${sum(s.values)}`)));
  const parts = Object.entries(byOutcome).map(([k, v]) => `${k} ${v}`);
  $('#total-failures').textContent = `${sum(failures)} in the hour` + (parts.length ? ` (${parts.join(', ')})` : '');
  chart($('#chart-throughput'), minutes, traffic);
  chart($('#chart-failures'), minutes, [{name: 'failures', values: failures}]);
}

// niceStep picks a gridline step (1, 2 or 5 times a power of ten) so that
// two steps cover the largest value and the labels stay whole numbers.
function niceStep(max) {
  for (let p = 1; ; p *= 10) {
    for (const m of [1, 2, 5]) if (2 * m * p >= max) return m * p;
  }
}

// chart draws, each minute, one bar per series side by side, on a canvas
// sized to its CSS box times the pixel ratio so that it stays sharp.
// Colours come from the stylesheet (--bar-NAME, else --bar).
function chart(canvas, minutes, series) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  const sum = a => a.reduce((x, y) => x + y, 0);
  canvas.dataset.total = sum(series.map(s => sum(s.values)));
  for (const s of series) canvas.dataset['total' + s.name[0].toUpperCase() + s.name.slice(1)] = sum(s.values);
  if (!w || !h) return;
  canvas.width = Math.round(w * ratio);
  canvas.height = Math.round(h * ratio);
  const g = canvas.getContext('2d');
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  const css = getComputedStyle(canvas);
  const color = name => css.getPropertyValue(name).trim();
  const left = 30, right = 6, top = 8, bottom = 18;
  const plotW = w - left - right, plotH = h - top - bottom;
  const step = niceStep(Math.max(1, ...series.flatMap(s => s.values)));

  g.font = '11px ' + css.fontFamily;
  g.lineWidth = 1;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let i = 0; i <= 2; i++) {
    const y = Math.round(top + plotH * (1 - i / 2)) + 0.5;
    g.strokeStyle = color('--grid');
    g.beginPath();
    g.moveTo(left, y);
    g.lineTo(w - right, y);
    g.stroke();
    g.fillStyle = color('--axis');
    g.fillText(String(step * i), left - 6, y);
  }

  const n = Math.max(minutes.length, 60);
  const slot = plotW / n;
  const bw = Math.max(1, (slot - 2) / series.length);
  series.forEach((s, j) => {
    g.fillStyle = color('--bar-' + s.name) || color('--bar');
    s.values.forEach((v, i) => {
      if (!v) return;
      const bh = Math.max(2, plotH * v / (2 * step));
      g.fillRect(left + i * slot + 1 + j * bw, top + plotH - bh, bw, bh);
    });
  });

  // A time label on each quarter hour.
  g.fillStyle = color('--axis');
  g.textAlign = 'center';
  g.textBaseline = 'top';
  minutes.forEach((m, i) => {
    const d = new Date(m.at);
    if (d.getMinutes() % 15 === 0) g.fillText(hhmm(d), left + (i + 0.5) * slot, top + plotH + 5);
  });

  // What the pointer is over, for the tooltip.
  canvas.plot = {minutes, series, left, slot};
}

// A canvas has no elements to hover: the title follows the pointer instead.
function chartHover(ev) {
  const c = ev.currentTarget, p = c.plot;
  if (!p) return;
  const i = Math.floor((ev.offsetX - p.left) / p.slot);
  const m = p.minutes[i];
  c.title = m ? `${hhmm(new Date(m.at))}: ` + p.series.map(s => `${s.name} ${s.values[i]}`).join(', ') : '';
}

// LISTED matches the statuses of the "latest" cards, which
// GET /v1/stats/recent lists.
const LISTED = /FAILED|BOUNCED|PEC-NOT-/;

function drawRecent(recent) {
  for (const key of ['failed', 'bounced', 'pec_not_delivered']) {
    const box = document.getElementById('recent-' + key);
    redraw(box, recent[key] || [], msgs => compactList(msgs));
  }
}

function recipientsText(m) {
  const r = (m.recipients || []).map(r => r.address);
  return r.length > 1 ? `${r[0]} +${r.length - 1}` : (r[0] || '');
}

// waitBadge says why a READY message waits, when it is not simply due.
function waitBadge(m) {
  return m.waiting && m.waiting !== 'due' &&
    el('span', {class: 'badge warn waiting', dataset: {waiting: m.waiting}, title: WAITING[m.waiting] || ''}, m.waiting);
}

// compactList fits the narrow "latest" cards: id and time on one line,
// status, tries and recipients on the next, the reason in full below.
function compactList(msgs) {
  if (!msgs.length) return el('p', {class: 'empty'}, 'None.');
  return el('ul', {class: 'msgs'}, msgs.map(m => el('li', {dataset: {id: m.id}},
    el('div', {class: 'line'},
      el('button', {type: 'button', class: 'link', dataset: {open: m.id}, title: 'Show its timeline'}, m.id),
      el('span', {class: 'when'}, fmtTime(m.updated_at))),
    el('div', {class: 'line'}, badge(m.status),
      el('span', {class: 'sub'}, recipientsText(m), m.attempts > 1 ? ` · ${m.attempts} attempts` : '')),
    m.reason && reasonView(m.reason, 'reason wrap'))));
}

function messageTable(msgs) {
  if (!msgs.length) return el('p', {class: 'empty'}, 'No message found.');
  return el('table', {class: 'messages'},
    el('thead', {}, el('tr', {}, ['ID', 'Status', 'Recipients', 'Reason', 'Updated'].map(h => el('th', {}, h)))),
    el('tbody', {}, msgs.map(m => el('tr', {dataset: {id: m.id}},
      el('td', {}, el('button', {type: 'button', class: 'link', dataset: {open: m.id}, title: m.message_id || ''}, m.id)),
      el('td', {}, badge(m.status), ' ', waitBadge(m)),
      el('td', {}, recipientsText(m)),
      el('td', {}, reasonView(m.reason)),
      el('td', {class: 'when'}, fmtTime(m.updated_at))))));
}

function showResults(title, msgs, more) {
  $('#results-query').textContent = title;
  const box = $('#results-list');
  box.dataset.sig = '';
  box.replaceChildren(messageTable(msgs), more ? el('p', {class: 'sub'}, 'Only the first page is shown.') : '');
  $('#results').dataset.count = msgs.length;
  $('#results').hidden = false;
}

// ---- suppression list ------------------------------------------------------

// REASON_KIND colours a suppression reason.
const REASON_KIND = {hard_bounce: 'bad', complaint: 'bad', unsubscribe: 'warn', manual: 'neutral', import: 'info'};

const scopeText = scope => scope === '*' ? 'every stream' : 'stream ' + scope;

// sup is the list as searched: its filter, the entries read so far, and
// the cursor of the next page.
let sup = {prefix: '', reason: '', entries: [], next: ''};

// drawSupCounts shows the entries by reason; each count lists its reason.
async function drawSupCounts() {
  const c = await api('/v1/suppressions/counts');
  redraw($('#sup-counts'), c, c => [
    el('span', {class: 'sub', dataset: {total: c.total}}, `${c.total} in all`),
    ...Object.keys(REASON_KIND).filter(r => c.counts[r] > 0).map(r =>
      el('button', {type: 'button', class: 'plain', dataset: {supReason: r}, title: `List the ${r} entries`},
        el('span', {class: 'badge ' + REASON_KIND[r]}, `${r} ${c.counts[r]}`))),
  ]);
}

// loadSuppressions reads the first page of the search, or the next one.
async function loadSuppressions(more) {
  const q = new URLSearchParams({limit: '50'});
  if (sup.prefix) q.set('prefix', sup.prefix);
  if (sup.reason) q.set('reason', sup.reason);
  if (more) q.set('after', sup.next);
  const page = await api('/v1/suppressions?' + q);
  sup.entries = (more ? sup.entries : []).concat(page.entries || []);
  sup.next = page.next || '';
  drawSuppressions();
}

function drawSuppressions() {
  const box = $('#sup-list');
  box.dataset.count = sup.entries.length;
  box.replaceChildren(sup.entries.length ? el('table', {class: 'messages'},
    el('thead', {}, el('tr', {}, ['Address', 'Scope', 'Reason', 'Since', 'Expires', 'By', 'Evidence', ''].map(h => el('th', {}, h)))),
    el('tbody', {}, sup.entries.map(e => el('tr', {dataset: {key: e.key, scope: e.scope}},
      el('td', {class: 'address', title: 'matched as ' + e.key}, e.address),
      el('td', {}, scopeText(e.scope)),
      el('td', {}, el('span', {class: 'badge ' + (REASON_KIND[e.reason] || 'neutral')}, e.reason)),
      el('td', {class: 'when'}, fmtTime(e.created)),
      el('td', {class: 'when'}, fmtTime(e.expires)),
      el('td', {}, e.changed_by),
      el('td', {class: 'evidence'}, reasonView([e.code, e.diagnostic].filter(Boolean).join(' '))),
      el('td', {}, el('button', {type: 'button', class: 'danger', dataset: {action: 'unsuppress', address: e.address, scope: e.scope},
        title: 'Take it off the list: the relay mails it again'}, 'Remove'))))))
    : el('p', {class: 'empty'}, sup.prefix || sup.reason ? 'No entry matches.' : 'The list is empty.'));
  $('#sup-more').hidden = !sup.next;
}

function onSupSearch(ev) {
  if (ev) ev.preventDefault();
  sup.prefix = $('#sup-prefix').value.trim();
  sup.reason = $('#sup-reason').value;
  loadSuppressions(false).catch(report);
}

// unsuppress removes an entry, with the reason the operator gives, for
// the list's history; no reason given, nothing is removed.
async function unsuppress(address, scope) {
  const note = prompt(`Take ${address} off the suppression list for ${scopeText(scope)}?\n` +
    'The relay will mail it again. Say why, for the list\'s history:');
  if (note === null) return;
  if (!note.trim()) return notify('Nothing removed: say why, for the list\'s history.', true);
  const q = new URLSearchParams({scope, note: note.trim()});
  await api(`/v1/suppressions/${enc(address)}?${q}`, {method: 'DELETE'});
  notify(`${address} is off the suppression list for ${scopeText(scope)}.`);
  await loadSuppressions(false);
}

// ---- one message ---------------------------------------------------------

let openId = null;

async function openMessage(id) {
  openId = id;
  history.replaceState(null, '', '#m/' + enc(id));
  await showMessage(id);
  $('#timeline').scrollIntoView({block: 'start'});
}

async function showMessage(id) {
  let m, receipts;
  try {
    [m, receipts] = await Promise.all([
      api('/v1/messages/' + enc(id)),
      // A failure to list receipts should not hide the rest of the message.
      api(`/v1/messages/${enc(id)}/receipts`).catch(err => {
        if (err instanceof AuthNeeded) throw err;
        return {error: err.message};
      }),
    ]);
  } catch (err) {
    if (err instanceof AuthNeeded) throw err;
    if (openId === id) closeMessage();
    notify(`Message ${id}: ${err.message}`, true);
    return;
  }
  if (openId !== id) return; // another message was opened meanwhile
  const t = $('#timeline');
  t.dataset.id = m.id;
  t.dataset.status = m.status;
  t.dataset.waiting = m.waiting || '';
  t.hidden = false;
  redraw(t, {m, receipts}, () => timeline(m, receipts));
}

function closeMessage() {
  openId = null;
  $('#timeline').hidden = true;
  history.replaceState(null, '', location.pathname);
}

function timeline(m, receipts) {
  const facts = [
    ['Message-ID', m.message_id], ['Sender', m.sender], ['Route', m.route], ['Batch', m.batch],
    ['Priority', m.priority], ['Attempts', m.attempts], ['Size', fmtSize(m.size)],
    ['Client', m.client], ['AUTH user', m.auth_user], ['Created', fmtTime(m.created_at)],
    ['Updated', fmtTime(m.updated_at)], ['Due', fmtTime(m.due_at)], ['Spool file', m.eml_path],
  ];
  // Only the actions the API takes for the message as it is.
  const can = a => (m.actions || []).includes(a);
  const actions = el('div', {class: 'actions'},
    can('retry') && el('button', {type: 'button', dataset: {action: 'retry', id: m.id}, title: 'Send it again'}, 'Retry'),
    can('cancel') && el('button', {type: 'button', class: 'danger', dataset: {action: 'cancel', id: m.id}, title: 'Stop it before it leaves'}, 'Cancel'),
    m.batch && el('button', {type: 'button', class: 'secondary', dataset: {action: 'suspend', batch: m.batch}}, `Suspend batch ${m.batch}`),
    m.batch && el('button', {type: 'button', class: 'secondary', dataset: {action: 'activate', batch: m.batch}}, `Activate batch ${m.batch}`),
    el('button', {type: 'button', class: 'plain', dataset: {action: 'close'}, title: 'Close'}, '✕'));
  return [
    el('div', {class: 'card-head'},
      el('h2', {}, 'Message ', el('code', {}, m.id), ' ', badge(m.status), waitBadge(m)), actions),
    m.reason && el('p', {class: 'reason-line'}, reasonView(m.reason)),
    el('dl', {class: 'facts'}, facts.filter(([, v]) => v !== '' && v != null).map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])),
    el('h3', {}, 'Recipients'),
    el('div', {dataset: {testid: 'recipients'}}, value(m.recipients || [], 'recipients')),
    el('h3', {}, 'Receipts'),
    el('div', {dataset: {testid: 'receipts'}}, receiptList(receipts)),
    el('h3', {}, 'Timeline'),
    el('ol', {class: 'events', dataset: {testid: 'history'}}, entries(m).map(entry)),
  ];
}

// entries merges the status history and the events told to the plugins
// into one list by time (the sort is stable: a status stays before the
// event it raised when both have the same time).
function entries(m) {
  const items = [
    ...(m.history || []).map(h => ({at: h.at, type: 'status', label: h.status, reason: h.reason, details: h.details})),
    ...(m.events || []).map(e => ({
      at: e.at, type: 'event', label: e.outcome, reason: e.reason, details: e.details,
      meta: [`plugins: ${e.state}`, e.attempts ? `${e.attempts} tries` : '',
        e.acked && e.acked.length ? 'acked by ' + e.acked.join(', ') : '', e.last_error ? 'last error: ' + readable(e.last_error) : '']
        .filter(Boolean).join(' · '),
    })),
  ];
  return items.sort((a, b) => new Date(a.at) - new Date(b.at));
}

function entry(it) {
  return el('li', {class: 'entry ' + it.type, dataset: {type: it.type, status: it.label}},
    el('span', {class: 'when'}, fmtTime(it.at)),
    el('span', {class: 'what'},
      el('span', {class: 'type'}, it.type === 'event' ? 'event' : 'status'), badge(it.label),
      it.reason && reasonView(it.reason),
      it.meta && el('div', {class: 'meta'}, it.meta),
      it.details != null && el('div', {class: 'details'}, value(it.details))));
}

// value shows what the API put in a details object: the keys known today
// (per-recipient results, bounce, pec, receipt) and whatever comes later,
// as key: value, with arrays of objects as tables.
function value(v, key) {
  if (v == null || v === '') return '';
  if (key === 'receipt' && typeof v === 'string') return receiptButton(v);
  if ((key === 'status' || key === 'outcome' || key === 'previous_status') && typeof v === 'string') return badge(v);
  if (Array.isArray(v)) {
    if (!v.length) return '–';
    if (v.every(x => x && typeof x === 'object' && !Array.isArray(x))) return table(v);
    if (v.every(x => x == null || typeof x !== 'object')) return v.map(x => readable(x)).join(', ');
    return el('ul', {class: 'plain-list'}, v.map(x => el('li', {}, value(x))));
  }
  if (typeof v === 'object') {
    const dl = el('dl', {class: 'kv'});
    for (const [k, x] of Object.entries(v)) {
      if (x == null || x === '') continue;
      dl.append(el('dt', {}, k.replace(/_/g, ' ')), el('dd', {}, value(x, k)));
    }
    return dl;
  }
  if (typeof v === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(v)) return fmtTime(v) || v;
  return readable(v);
}

function table(rows) {
  const keys = [...new Set(rows.flatMap(r => Object.keys(r)))];
  return el('table', {class: 'kv-table'},
    el('thead', {}, el('tr', {}, keys.map(k => el('th', {}, k.replace(/_/g, ' '))))),
    el('tbody', {}, rows.map(r => el('tr', {}, keys.map(k => el('td', {}, value(r[k], k)))))));
}

function receiptButton(name) {
  return el('button', {type: 'button', class: 'link', dataset: {action: 'download', name}, title: 'Download the receipt as it came'}, '⤓ ' + name);
}

function receiptList(r) {
  if (r.error) return el('p', {class: 'error'}, 'Cannot list the receipts: ' + r.error);
  const list = r.receipts || [];
  if (!list.length) return el('p', {class: 'empty'}, 'None kept.');
  return el('ul', {class: 'receipts'}, list.map(x =>
    el('li', {}, receiptButton(x.name), el('span', {class: 'sub'}, ` ${fmtSize(x.size)}, ${fmtTime(x.saved_at)}`))));
}

// download fetches the receipt with the token (a plain link could not send
// it) and hands the browser a blob: URL to save.
async function download(id, name) {
  const resp = await api(`/v1/messages/${enc(id)}/receipts/${enc(name)}`, {raw: true});
  const url = URL.createObjectURL(await resp.blob());
  const a = el('a', {href: url, download: name});
  document.body.append(a);
  a.click();
  a.remove();
  // The download starts asynchronously: revoke the URL a while later.
  setTimeout(() => URL.revokeObjectURL(url), 30000);
}

// armed asks for a second click, within a few seconds, before an action
// that stops mail (a dialog would block the page, and scripted tests).
function armed(b, text) {
  if (b.dataset.armed) return true;
  b.dataset.armed = b.textContent;
  b.textContent = text;
  setTimeout(() => disarm(b), 4000);
  return false;
}

function disarm(b) {
  if (!b.dataset.armed) return;
  b.textContent = b.dataset.armed;
  delete b.dataset.armed;
}

// ---- wiring --------------------------------------------------------------

// One listener for every button, drawn now or later.
async function onClick(ev) {
  const open = ev.target.closest('[data-open]');
  if (open) return openMessage(open.dataset.open).catch(report);
  const list = ev.target.closest('[data-list]');
  if (list) return listStatus(list.dataset.list).catch(report);
  const reason = ev.target.closest('[data-sup-reason]');
  if (reason) {
    $('#sup-reason').value = reason.dataset.supReason;
    return onSupSearch();
  }
  const b = ev.target.closest('button[data-action]');
  if (!b) return;
  const action = b.dataset.action;
  try {
    switch (action) {
      case 'close':
        return closeMessage();
      case 'download':
        return await download(openId, b.dataset.name);
      case 'retry':
      case 'cancel': {
        if (action === 'cancel' && !armed(b, 'Click again to cancel')) return;
        b.disabled = true;
        const m = await api(`/v1/messages/${enc(b.dataset.id)}/${action}`, {method: 'POST'});
        notify(`${action === 'retry' ? 'Retry' : 'Cancel'}: ${m.id} is now ${m.status}`);
        break;
      }
      case 'suspend':
      case 'activate': {
        const code = b.dataset.batch || $('#batch').value.trim();
        if (!code) return notify('Write a batch code first.', true);
        if (action === 'suspend' && !armed(b, 'Click again to suspend')) return;
        const r = await api(`/v1/batches/${enc(code)}/${action}`, {method: 'POST'});
        notify(`Batch ${r.batch} is ${r.suspended ? 'suspended' : 'active'}.`);
        break;
      }
      case 'site-suspend':
      case 'site-resume': {
        const site = b.dataset.site || $('#site').value.trim();
        if (!site) return notify('Write a site, or a provider\'s name, first.', true);
        if (action === 'site-suspend' && !armed(b, 'Click again to suspend')) return;
        const d = $('#site-for').value;
        const r = await api(`/v1/destinations/${enc(site)}/${action === 'site-suspend' ? `suspend?for=${enc(d)}` : 'resume'}`, {method: 'POST'});
        notify(r.until ? `Site ${r.site} is suspended until ${fmtTime(r.until)}, on every relay.` : `Site ${r.site} is resumed.`);
        break;
      }
      case 'sup-more':
        return await loadSuppressions(true);
      case 'unsuppress':
        b.disabled = true;
        await unsuppress(b.dataset.address, b.dataset.scope);
        break;
    }
  } catch (err) {
    report(err);
  } finally {
    b.disabled = false;
  }
  disarm(b);
  // Show the outcome now, and again in a moment: an action sets off
  // status changes that take a little while (a retried message is sent).
  campaignTick = 0;
  refresh();
  setTimeout(refresh, 1500);
}

function report(err) {
  if (!(err instanceof AuthNeeded)) notify(err.message, true);
}

async function listStatus(status) {
  const res = await api(`/v1/messages?status=${enc(status)}&limit=50`);
  showResults(`with status ${status}`, res.messages || [], !!res.next);
  $('#results').scrollIntoView({block: 'start'});
}

async function onSearch(ev) {
  ev.preventDefault();
  const q = $('#search').value.trim();
  if (!q) return;
  try {
    const res = await api('/v1/search?q=' + enc(q));
    const msgs = res.messages || [];
    showResults(`for “${q}”`, msgs);
    // One match is what a search by id means: open it straight away.
    if (msgs.length === 1) await openMessage(msgs[0].id);
  } catch (err) {
    report(err);
  }
}

function onToken(ev) {
  ev.preventDefault();
  const t = $('#token').value.trim();
  if (!t) return;
  sessionStorage.setItem(TOKEN_KEY, t);
  $('#token').value = '';
  $('#auth').hidden = true;
  $('#main').hidden = false;
  refresh();
  loadSuppressions(false).catch(report);
}

function init() {
  $('#zone').textContent = zoneText();
  document.addEventListener('click', onClick);
  $('#search-form').addEventListener('submit', onSearch);
  $('#token-form').addEventListener('submit', onToken);
  $('#batch-form').addEventListener('submit', ev => ev.preventDefault());
  $('#site-form').addEventListener('submit', ev => ev.preventDefault());
  $('#sup-form').addEventListener('submit', onSupSearch);
  $('#sup-reason').addEventListener('change', () => onSupSearch());
  $('#show-empty').addEventListener('change', drawQueue);
  for (const c of document.querySelectorAll('canvas.chart')) c.addEventListener('mousemove', chartHover);
  window.addEventListener('resize', drawCharts);
  // A tab in the background does not poll; it catches up when shown.
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refresh(); });
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  // #m/<id> opens a message: a link to it can be shared.
  const m = /^#m\/(.+)$/.exec(location.hash);
  if (m) openId = decodeURIComponent(m[1]);
  refresh();
  loadSuppressions(false).catch(report);
}

init();

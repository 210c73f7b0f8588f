// swarmkv console: polls GET /v1/console on the node that served this page
// and draws it. Plain JavaScript, no library: the DOM is built with
// textContent (names from the cluster state are never parsed as HTML), the
// charts are drawn on canvases by drawChart below.
'use strict';

const POLL_MS = 1000;          // the node computes one round a second at most
const STALE_MS = 5000;         // no answer for this long: the view is stale
const WINDOW_MS = 5 * 60 * 1000; // the charts' longest time span (the node keeps 5 minutes)
const MIN_WINDOW_MS = 60 * 1000;  // and their shortest: a young history is stretched up to it
const TOKEN_KEY = 'swarmkv.console.token';

const $ = (id) => document.getElementById(id);
let timer = null;
let lastOK = 0;
let lastView = null;

// ---- token (only when the node's admin API asks for one) ----

function savedToken() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function showLogin(msg) {
  $('login').hidden = false;
  $('main').hidden = true;
  $('login-error').textContent = msg || '';
  $('token').focus();
  setState('', 'token required');
}

$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  let t = $('token').value.trim().replace(/^Bearer\s+/i, '');
  if (!t) return;
  sessionStorage.setItem(TOKEN_KEY, t);
  $('token').value = '';
  $('login').hidden = true;
  $('main').hidden = false;
  poll();
});

$('forget').addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $('forget').hidden = true;
  showLogin('');
});

// ---- polling ----

function setState(cls, text) {
  const s = $('state');
  s.className = 'state ' + cls;
  s.textContent = text;
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(poll, POLL_MS);
}

async function poll() {
  const headers = {};
  const t = savedToken();
  if (t) headers['Authorization'] = 'Bearer ' + t;
  $('forget').hidden = !t;
  try {
    const resp = await fetch('/v1/console', { headers, cache: 'no-store' });
    if (resp.status === 401 || resp.status === 403) {
      const body = await resp.json().catch(() => ({}));
      if (t && resp.status === 401) sessionStorage.removeItem(TOKEN_KEY);
      showLogin(body.error || resp.statusText);
      return; // until a token is given
    }
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      throw new Error(resp.status + ' ' + (body.error || resp.statusText));
    }
    const v = await resp.json();
    lastOK = Date.now();
    lastView = v;
    render(v);
    setState('live', 'live · ' + new Date(v.time).toLocaleTimeString());
  } catch (e) {
    const age = lastOK ? Math.round((Date.now() - lastOK) / 1000) + ' s ago' : 'never';
    setState(Date.now() - lastOK > STALE_MS ? 'stale' : 'live', 'no answer (last ' + age + ')');
    showBanner('This node does not answer: ' + e.message + '. Showing what it said last.');
  }
  schedule();
}

function showBanner(msg) {
  $('banner').hidden = !msg;
  $('banner').textContent = msg || '';
}

// ---- formatting ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function bytes(n) {
  if (!n) return '0';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

function rate(x) {
  if (x === undefined || x === null) return '';
  if (x >= 100) return Math.round(x).toLocaleString();
  return x.toFixed(1);
}

function replaceBody(table, rows) {
  const tb = table.tBodies[0];
  tb.replaceChildren(...rows);
}

// ---- rendering ----

function render(v) {
  const st = v.status;
  showBanner(v.error ? 'Cluster status unavailable (' + v.error + '): showing the last one this page saw.' : '');
  $('served').textContent = 'served by ' + v.node;
  $('events-node').textContent = '(as ' + v.node + ' saw them)';
  if (st) {
    $('cluster').textContent = 'cluster ' + st.cluster_id + ' · epoch ' + st.epoch +
      ' · ' + st.num_shards + ' shard' + (st.num_shards === 1 ? '' : 's') + ' · RF ' + st.replication_factor;
    renderMembers(st, v.nodes || []);
    renderGrid(st, v.shard_rates || {});
    renderMoves(st.moves || []);
  }
  renderEvents(v.events || []);
  renderCharts(v.series || [], Date.parse(v.time));
}

function renderMembers(st, nodes) {
  const byID = Object.fromEntries(nodes.map((n) => [n.id, n]));
  const rows = (st.members || []).map((m) => {
    const n = byID[m.id] || {};
    const cls = m.gossip === 'dead' ? 'dead' : (m.status === 'removed' ? 'removed' : (m.status === 'leaving' ? 'leaving' : ''));
    const meta = m.meta_leader ? 'leader' : (m.meta_voter ? 'voter' : '');
    return el('tr', { 'data-node': m.id, class: cls },
      el('td', { class: 'id' }, el('b', {}, m.id)),
      el('td', { class: 'status' }, m.status),
      el('td', { class: 'zone', title: m.zone ? '' : 'no zone label: the node is its own zone' }, m.zone || '-'),
      el('td', { class: 'host', title: m.host ? '' : 'no host label: the node is its own host' }, m.host || '-'),
      el('td', { class: 'gossip ' + m.gossip }, m.gossip),
      el('td', { class: 'num version' }, m.version ? 'v' + m.version : '?'),
      el('td', { class: 'addr' }, m.raft_addr),
      el('td', { class: 'addr' }, m.grpc_addr),
      el('td', { class: 'addr' }, m.http_addr || ''),
      el('td', { class: 'num' }, m.replicas),
      el('td', { class: 'num leads' }, m.leaderships),
      el('td', {}, meta),
      el('td', { class: 'num' }, n.error ? '' : rate(n.writes_per_sec)),
      el('td', { class: 'num' }, n.error ? '' : rate(n.reads_per_sec)),
      el('td', { class: 'num' }, n.error || n.apply_lag === undefined ? '' : n.apply_lag),
      el('td', { class: 'num' }, n.rss_bytes ? bytes(n.rss_bytes) : ''));
  });
  replaceBody($('members'), rows);
}

// gridNodes: the members that are not removed, then any other node a
// replica names, in id order.
function gridNodes(st) {
  const ids = (st.members || []).filter((m) => m.status !== 'removed').map((m) => m.id);
  for (const s of st.shards || []) for (const r of s.replicas || []) if (!ids.includes(r.node)) ids.push(r.node);
  return ids.sort();
}

function renderGrid(st, rates) {
  const nodes = gridNodes(st);
  const dead = new Set((st.members || []).filter((m) => m.gossip === 'dead').map((m) => m.id));
  const head = el('tr', {},
    el('th', {}, 'shard'), el('th', {}, 'leader'), el('th', {}, 'survives'),
    ...nodes.map((n) => el('th', { class: 'nodecol' + (dead.has(n) ? ' dead' : '') }, n)),
    el('th', { class: 'num' }, 'term'), el('th', { class: 'num' }, 'commit'),
    el('th', { class: 'num' }, 'slots'), el('th', { class: 'num' }, 'size'),
    el('th', { class: 'num' }, 'load'), el('th', { class: 'num' }, 'writes/s'), el('th', { class: 'num' }, 'reads/s'),
    el('th', {}, 'slot ranges'));
  $('grid').tHead.replaceChildren(head);
  const rows = (st.shards || []).map((s) => {
    const meta = s.shard === 'meta';
    const r = rates[s.shard] || {};
    const byNode = Object.fromEntries((s.replicas || []).map((x) => [x.node, x]));
    const cells = nodes.map((n) => {
      const x = byNode[n];
      if (!x) return el('td', { class: 'cell', 'data-shard': s.shard, 'data-node': n }, '');
      let text, cls;
      if (!x.reachable) {
        text = '?'; cls = 'unreachable';
      } else if (n === s.leader) {
        text = 'L'; cls = 'leader';
      } else {
        text = { voter: 'V', nonvoter: 'N', learner: 'l' }[x.role] || x.role; cls = x.role;
      }
      if (x.reachable && x.lag > 0) { text += ' +' + x.lag; cls += ' lagging'; }
      return el('td', { class: 'cell ' + cls, 'data-shard': s.shard, 'data-node': n, title: n + ': ' + x.role +
        (x.state ? ', ' + x.state : '') + ', applied ' + x.applied_index + (x.reachable ? '' : ', not reachable') }, text);
    });
    return el('tr', { 'data-shard': s.shard },
      el('td', {}, el('b', {}, meta ? 'meta' : s.shard)),
      el('td', { class: 'leader-name' + (s.leader ? '' : ' noleader'), 'data-shard': s.shard }, s.leader || 'none'),
      survives(s),
      ...cells,
      el('td', { class: 'num' }, s.term),
      el('td', { class: 'num' }, s.commit_index),
      el('td', { class: 'num' }, meta ? '' : s.slots),
      el('td', { class: 'num' }, meta ? '' : bytes(s.bytes)),
      el('td', { class: 'num' }, meta ? '' : rate(s.load)),
      el('td', { class: 'num' }, rate(r.writes_per_sec)),
      el('td', { class: 'num' }, rate(r.reads_per_sec)),
      el('td', { class: 'addr ranges', title: meta ? '' : (s.slot_ranges || '') }, meta ? '' : (s.slot_ranges || '')));
  });
  replaceBody($('grid'), rows);
}

// survives: the shard's failure-domain badge: the loss of any one zone
// (host) its voters survive, red when not even one host.
function survives(s) {
  const d = [s.zone_safe ? 'zone' : '', s.host_safe ? 'host' : ''].filter((x) => x);
  return el('td', { class: 'survives ' + (s.zone_safe ? 'safe' : (s.host_safe ? 'partial' : 'unsafe')), 'data-shard': s.shard,
    title: 'survives the loss of any one ' + (d.length ? d.join(' or any one ') : 'nothing (zone or host)') },
  d.length ? d.join('+') : 'none');
}

function renderMoves(moves) {
  $('moves-section').hidden = moves.length === 0;
  replaceBody($('moves'), moves.map((m) => el('tr', {},
    el('td', { class: 'num' }, m.id), el('td', {}, m.kind), el('td', { class: 'num' }, m.source),
    el('td', { class: 'num' }, m.target), el('td', { class: 'addr' }, m.slots), el('td', {}, m.phase),
    el('td', {}, m.updated ? new Date(m.updated).toLocaleTimeString() : ''), el('td', { class: 'error' }, m.error || ''))));
}

function renderEvents(events) {
  const items = events.slice().reverse().map((e) => el('li', { 'data-kind': e.kind },
    el('time', {}, new Date(e.time).toLocaleTimeString()),
    el('span', { class: 'kind ' + e.kind + (/ dead\b/.test(e.text) ? ' bad' : '') }, e.kind),
    e.text));
  $('events').replaceChildren(...items);
}

// ---- charts ----

// renderCharts draws the series up to now (the node's clock: ms).
function renderCharts(series, now) {
  const pick = (f) => series.map((p) => [p.t, f(p)]);
  const last = series.length ? series[series.length - 1] : null;
  const fmtMS = (x) => (x === null || x === undefined ? '–' : x.toFixed(x < 10 ? 2 : 1));
  $('last-writes').textContent = last ? rate(last.writes_per_sec) : '';
  $('last-reads').textContent = last ? rate(last.reads_per_sec) : '';
  $('last-p99').textContent = last ? fmtMS(last.write_p99_ms) + ' / ' + fmtMS(last.request_p99_ms) : '';
  $('last-lag').textContent = last ? String(last.apply_lag) : '';
  const c1 = getComputedStyle(document.documentElement).getPropertyValue('--c1').trim();
  const c2 = getComputedStyle(document.documentElement).getPropertyValue('--c2').trim();
  const span = series.length ? Math.min(WINDOW_MS, Math.max(MIN_WINDOW_MS, now - series[0].t)) : MIN_WINDOW_MS;
  drawChart($('chart-writes'), now, span, [{ points: pick((p) => p.writes_per_sec), color: c1 }]);
  drawChart($('chart-reads'), now, span, [{ points: pick((p) => p.reads_per_sec), color: c1 }]);
  drawChart($('chart-p99'), now, span, [{ points: pick((p) => p.write_p99_ms), color: c1 }, { points: pick((p) => p.request_p99_ms), color: c2 }]);
  drawChart($('chart-lag'), now, span, [{ points: pick((p) => p.apply_lag), color: c1 }]);
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// drawChart draws lines ({points: [[t ms, value or null]], color}) over
// the span (ms) up to now on canvas: a line breaks where a value is null.
function drawChart(canvas, now, span, lines) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (!w || !h) return;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const left = 40, right = 6, top = 8, bottom = 16;
  const t0 = now - span;
  let top_ = 0;
  for (const l of lines) for (const [t, v] of l.points) if (t >= t0 && v !== null && v > top_) top_ = v;
  const ymax = niceMax(top_);
  const x = (t) => left + (w - left - right) * (t - t0) / span;
  const y = (v) => top + (h - top - bottom) * (1 - v / ymax);
  ctx.font = '10px system-ui, sans-serif';
  ctx.fillStyle = '#6b7385';
  ctx.strokeStyle = '#e6e9ef';
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
    ctx.fillText(v >= 1000 ? (v / 1000) + 'k' : String(+v.toPrecision(3)), left - 4, yy);
  }
  ctx.textAlign = 'left';
  ctx.textBaseline = 'alphabetic';
  ctx.fillText(span >= 120000 ? '-' + Math.round(span / 60000) + ' min' : '-' + Math.round(span / 1000) + ' s', left, h - 3);
  ctx.textAlign = 'right';
  ctx.fillText('now', w - right, h - 3);
  ctx.lineWidth = 1.5;
  for (const l of lines) {
    ctx.strokeStyle = l.color;
    ctx.fillStyle = l.color;
    ctx.beginPath();
    const pts = l.points.filter(([t]) => t >= t0);
    pts.forEach(([t, v], i) => {
      if (v === null || v === undefined) return;
      const prev = i > 0 ? pts[i - 1][1] : null;
      const next = i + 1 < pts.length ? pts[i + 1][1] : null;
      if (prev === null || prev === undefined) ctx.moveTo(x(t), y(v)); else ctx.lineTo(x(t), y(v));
      if ((prev === null || prev === undefined) && (next === null || next === undefined)) {
        ctx.fillRect(x(t) - 1.5, y(v) - 1.5, 3, 3); // a lone point: a dot
      }
    });
    ctx.stroke();
  }
}

window.addEventListener('resize', () => { if (lastView) renderCharts(lastView.series || [], Date.parse(lastView.time)); });
poll();

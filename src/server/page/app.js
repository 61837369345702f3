// ebb's live page: reads GET /v1/events (Server-Sent Events, docs/api.md)
// over fetch, so that it can send `Authorization: Bearer TOKEN` when the
// server asks for one, and draws device memory by owner, releases, marks,
// pipelines, sessions, jobs and leaks. Plain JavaScript, nothing fetched
// from anywhere but this server.
'use strict';

const S = {
  devices: new Map(),   // label -> {info, samples: [], releases: [], marks: [], labels: Map}
  pipelines: [],
  sessions: [],
  jobs: new Map(),      // id -> job
  leaks: [],
  owners: [],           // owner keys in order of first appearance (stable colours)
  windowS: 300,
  connected: false,
  dirty: new Set(),     // tables to draw again (a table is redrawn only when its data changed,
                        // so a button is not replaced under the pointer between press and release)
};
window.ebbState = S;    // for the browser test and the curious

const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948',
                 '#b07aa1', '#ff9da7', '#9c755f', '#2f7ebc', '#8cd17d', '#d37295'];
const SVGNS = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);

// --- formatting -------------------------------------------------------------
function fmtBytes(b) {
  if (b === null || b === undefined) return '–';
  const a = Math.abs(b);
  if (a >= 1024 ** 3) return (b / 1024 ** 3).toFixed(2) + ' GiB';
  if (a >= 1024 ** 2) return Math.round(b / 1024 ** 2) + ' MiB';
  if (a >= 1024) return Math.round(b / 1024) + ' KiB';
  return b + ' B';
}
function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], {hour12: false});
}
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function ownerLabel(o) { return o.pipeline ? `${o.pipeline} ▸ ${o.owner}` : o.owner; }
function colourOf(key) {
  let i = S.owners.indexOf(key);
  if (i < 0) { S.owners.push(key); i = S.owners.length - 1; }
  return PALETTE[i % PALETTE.length];
}

// --- the token (tokens: Authorization: Bearer TOKEN) -------------------------
function token() { try { return localStorage.getItem('ebb-token') || ''; } catch (e) { return ''; } }
function authHeaders() { const t = token(); return t ? {Authorization: 'Bearer ' + t} : {}; }
function askToken(why) {
  $('token-form').hidden = false;
  $('token-error').textContent = why || '';
  setStatus('needs a token', 'down');
}
$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  try { localStorage.setItem('ebb-token', $('token').value.trim()); } catch (e) { /* private mode */ }
  $('token-form').hidden = true;
  restart();
});

// --- API calls (buttons) ------------------------------------------------------
async function api(method, path) {
  const r = await fetch(path, {method, headers: authHeaders()});
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) askToken(token() ? 'the token was refused' : '');
  return {ok: r.ok, status: r.status, body};
}
async function pipelineAction(name, action) {
  const msg = $('action-msg');
  msg.className = 'msg';
  msg.textContent = `${action} ${name}…`;
  const r = await api('POST', `/v1/pipelines/${encodeURIComponent(name)}/${action}`);
  if (r.ok) {
    const b = r.body || {};
    msg.textContent = `${name}: ${action} done` +
      (b.released_bytes !== undefined ? `, ${fmtBytes(b.released_bytes)} released` : '') +
      (b.driver_free_bytes !== undefined ? `, driver free ${fmtBytes(b.driver_free_bytes)}` : '');
  } else {
    msg.className = 'msg error';
    const e = r.body && r.body.error;
    msg.textContent = `${action} ${name} failed (HTTP ${r.status}): ` +
      (e ? `${e.code}: ${e.message}` : 'no answer');
  }
}

// --- the event stream -----------------------------------------------------------
let ctrl = null, retryTimer = null;
// the last event id seen: a retry after the stream broke sends it as
// Last-Event-ID and the server sends what came meanwhile (or a new hello)
let lastId = '', resume = false;
function setStatus(text, cls) { const s = $('status'); s.textContent = text; s.className = 'status ' + (cls || ''); }
function restart() {
  resume = false; // a new token: a new picture
  if (ctrl) ctrl.abort();
  if (retryTimer) clearTimeout(retryTimer);
  connect();
}
function retryLater(text) {
  S.connected = false;
  setStatus(text + ' — retrying', 'down');
  resume = lastId !== '';
  retryTimer = setTimeout(connect, 2000);
}
async function connect() {
  ctrl = new AbortController();
  const mine = ctrl;
  let r;
  try {
    const h = Object.assign({Accept: 'text/event-stream'}, authHeaders());
    if (resume) h['Last-Event-ID'] = lastId;
    r = await fetch('/v1/events', {headers: h, signal: mine.signal});
  } catch (e) {
    if (!mine.signal.aborted) retryLater('server not reachable');
    return;
  }
  if (r.status === 401) { askToken(token() ? 'the token was refused' : ''); return; }
  if (r.status === 403) {
    let why = 'this token may not read the events';
    try { const b = await r.json(); if (b.error) why = `this token may not read the events: ${b.error.message}`; } catch (e) { /* not JSON */ }
    askToken(why);
    return;
  }
  if (!r.ok) {
    let why = `HTTP ${r.status}`;
    try { const b = await r.json(); if (b.error) why += `: ${b.error.message}`; } catch (e) { /* not JSON */ }
    retryLater(why);
    return;
  }
  S.connected = true;
  setStatus('live', 'live');
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        dispatch(block);
      }
    }
  } catch (e) {
    if (mine.signal.aborted) return;
  }
  if (!mine.signal.aborted) retryLater('stream ended');
}
function dispatch(block) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (!line || line[0] === ':') continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let v = c < 0 ? '' : line.slice(c + 1);
    if (v[0] === ' ') v = v.slice(1);
    if (field === 'event') name = v;
    else if (field === 'id') lastId = v;
    else if (field === 'data') data.push(v);
  }
  if (!data.length) return;
  let d;
  try { d = JSON.parse(data.join('\n')); } catch (e) { return; }
  const h = HANDLERS[name];
  if (h) { h(d); if (name !== 'memory') S.dirty.add(name === 'hello' ? 'all' : name); schedule(); }
}
function dev(label) {
  // labels: owner key -> "pipeline ▸ stage" on this device (a stage of the
  // same name may run for another pipeline on another device)
  if (!S.devices.has(label)) S.devices.set(label, {info: {device: label}, samples: [], releases: [], marks: [], labels: new Map()});
  return S.devices.get(label);
}
// Bytes an owner holds on the device: an asleep owner's parked bytes are in
// host memory (GET /v1/memory counts them as the owner's, the allocator's
// reserved bytes and the driver do not).
function onDevice(o) { return Math.max(0, (o.bytes || 0) - (o.asleep_bytes || 0)); }
function prune(arr, horizon) { while (arr.length && arr[0].t < horizon) arr.shift(); }
const HANDLERS = {
  hello(d) {
    S.devices.clear();
    for (const x of d.devices || []) dev(x.device).info = x;
    S.pipelines = d.pipelines || [];
    S.sessions = d.sessions || [];
    S.jobs.clear();
    for (const j of d.jobs || []) S.jobs.set(j.id, j);
    S.leaks = d.leaks || [];
  },
  memory(d) {
    const x = dev(d.device);
    x.samples.push(d);
    for (const o of d.owners) { x.labels.set(o.owner, ownerLabel(o)); colourOf(o.owner); }
    prune(x.samples, d.t - 600);
    prune(x.releases, d.t - 600);
    prune(x.marks, d.t - 600);
  },
  release(d) { dev(d.device).releases.push(d); },
  mark(d) { dev(d.device).marks.push(d); },
  leak(d) { S.leaks.push(d); if (S.leaks.length > 50) S.leaks.shift(); },
  pipelines(d) { S.pipelines = d.pipelines || []; },
  sessions(d) { S.sessions = d.sessions || []; },
  job(d) { S.jobs.set(d.id, d); while (S.jobs.size > 50) S.jobs.delete(S.jobs.keys().next().value); },
  dropped(d) { setStatus('dropped by the server: ' + d.reason, 'down'); },
};

// --- rendering --------------------------------------------------------------------
let pending = false;
function schedule() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; render(); });
}
function render() {
  renderDevices();
  const all = S.dirty.has('all');
  if (all || S.dirty.has('leak')) renderLeaks();
  if (all || S.dirty.has('pipelines')) renderPipelines();
  if (all || S.dirty.has('sessions')) renderSessions();
  renderJobs(all || S.dirty.has('job')); // running jobs' times tick: redrawn each frame
  S.dirty.clear();
}

function niceStep(max) {
  const MiB = 1024 * 1024;
  const steps = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536].map((m) => m * MiB);
  for (const s of steps) if (max / s <= 5) return s;
  return steps[steps.length - 1];
}

// Marks worth a line on the chart: loads, unloads, sleep/wake, out of memory.
function markShown(label) {
  return /( load| unload|loaded|unloaded|sleep|wake|asleep|woke|out of device memory)$/.test(label);
}

function renderDevices() {
  const root = $('devices');
  for (const [label, x] of S.devices) {
    let card = root.querySelector(`.device[data-device="${CSS.escape(label)}"]`);
    if (!card) {
      card = el('article', {class: 'device', 'data-device': label},
        el('div', {class: 'head'}, el('h3', {}, label + ' · ' + (x.info.name || '')), el('div', {class: 'figures'})),
        svg('svg', {role: 'img', 'aria-label': `device memory of ${label} by owner`}),
        el('div', {class: 'legend'}));
      root.append(card);
    }
    drawFigures(card.querySelector('.figures'), x);
    drawChart(card.querySelector('svg'), x);
    drawLegend(card.querySelector('.legend'), x);
  }
}

function drawFigures(box, x) {
  const s = x.samples[x.samples.length - 1];
  box.replaceChildren();
  if (!s) { box.append('waiting for the first sample…'); return; }
  const fig = (name, v, cls) => el('span', {class: cls || '', 'data-figure': name, 'data-bytes': v ?? ''}, name + ' ', el('b', {}, fmtBytes(v)));
  box.append(fig('driver used', s.driver_used_bytes), fig('of', s.driver_total_bytes),
    fig('ebb reserved', s.reserved_bytes), fig('context', s.context_bytes));
  if (s.asleep_bytes) box.append(fig('asleep (in host memory)', s.asleep_bytes, 'asleep'));
  if (s.others_bytes !== null) box.append(fig('other processes', s.others_bytes));
  if (s.unattributed_bytes) box.append(fig('unattributed', s.unattributed_bytes, 'bad'));
}

function drawLegend(box, x) {
  const s = x.samples[x.samples.length - 1];
  box.replaceChildren();
  const now = new Map((s ? s.owners : []).map((o) => [o.owner, o]));
  const seen = new Set();
  for (const smp of x.samples) for (const o of smp.owners) seen.add(o.owner);
  for (const key of S.owners) {
    if (!seen.has(key)) continue;
    const o = now.get(key);
    const i = el('i');
    i.style.background = colourOf(key);
    const asleep = o ? o.asleep_bytes || 0 : 0;
    box.append(el('span', {'data-owner': key, 'data-bytes': o ? o.bytes : 0, 'data-asleep': asleep,
      class: asleep ? 'asleep' : ''}, i,
      `${x.labels.get(key) || key} ${fmtBytes(o ? o.bytes : 0)}` + (asleep ? ' asleep' : '')));
  }
  const ctx = el('i'); ctx.style.background = '#b0b4b8';
  box.append(el('span', {}, ctx, 'context'));
  const oth = el('i'); oth.style.background = '#d5d5d5';
  box.append(el('span', {}, oth, 'other processes'));
  const un = el('i'); un.style.background = '#c62828';
  box.append(el('span', {}, un, 'unattributed'));
  const drv = el('i'); drv.style.background = '#000';
  box.append(el('span', {class: 'line'}, drv, 'driver used'));
  const eb = el('i'); eb.style.background = '#1565c0';
  box.append(el('span', {class: 'line'}, eb, 'ebb (reserved + context)'));
}

function drawChart(g, x) {
  const W = Math.max(300, g.clientWidth || 800), H = Math.max(160, g.clientHeight || 280);
  const L = 64, R = 12, T = 34, B = 22;
  g.setAttribute('viewBox', `0 0 ${W} ${H}`);
  g.replaceChildren();
  const samples = x.samples;
  const now = samples.length ? Math.max(samples[samples.length - 1].t, Date.now() / 1000 - 1) : Date.now() / 1000;
  // the window, or less while the server is younger than it (the chart fills)
  const first = samples.length ? samples[0].t : now;
  const span = Math.max(30, Math.min(S.windowS, now - first + 2));
  const t0 = now - span;
  const vis = samples.filter((s) => s.t >= t0 - 1);
  // stack: context, owners (stable order), cached, unattributed, other processes
  const layers = [{key: '#context', colour: '#b0b4b8', get: (s) => s.context_bytes || 0}];
  const present = new Set();
  for (const s of vis) for (const o of s.owners) present.add(o.owner);
  for (const key of S.owners) if (present.has(key)) {
    layers.push({key, colour: colourOf(key), owner: true,
      get: (s) => { const o = s.owners.find((q) => q.owner === key); return o ? onDevice(o) : 0; }});
  }
  layers.push({key: '#cached', colour: '#e3e6ea', get: (s) => s.cached_bytes || 0});
  layers.push({key: '#unattributed', colour: '#c62828', get: (s) => s.unattributed_bytes || 0});
  layers.push({key: '#others', colour: '#d5d5d5', get: (s) => s.others_bytes || 0});
  let ymax = 256 * 1024 * 1024;
  const tops = vis.map((s) => { let sum = 0; for (const l of layers) sum += l.get(s); return sum; });
  for (let i = 0; i < vis.length; i++) ymax = Math.max(ymax, tops[i], vis[i].driver_used_bytes || 0);
  const step = niceStep(ymax * 1.1);
  ymax = Math.ceil((ymax * 1.1) / step) * step;
  const X = (t) => L + ((t - t0) / span) * (W - L - R);
  const Y = (b) => H - B - (b / ymax) * (H - T - B);
  // axes
  const axis = svg('g', {class: 'axis'});
  for (let b = 0; b <= ymax; b += step) {
    axis.append(svg('line', {x1: L, x2: W - R, y1: Y(b), y2: Y(b)}));
    axis.append(svg('text', {x: L - 6, y: Y(b) + 4, 'text-anchor': 'end'}, fmtBytes(b)));
  }
  const tick = span <= 60 ? 10 : span <= 180 ? 30 : 60;
  for (let t = Math.ceil(t0 / tick) * tick; t <= now; t += tick) {
    axis.append(svg('text', {x: X(t), y: H - 6, 'text-anchor': 'middle'}, `-${Math.round(now - t)}s`));
  }
  g.append(axis);
  if (!vis.length) return;
  // stacked areas
  const base = vis.map(() => 0);
  for (const l of layers) {
    const top = vis.map((s, i) => base[i] + l.get(s));
    if (top.some((v, i) => v !== base[i])) {
      // steps: a sample holds until the next one (what the allocator held)
      const xe = (i) => X(i + 1 < vis.length ? vis[i + 1].t : vis[i].t).toFixed(1);
      let d = '';
      vis.forEach((s, i) => { d += (i ? 'L' : 'M') + X(s.t).toFixed(1) + ',' + Y(top[i]).toFixed(1) + 'L' + xe(i) + ',' + Y(top[i]).toFixed(1); });
      for (let i = vis.length - 1; i >= 0; i--) d += 'L' + xe(i) + ',' + Y(base[i]).toFixed(1) + 'L' + X(vis[i].t).toFixed(1) + ',' + Y(base[i]).toFixed(1);
      const attrs = {d: d + 'Z', fill: l.colour, 'fill-opacity': l.owner ? 0.85 : 0.9, class: l.owner ? 'series' : 'band'};
      const p = svg('path', attrs);
      p.setAttribute('data-key', l.key);
      if (l.owner) {
        const last = vis[vis.length - 1].owners.find((q) => q.owner === l.key);
        p.setAttribute('data-owner', l.key);
        p.setAttribute('data-bytes', last ? onDevice(last) : 0);
        p.append(svg('title', {}, `${x.labels.get(l.key) || l.key}: ${fmtBytes(last ? onDevice(last) : 0)} on the device now` +
          (last && last.asleep_bytes ? `, ${fmtBytes(last.asleep_bytes)} asleep in host memory` : '')));
      }
      g.append(p);
    }
    for (let i = 0; i < vis.length; i++) base[i] = top[i];
  }
  // the driver's used line and ebb's own line
  const line = (get, cls) => {
    let d = '';
    vis.forEach((s, i) => {
      const x2 = X(i + 1 < vis.length ? vis[i + 1].t : s.t).toFixed(1);
      d += (i ? 'L' : 'M') + X(s.t).toFixed(1) + ',' + Y(get(s)).toFixed(1) + 'L' + x2 + ',' + Y(get(s)).toFixed(1);
    });
    g.append(svg('path', {d, class: cls}));
  };
  line((s) => s.driver_used_bytes || 0, 'driver');
  line((s) => (s.reserved_bytes || 0) + (s.context_bytes || 0), 'ebb-line');
  // marks
  let lastX = -1e9, row = 0;
  for (const m of x.marks) {
    if (m.t < t0 || !markShown(m.label)) continue;
    const mx = X(m.t);
    row = mx - lastX < 120 ? (row + 1) % 3 : 0;
    if (row === 0) lastX = mx;
    const mg = svg('g', {class: /(sleep|wake|asleep|woke)$/.test(m.label) ? 'mark sleep' : 'mark', 'data-label': m.label});
    mg.append(svg('line', {x1: mx, x2: mx, y1: T - 4, y2: H - B}));
    const nearEnd = mx > W - R - 7 * m.label.length;
    mg.append(svg('text', {x: nearEnd ? mx - 3 : mx + 3, y: 9 + row * 10, 'text-anchor': nearEnd ? 'end' : 'start'}, m.label));
    g.append(mg);
  }
  // releases: a point on the stack's top where the bytes went back, labelled
  let lastR = -1e9, rrow = 0;
  for (const r of x.releases) {
    if (r.t < t0) continue;
    let i = vis.findIndex((s) => s.t >= r.t);
    if (i < 0) i = vis.length - 1;
    const rx = X(r.t), ry = Y(Math.max(tops[Math.max(0, i - 1)] || 0, tops[i] || 0));
    rrow = rx - lastR < 70 ? (rrow + 1) % 3 : 0;
    lastR = rx;
    const rg = svg('g', {class: r.asleep ? 'release asleep' : 'release', 'data-bytes': r.bytes, 'data-stage': r.stage || ''});
    rg.append(svg('circle', {cx: rx, cy: ry, r: 4}));
    const text = `−${fmtBytes(r.bytes)}` + (r.stage ? ` ${r.stage}` : r.context_bytes ? ' context' : '') +
      (r.asleep ? ' asleep' : '');
    const rEnd = rx > W - R - 7 * text.length;
    // stacked above the point, or below it when the top of the chart is near
    const ly = ry - 6 - rrow * 12 >= T + 8 ? ry - 6 - rrow * 12 : ry + 14 + rrow * 12;
    rg.append(svg('text', {class: 'release-label', x: rEnd ? rx - 5 : rx + 5, y: ly,
      'text-anchor': rEnd ? 'end' : 'start', 'data-bytes': r.bytes}, text));
    rg.append(svg('title', {}, `${fmtBytes(r.bytes)} handed back to the driver at ${fmtTime(r.t)}` +
      (r.context_bytes ? ` (context ${fmtBytes(r.context_bytes)})` : '') +
      (r.asleep ? ' (put to sleep: its weights wait in host memory)' : '')));
    g.append(rg);
  }
}

function renderLeaks() {
  $('leaks-panel').hidden = !S.leaks.length;
  const tb = $('leaks').tBodies[0];
  tb.replaceChildren();
  for (const l of S.leaks.slice().reverse()) {
    const sites = el('td');
    for (const s of l.sites || []) sites.append(el('div', {}, `${fmtBytes(s.bytes)} at ${s.site}`));
    if (!(l.sites || []).length) sites.append('(site not recorded)');
    tb.append(el('tr', {class: 'leak', 'data-owner': l.owner, 'data-bytes': l.bytes},
      el('td', {class: 'num'}, fmtTime(l.t)),
      el('td', {}, l.pipeline ? `${l.pipeline} ▸ ${l.owner}` : l.owner, l.kind === 'outside' ? ' (outside ebb)' : ''),
      el('td', {class: 'num'}, fmtBytes(l.bytes)), sites));
  }
}

function renderPipelines() {
  const tb = $('pipelines').tBodies[0];
  tb.replaceChildren();
  for (const p of S.pipelines) {
    const state = p.state || (p.asleep ? 'asleep' : p.loaded ? 'loaded' : 'unloaded');
    const btn = (a) => el('button', {type: 'button', 'data-action': a, onclick: () => pipelineAction(p.name, a)}, a);
    const where = (p.devices || []).map((d) => (p.asleep_devices || []).includes(d) ? d + ' (asleep)' : d).join(', ');
    tb.append(el('tr', {'data-pipeline': p.name, 'data-state': state, 'data-devices': (p.devices || []).join(',')},
      el('td', {}, p.name), el('td', {class: 'state-' + state}, state, where ? el('div', {class: 'dim'}, where) : null),
      el('td', {}, (p.stages || []).map((s) => s.name).join(' ▸ ')),
      el('td', {class: 'num'}, p.sessions || 0),
      el('td', {class: 'num'}, p.need_bytes ? fmtBytes(p.need_bytes) : '–'),
      el('td', {class: 'actions'}, btn('load'), btn('unload'), btn('sleep'), btn('wake'))));
  }
}

function renderSessions() {
  const tb = $('sessions').tBodies[0];
  tb.replaceChildren();
  $('sessions-empty').hidden = S.sessions.length > 0;
  for (const s of S.sessions) {
    tb.append(el('tr', {'data-session': s.id},
      el('td', {}, s.id), el('td', {}, s.pipeline),
      el('td', {class: 'state-' + s.state}, s.state + (s.inflight ? ' (item running)' : ''),
        s.stop_reason ? el('div', {class: 'dim'}, s.stop_reason) : null),
      el('td', {class: 'num'}, `${s.items_done} done` + (s.items_failed ? `, ${s.items_failed} failed` : ''))));
  }
}

function renderJobs(changed) {
  const jobs = [...S.jobs.values()].sort((a, b) => (b.created || 0) - (a.created || 0));
  if (!changed && !jobs.some((j) => j.state === 'running')) return;
  const tb = $('jobs').tBodies[0];
  tb.replaceChildren();
  $('jobs-empty').hidden = jobs.length > 0;
  const q = jobs.filter((j) => j.state === 'queued').length, r = jobs.filter((j) => j.state === 'running').length;
  $('queue-summary').textContent = `· ${r} running, ${q} queued`;
  for (const j of jobs) {
    const stages = el('td');
    for (const s of j.stages || []) {
      stages.append(el('span', {class: 'stage', 'data-stage': s.name, 'data-peak': s.peak_bytes ?? '', 'data-released': s.released_bytes ?? ''},
        `${s.name}: ${fmtBytes(s.peak_bytes)} · ${s.released_bytes === null || s.released_bytes === undefined ? '…' : fmtBytes(s.released_bytes)}`));
    }
    const secs = j.started ? ((j.finished || Date.now() / 1000) - j.started).toFixed(2) + ' s' : '';
    tb.append(el('tr', {class: 'job', 'data-id': j.id, 'data-state': j.state, 'data-released': j.released_bytes || 0},
      el('td', {class: 'num', title: j.id}, String(j.id).length > 10 ? String(j.id).slice(0, 8) + '…' : j.id), el('td', {}, j.pipeline),
      el('td', {class: 'state-' + j.state}, j.state, j.error ? el('div', {class: 'error'}, j.error.message) : null),
      el('td', {class: 'num'}, secs), el('td', {class: 'num'}, fmtBytes(j.released_bytes || 0)), stages));
  }
}

$('window').addEventListener('change', (ev) => { S.windowS = Number(ev.target.value); schedule(); });
window.addEventListener('resize', schedule);
setInterval(schedule, 1000); // keep the time axis moving between samples
connect();

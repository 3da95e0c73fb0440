// The World page: live totals, the map, throughput, the leaderboard and the machines table. The
// coordinator holds the machines; the page holds a summary (totals and one entry per region), kept
// current by the event stream's deltas (/v1/world/events, or polling /v1/world when refused), and
// asks for what it shows: a page of the table (/v1/world/machines) and the marks of the map's view
// (/v1/world/map). Nothing is fetched from anywhere but the coordinator, and nothing it fetches
// grows with the population.
import "./style.css";
import { area, line, curveMonotoneX } from "d3-shape";
import { WorldMap } from "./map.js";
import {
  CHIP_CLASSES, GiB, chipClass, classLabel, esc, formatBytes, formatDuration, formatNumber,
  seatLabel, shortId, uptimeOf,
} from "./format.js";

// The page's own timeline (performance marks, read by the browser test): when this script began,
// and when the first summary, map and table page were on screen.
performance.mark("world:script");
const firstTime = new Set();
function markFirst(name) {
  if (firstTime.has(name)) return;
  firstTime.add(name);
  performance.mark(`world:${name}`);
}

const $ = (id) => document.getElementById(id);
const HOUR_MS = 3600 * 1000;
const PAGE = 50;

const state = {
  summary: { totals: {}, regions: [], chips: [], seats: {} },
  version: 0,
  history: [], // [t_ms, tok_s, jobs_per_min], oldest first
  stepMs: 10000,
  receivedAt: Date.now(),
  pinned: null, // the info whose tooltip stays open
  table: { offset: 0, sort: "memory", order: "desc", matched: 0, total: 0 },
};

async function getJson(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.json();
}

// Now, on the clock the machines' times are on: a simulation's runs ahead of the wall's.
function nowMs() {
  const sim = state.summary.simulation;
  if (!sim || !Number.isFinite(sim.now_ms)) return Date.now();
  return sim.now_ms + (sim.finished ? 0 : (Date.now() - state.receivedAt) * (sim.speed || 1));
}

// ---------------------------------------------------------------- map and tooltip

const tooltip = $("tooltip");
const mapWrap = $("map-wrap");
const worldMap = new WorldMap($("map"), {
  onHover: (info, elem) => { state.hovered = info ? elem : null; if (!state.pinned) showTooltip(info, elem); },
  onPin: (info, elem) => { state.pinned = info; showTooltip(info, elem); },
  fetchMarks: (views, cell, budget, clusters) => {
    const q = new URLSearchParams();
    for (const v of views) q.append("v", v);
    q.set("cell", cell);
    q.set("budget", String(budget));
    if (clusters) q.set("clusters", "1");
    return getJson(`/v1/world/map?${q}`);
  },
  recentDeltas: () => recentDeltas,
  onStale: () => scheduleRefresh("map"),
  onView: ({ mode, marks, inView, zoom }) => {
    if (marks > 0) markFirst("map");
    $("map-view").textContent = mode === "regions"
      ? `World view · ${formatNumber(marks)} region${marks === 1 ? "" : "s"} with machines online · scroll or pinch to zoom, click a region`
      : `Zoom ×${zoom.toFixed(zoom < 10 ? 1 : 0)} · ${formatNumber(inView)} machine${inView === 1 ? "" : "s"} in view` +
        (mode === "clusters" ? ` in ${formatNumber(marks)} clusters · zoom in to see each` : "");
  },
});
$("zoom-in").addEventListener("click", () => worldMap.zoomBy(2));
$("zoom-out").addEventListener("click", () => worldMap.zoomBy(0.5));
$("zoom-reset").addEventListener("click", () => worldMap.reset());
for (const b of document.querySelectorAll("[data-size-by]"))
  b.addEventListener("click", () => {
    for (const o of document.querySelectorAll("[data-size-by]")) o.setAttribute("aria-pressed", String(o === b));
    worldMap.setSizeBy(b.dataset.sizeBy);
  });

function mix(classes) {
  const total = (classes || []).reduce((s, n) => s + (Number(n) || 0), 0) || 1;
  return CHIP_CLASSES.map((c, i) => (classes?.[i] ? `<span class="mix"><span class="swatch c-${c.key}"></span>${c.label} ${formatNumber(classes[i])} (${Math.round((100 * classes[i]) / total)}%)</span>` : "")).join("");
}

function showTooltip(info, elem) {
  if (!info || !elem) {
    tooltip.hidden = true;
    return;
  }
  const pin = state.pinned === info ? " · pinned" : "";
  if (info.kind === "region") {
    const r = info.region;
    tooltip.innerHTML = `
      <p class="tt-title">${esc(r.name || "Region not shared")}</p>
      <dl>
        <dt>Online</dt><dd>${formatNumber(r.online)} of ${formatNumber(r.machines)}</dd>
        <dt>Memory</dt><dd>${formatBytes(r.memory_bytes)}</dd>
        <dt>Pods</dt><dd>${formatNumber(r.pods)}</dd>
        <dt>Seats</dt><dd>${Object.entries(r.seats || {}).map(([s, n]) => `${esc(seatLabel(s))} ${formatNumber(n)}`).join(" · ") || "–"}</dd>
        <dt>Jobs served</dt><dd>${formatNumber(r.jobs_served)}</dd>
      </dl>
      <p class="tt-mix">${mix(r.classes)}</p>
      <p class="tt-id">${r.name ? "Click to zoom in" : "Filter the table by region to list them"}${pin}</p>`;
  } else if (info.kind === "cluster") {
    tooltip.innerHTML = `
      <p class="tt-title">${formatNumber(info.count)} machines</p>
      <dl>
        <dt>Region</dt><dd>${esc(info.region)}</dd>
        <dt>Memory</dt><dd>${formatBytes(info.memory_bytes)}</dd>
        <dt>Pods</dt><dd>${formatNumber(info.pods)}</dd>
      </dl>
      <p class="tt-mix">${mix(info.classes)}</p>
      <p class="tt-id">Click to zoom in${pin}</p>`;
  } else {
    const node = info.node;
    const cls = chipClass(node.chip);
    const up = uptimeOf(node, nowMs());
    tooltip.innerHTML = `
      <p class="tt-title"><span class="swatch c-${cls}"></span>${esc(node.chip || "Unknown chip")}</p>
      <dl>
        <dt>Memory</dt><dd>${formatBytes(node.memory_bytes)}</dd>
        <dt>Seat</dt><dd>${esc(seatLabel(node.seat))}</dd>
        <dt>Region</dt><dd>${esc(node.region || "not shared")}</dd>
        ${node.pod ? `<dt>Pod</dt><dd>${esc(node.pod)}</dd>` : ""}
        <dt>Jobs served</dt><dd>${formatNumber(node.jobs_served)}</dd>
        <dt>Last job</dt><dd>${formatNumber(node.tok_s, 1)} tok/s</dd>
        <dt>Uptime</dt><dd>${up === null ? "–" : formatDuration(up)}</dd>
      </dl>
      <p class="tt-id">${esc(shortId(node.id))}${pin}</p>`;
  }
  tooltip.hidden = false;
  // Next to the mark, inside the map's box.
  const box = mapWrap.getBoundingClientRect();
  const d = elem.getBoundingClientRect();
  const tw = tooltip.offsetWidth, th = tooltip.offsetHeight;
  let x = d.right - box.left + 8;
  if (x + tw > box.width) x = d.left - box.left - tw - 8;
  const y = d.top - box.top + d.height / 2 - th / 2;
  tooltip.style.left = `${Math.max(4, Math.min(x, box.width - tw - 4))}px`;
  tooltip.style.top = `${Math.max(4, Math.min(y, box.height - th - 4))}px`;
}

document.addEventListener("click", () => { if (state.pinned) { state.pinned = null; showTooltip(null); } });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") { state.pinned = null; showTooltip(null); } });

// Legend: colour by chip class; what the marks stand for.
$("legend").innerHTML =
  CHIP_CLASSES.map((c) => `<li><span class="swatch c-${c.key}"></span>${c.label}</li>`).join("") +
  `<li><svg width="16" height="16" aria-hidden="true"><circle class="lg-ring" cx="8" cy="8" r="6"/></svg>a region or a cluster: slices by chip class, the number of machines</li>` +
  `<li><svg width="12" height="12" aria-hidden="true"><circle class="lg-dot" cx="6" cy="6" r="4"/></svg>a machine, sized by memory</li>`;

// ---------------------------------------------------------------- totals

function renderTotals() {
  const t = state.summary.totals || {};
  $("stat-online").textContent = formatNumber(t.online ?? 0);
  $("stat-nodes").textContent = `of ${formatNumber(t.nodes ?? 0)} registered`;
  $("stat-memory").textContent = formatBytes(t.memory_bytes ?? 0);
  // The network's output over the last minute, as the coordinator counts it; never a sum of the
  // machines' last-job speeds (the table's column), which would claim output nobody is producing.
  $("stat-toks").textContent = t.tok_s == null ? "–" : formatNumber(t.tok_s, 1);
  $("stat-jobs").textContent = formatNumber(t.jobs_per_min ?? 0, 1);
  $("stat-served").textContent = `${formatNumber(t.jobs_served ?? 0)} served in all`;
  $("stat-queue").textContent = formatNumber(t.queue ?? 0);
  const sim = state.summary.simulation;
  const banner = $("sim-banner");
  banner.hidden = !sim;
  if (sim) {
    banner.textContent = `Simulation — not a live network: ${formatNumber(t.nodes ?? 0)} synthetic machines, ` +
      `virtual time ${formatDuration(sim.virtual_s || 0)} of ${formatNumber(sim.hours, 1)} h` +
      (sim.finished ? " (finished)" : ` at ×${formatNumber(sim.speed, 1)}`);
    document.title = "Orchard World (simulation)";
  }
}

// ---------------------------------------------------------------- throughput sparkline

function addSample(sample) {
  if (!Array.isArray(sample) || sample.length < 2) return;
  const [t, tokS, jpm] = sample;
  const bucket = t - (t % state.stepMs);
  const last = state.history[state.history.length - 1];
  if (last && last[0] === bucket) {
    last[3] = (last[3] || 1) + 1; // running mean within a step, as the coordinator keeps it
    last[1] += (tokS - last[1]) / last[3];
    last[2] += ((jpm ?? 0) - last[2]) / last[3];
  } else if (!last || bucket > last[0]) {
    state.history.push([bucket, tokS, jpm ?? 0, 1]);
  }
  const cutoff = Date.now() - HOUR_MS - state.stepMs;
  while (state.history.length && state.history[0][0] < cutoff) state.history.shift();
}

const spark = $("spark");
function renderSpark() {
  const w = 320, h = 90, pad = 4;
  const now = Date.now();
  const pts = state.history.filter((p) => p[0] >= now - HOUR_MS);
  const peak = Math.max(1, ...pts.map((p) => p[1]));
  const x = (t) => ((t - (now - HOUR_MS)) / HOUR_MS) * w;
  const y = (v) => h - pad - (v / peak) * (h - 2 * pad);
  const a = area().x((p) => x(p[0])).y0(h).y1((p) => y(p[1])).curve(curveMonotoneX);
  const l = line().x((p) => x(p[0])).y((p) => y(p[1])).curve(curveMonotoneX);
  spark.innerHTML =
    `<line class="grid" x1="0" x2="${w}" y1="${y(peak)}" y2="${y(peak)}"/><line class="grid" x1="0" x2="${w}" y1="${y(peak / 2)}" y2="${y(peak / 2)}"/>` +
    (pts.length ? `<path class="area" d="${a(pts)}"/><path class="line" d="${l(pts)}"/>` : "") +
    (pts.length ? `<circle class="head" cx="${x(pts[pts.length - 1][0]).toFixed(1)}" cy="${y(pts[pts.length - 1][1]).toFixed(1)}" r="2.5"/>` : "");
  const cur = state.summary.totals?.tok_s ?? 0;
  $("tp-now").textContent = `${formatNumber(cur, 1)} tok/s`;
  $("tp-peak").textContent = pts.length ? `peak ${formatNumber(Math.max(...pts.map((p) => p[1])), 1)} tok/s` : "no data yet";
}

// ---------------------------------------------------------------- leaderboard

function renderLeaderboard() {
  const credits = state.summary.totals?.credits_by_seat || {};
  const machines = state.summary.seats || {};
  const seats = [...new Set([...Object.keys(credits), ...Object.keys(machines)])];
  const rows = seats.map((s) => ({ seat: s, credits: Number(credits[s]) || 0, machines: machines[s] || 0 }))
    .sort((a, b) => b.credits - a.credits || a.seat.localeCompare(b.seat));
  const top = Math.max(1e-9, ...rows.map((r) => r.credits));
  $("leaderboard").innerHTML = rows.length
    ? rows.map((r, i) => `
      <li>
        <span class="rank">${i + 1}</span>
        <span class="seat">${esc(seatLabel(r.seat))}<small>${formatNumber(r.machines)} online</small></span>
        <span class="credits">${formatNumber(r.credits, 2)}<small> credits</small></span>
        <span class="bar" aria-hidden="true"><span data-w="${((r.credits / top) * 100).toFixed(1)}"></span></span>
      </li>`).join("")
    : `<li class="empty">No credits earned yet</li>`;
  // Widths through the CSSOM: the page's Content-Security-Policy refuses inline style attributes.
  for (const b of $("leaderboard").querySelectorAll("[data-w]")) b.style.width = `${b.dataset.w}%`;
}

// ---------------------------------------------------------------- machines table

const filters = { chip: $("f-chip"), mem: $("f-mem"), region: $("f-region"), seat: $("f-seat"), status: $("f-status") };
for (const f of Object.values(filters)) f.addEventListener("change", () => { state.table.offset = 0; loadTable(); });
$("filters").addEventListener("submit", (e) => e.preventDefault());
$("page-prev").addEventListener("click", () => { state.table.offset = Math.max(0, state.table.offset - PAGE); loadTable(); });
$("page-next").addEventListener("click", () => { state.table.offset += PAGE; loadTable(); });
for (const b of document.querySelectorAll("#machines th button[data-sort]"))
  b.addEventListener("click", () => {
    const t = state.table;
    if (t.sort === b.dataset.sort) t.order = t.order === "desc" ? "asc" : "desc";
    else { t.sort = b.dataset.sort; t.order = b.dataset.order || "desc"; }
    t.offset = 0;
    loadTable();
  });

function setOptions(select, groups) {
  const want = groups.flatMap((g) => g.options.map((o) => o.value)).join("\n");
  if (select.dataset.options === want) return;
  const current = select.value;
  select.innerHTML = groups.map((g) => {
    const opts = g.options.map((o) => `<option value="${esc(o.value)}">${esc(o.label)}</option>`).join("");
    return g.label ? (g.options.length ? `<optgroup label="${esc(g.label)}">${opts}</optgroup>` : "") : opts;
  }).join("");
  select.dataset.options = want;
  select.value = [...select.options].some((o) => o.value === current) ? current : "";
}

function renderFilterOptions() {
  const s = state.summary;
  const classes = CHIP_CLASSES.filter((c) => (s.chips || []).some((x) => x.class === c.key));
  setOptions(filters.chip, [
    { options: [{ value: "", label: "All chips" }] },
    { label: "Class", options: classes.map((c) => ({ value: `class:${c.key}`, label: `${c.label} (any)` })) },
    { label: "Chip", options: [...(s.chips || [])].sort((a, b) => a.chip.localeCompare(b.chip)).map((c) => ({ value: `chip:${c.chip}`, label: c.chip || "Unknown" })) },
  ]);
  const regions = [...(s.regions || [])].sort((a, b) => a.name.localeCompare(b.name));
  setOptions(filters.region, [{ options: [{ value: "", label: "Everywhere" },
    ...regions.map((r) => ({ value: `r:${r.name}`, label: r.name ? `${r.name} (${formatNumber(r.machines)})` : `Not shared (${formatNumber(r.machines)})` }))] }]);
  setOptions(filters.seat, [{ options: [{ value: "", label: "Any seat" },
    ...["dedicated", "shared"].map((x) => ({ value: x, label: seatLabel(x) }))] }]);
}

function tableQuery() {
  const q = new URLSearchParams();
  const chip = filters.chip.value;
  if (chip.startsWith("class:")) q.set("class", chip.slice(6));
  else if (chip.startsWith("chip:")) q.set("chip", chip.slice(5));
  const gb = Number(filters.mem.value) || 0;
  if (gb) q.set("min_memory", String(gb * GiB));
  if (filters.region.value.startsWith("r:")) q.set("region", filters.region.value.slice(2));
  if (filters.seat.value) q.set("seat", filters.seat.value);
  q.set("online", filters.status.value || "true");
  q.set("sort", state.table.sort);
  q.set("order", state.table.order);
  q.set("offset", String(state.table.offset));
  q.set("limit", String(PAGE));
  return q;
}

let tableTicket = 0;
async function loadTable() {
  const ticket = ++tableTicket;
  const query = tableQuery();
  let page;
  try {
    page = await getJson(`/v1/world/machines?${query}`);
  } catch {
    return;
  }
  if (ticket !== tableTicket) return;
  const t = state.table;
  if (page.machines.length === 0 && t.offset > 0 && t.offset >= page.matched) {
    t.offset = Math.max(0, Math.floor((page.matched - 1) / PAGE) * PAGE); // the list got shorter
    return loadTable();
  }
  t.page = page;
  t.query = Object.fromEntries(query);
  tableFetches++;
  // Deltas that came while it was on its way, of changes after its version.
  for (const d of recentDeltas) if (d.span[1] > page.at && !patchTable(d)) { scheduleRefresh("table"); break; }
  renderTable();
}

function renderTable() {
  const t = state.table, page = t.page;
  t.matched = page.matched;
  t.total = page.total;
  const now = nowMs();
  $("machines").tBodies[0].innerHTML = page.machines.map((n) => {
    const cls = chipClass(n.chip), up = uptimeOf(n, now);
    return `<tr data-node-id="${esc(n.id)}" class="${n.online ? "" : "offline"}">
      <td><code title="${esc(n.id)}">${esc(shortId(n.id))}</code></td>
      <td><span class="swatch c-${cls}" title="${classLabel(cls)}"></span>${esc(n.chip || "Unknown")}</td>
      <td class="num">${formatBytes(n.memory_bytes)}</td>
      <td>${esc(n.region || "–")}</td>
      <td>${esc(seatLabel(n.seat))}</td>
      <td>${esc(n.pod || "–")}</td>
      <td class="num">${formatNumber(n.jobs_served)}</td>
      <td class="num">${formatNumber(n.tok_s, 1)}</td>
      <td class="num">${n.online && up !== null ? formatDuration(up) : "–"}</td>
    </tr>`;
  }).join("") || `<tr class="empty"><td colspan="9">No machines match these filters</td></tr>`;
  const from = page.machines.length ? t.offset + 1 : 0, to = t.offset + page.machines.length;
  $("table-count").textContent = `${formatNumber(from)}–${formatNumber(to)} of ${page.matched.toLocaleString("en-US")} matching · ${page.total.toLocaleString("en-US")} registered`;
  $("page-prev").disabled = t.offset === 0;
  $("page-next").disabled = to >= page.matched;
  for (const b of document.querySelectorAll("#machines th button[data-sort]")) {
    const th = b.closest("th");
    th.setAttribute("aria-sort", b.dataset.sort === t.sort ? (t.order === "desc" ? "descending" : "ascending") : "none");
  }
  document.body.dataset.tableVersion = String(tableTicket); // for tests and tools
  document.body.dataset.tableFetches = String(tableFetches);
  document.body.dataset.tablePatches = String(tablePatches);
  markFirst("table");
}

// ---------------------------------------------------------------- deltas applied in place
//
// A delta lists the machines that changed (up to 100), each as it was and as it is, with the
// population's versions of the commits that changed it first and last, and the span of versions
// it covers. A view (a table page, a map view) says the version it is of: a change at or before it
// is in the view already; one after it is applied to the view when the view can say where it
// goes, else the view is asked for again.

const recentDeltas = []; // the last few, for a view that arrives after them
let tableFetches = 0, tablePatches = 0;

const RECORD = ["chip", "memory_bytes", "region", "seat", "pod", "online", "jobs_served", "tok_s", "online_since", "x", "y"];
function fromRecord(id, r) {
  if (!r) return null;
  const m = { id };
  RECORD.forEach((k, i) => { m[k] = r[i]; });
  return m;
}

// As the coordinator filters and sorts (population.cpp).
function tableMatches(q, m) {
  if (q.online === "true" && !m.online) return false;
  if (q.online === "false" && m.online) return false;
  if (q.chip !== undefined && m.chip !== q.chip) return false;
  if (q.class !== undefined && chipClass(m.chip) !== q.class) return false;
  if (q.min_memory !== undefined && m.memory_bytes < Number(q.min_memory)) return false;
  if (q.region !== undefined && m.region !== q.region) return false;
  if (q.seat !== undefined && m.seat !== q.seat) return false;
  if (q.pod !== undefined && m.pod !== q.pod) return false;
  return true;
}
const SORT_KEYS = {
  memory: (m) => m.memory_bytes, chip: (m) => m.chip, region: (m) => m.region, seat: (m) => m.seat, pod: (m) => m.pod,
  jobs: (m) => m.jobs_served, tok_s: (m) => m.tok_s, uptime: (m) => (m.online ? -m.online_since : -Infinity), id: (m) => m.id,
};
function keyCompare(q, a, b) {
  const key = SORT_KEYS[q.sort] || SORT_KEYS.memory;
  const x = key(a), y = key(b);
  return x < y ? -1 : y < x ? 1 : 0;
}
// a comes before b in the table's order (ties by id, whatever the order).
function tableBefore(q, a, b) {
  const c = keyCompare(q, a, b);
  if (c !== 0) return q.order === "desc" ? c > 0 : c < 0;
  return a.id < b.id;
}

// Applies a delta to the table's page; false when it cannot say what the page now holds (a
// machine before the page came or went, so the page's rows shift; a row left a full page and the
// next one is not here).
function patchTable(d) {
  const t = state.table, page = t.page, q = t.query;
  if (!page || !q) return true; // the first page is on its way
  const [from, to] = d.span;
  if (page.at >= to) return true; // in it already
  if (page.at < from) return false; // a delta it never saw
  const records = d.machines?.records || [];
  if ((d.machines?.changed || 0) > records.length) return false; // more changed than it lists
  const limit = Number(q.limit), offset = Number(q.offset);
  const head = page.machines[0], tail = page.machines[page.machines.length - 1];
  const full = page.machines.length === limit;
  // Before the page's first row (with pages before it): everything on the page would move.
  const beforePage = (m) => offset > 0 && (!head || tableBefore(q, m, head));
  // After a full page's last row: on a later page.
  const afterPage = (m) => full && tail && tableBefore(q, tail, m);
  const rows = page.machines.slice();
  let matched = page.matched;
  for (const [id, wasRec, nowRec, first, lastAt] of records) {
    if (lastAt <= page.at) continue; // the page has it
    if (first <= page.at) return false; // changed both before and after the page: where it was is unknown
    const was = fromRecord(id, wasRec), now = fromRecord(id, nowRec);
    const wasIn = !!was && tableMatches(q, was), nowIn = !!now && tableMatches(q, now);
    matched += (nowIn ? 1 : 0) - (wasIn ? 1 : 0);
    const at = rows.findIndex((r) => r.id === id);
    if (at >= 0) rows.splice(at, 1);
    else if (wasIn && beforePage(was)) return false;
    if (!nowIn || afterPage(now)) continue;
    if (beforePage(now)) return false;
    const row = { ...now };
    delete row.x; delete row.y;
    const to2 = rows.findIndex((r) => tableBefore(q, now, r));
    rows.splice(to2 < 0 ? rows.length : to2, 0, row);
  }
  rows.length = Math.min(rows.length, limit); // what falls off the end is the next page's
  if (rows.length < limit && matched > offset + rows.length) return false; // the next rows are not here
  page.machines = rows;
  page.matched = matched;
  page.at = to;
  tablePatches++;
  renderTable();
  return true;
}

function patchViews(d) {
  recentDeltas.push(d);
  while (recentDeltas.length > 8) recentDeltas.shift();
  if (!patchTable(d)) scheduleRefresh("table");
  if (worldMap.mode() === "detail" && !worldMap.patch(d)) scheduleRefresh("map");
}

// ---------------------------------------------------------------- data in

// A view a delta could not be applied to is asked for again, at most this often.
const REFRESH_MS = 2000;
let refreshTimer = null, lastRefresh = 0;
const stale = new Set(); // "table", "map"
function scheduleRefresh(what) {
  stale.add(what);
  const run = () => {
    refreshTimer = null;
    lastRefresh = Date.now();
    if (stale.delete("table")) loadTable();
    if (stale.delete("map") && worldMap.mode() === "detail") worldMap.requestDetail(true);
  };
  if (refreshTimer) return;
  refreshTimer = setTimeout(run, Math.max(0, REFRESH_MS - (Date.now() - lastRefresh)));
}

function render() {
  worldMap.setRegions(state.summary.regions || []);
  const regions = (state.summary.regions || []).filter((r) => r.online > 0);
  $("map-desc").textContent = `World map: ${formatNumber(state.summary.totals?.online ?? 0)} machines online in ${regions.length} regions`;
  renderTotals();
  renderSpark();
  renderLeaderboard();
  renderFilterOptions();
  if (state.pinned?.kind === "region") {
    const r = state.summary.regions.find((g) => g.name === state.pinned.region.name);
    if (r) state.pinned.region = r;
  }
  // A tooltip stays while its mark does (region marks outlive updates); else it goes.
  if (!state.pinned && !tooltip.hidden && !state.hovered?.isConnected) showTooltip(null);
  document.body.dataset.version = String(state.version || 0); // for tests and tools
}

// `polled`: from /v1/world (no event stream), which brings no deltas to patch the views with.
function acceptSummary(doc, polled = false) {
  if (!doc || typeof doc !== "object") return;
  state.summary = { totals: doc.totals || {}, regions: doc.regions || [], chips: doc.chips || [], seats: doc.seats || {},
    simulation: doc.simulation };
  state.version = doc.version || 0;
  state.receivedAt = Date.now();
  if (doc.sample) addSample(doc.sample);
  render();
  markFirst("summary");
  // The views need nothing from a stream's summary: its next delta's span says whether they
  // missed a change. Polled, nothing else will tell them.
  if (polled) {
    if (state.table.page) scheduleRefresh("table");
    if (worldMap.mode() === "detail") scheduleRefresh("map");
  }
}

function acceptDelta(d) {
  const s = state.summary;
  s.totals = d.totals || s.totals;
  if (d.chips) s.chips = d.chips;
  if (d.seats) s.seats = d.seats;
  if (d.simulation) s.simulation = d.simulation;
  const byName = new Map(s.regions.map((r) => [r.name, r]));
  for (const r of d.regions || []) {
    if (r.machines > 0) byName.set(r.name, r); else byName.delete(r.name);
  }
  s.regions = [...byName.values()];
  state.version = d.version;
  state.receivedAt = Date.now();
  if (d.sample) addSample(d.sample);
  render();
  if (Array.isArray(d.span)) patchViews(d);
  else if (d.machines?.changed) { scheduleRefresh("table"); scheduleRefresh("map"); }
}

function acceptHistory(h) {
  if (!h || !Array.isArray(h.points)) return;
  state.stepMs = (Number(h.step_s) || 10) * 1000;
  state.history = h.points.map((p) => [p[0], p[1], p[2] ?? 0, 1]);
  renderSpark();
}

function setStatus(kind, text) {
  $("status").dataset.state = kind;
  $("status-text").textContent = text;
}

let pollTimer = null;
async function poll() {
  try {
    const doc = await getJson("/v1/world");
    if (doc.version !== state.version || !doc.version) {
      if (!doc.sample) doc.sample = [Date.now(), doc.totals?.tok_s ?? 0, doc.totals?.jobs_per_min ?? 0];
      acceptSummary(doc, true);
    }
    setStatus("polling", "Updating every 2 s");
  } catch {
    setStatus("down", "Coordinator unreachable");
  }
}
function startPolling() {
  if (pollTimer) return;
  getJson("/v1/world/history").then(acceptHistory).catch(() => {});
  poll();
  pollTimer = setInterval(poll, 2000);
}

function connect() {
  if (!("EventSource" in window)) return startPolling();
  const es = new EventSource("/v1/world/events");
  es.addEventListener("open", () => setStatus("live", "Live"));
  es.addEventListener("history", (e) => acceptHistory(JSON.parse(e.data)));
  es.addEventListener("summary", (e) => { acceptSummary(JSON.parse(e.data)); setStatus("live", "Live"); });
  es.addEventListener("delta", (e) => {
    const d = JSON.parse(e.data);
    // A delta that does not follow what the page holds: the next summary puts it right.
    if (d.version !== state.version + 1) { es.close(); setTimeout(connect, 100); return; }
    acceptDelta(d);
    setStatus("live", "Live");
  });
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED) {
      // Refused (too many streams) or not there: poll instead, and try the stream again later.
      startPolling();
      setTimeout(() => { clearInterval(pollTimer); pollTimer = null; connect(); }, 60000);
    } else {
      setStatus("connecting", "Reconnecting…");
    }
  });
}

// Keep the "last hour" window moving between events.
setInterval(() => { renderSpark(); }, 5000);
window.addEventListener("resize", () => { if (!tooltip.hidden) showTooltip(null); });

render();
loadTable();
connect();

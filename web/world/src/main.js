// The World page: live totals, the map, throughput, the leaderboard and the machines table, all
// fed by the coordinator's event stream (/v1/world/events), or by polling /v1/world when the
// stream is refused. Nothing is fetched from anywhere but the coordinator.
import "./style.css";
import { area, line, curveMonotoneX } from "d3-shape";
import { WorldMap, dotRadius } from "./map.js";
import {
  CHIP_CLASSES, GiB, chipClass, esc, formatBytes, formatDuration, formatNumber,
  seatLabel, shortId, uptimeOf,
} from "./format.js";

const $ = (id) => document.getElementById(id);
const HOUR_MS = 3600 * 1000;

const state = {
  doc: { nodes: [], totals: {} },
  history: [], // [t_ms, tok_s, jobs_per_min], oldest first
  stepMs: 10000,
  receivedAt: Date.now(),
  pinned: null, // node id whose tooltip stays open
};

// ---------------------------------------------------------------- map and tooltip

const tooltip = $("tooltip");
const mapWrap = $("map-wrap");
const worldMap = new WorldMap($("map"), { onSelect: select });

function select(node, dot, pin) {
  if (pin) {
    state.pinned = state.pinned === node?.id ? null : node?.id ?? null;
  } else if (!node && state.pinned) {
    return; // leaving a dot keeps a pinned tooltip
  } else if (state.pinned && node && node.id !== state.pinned) {
    state.pinned = null;
  }
  const shown = state.pinned ? state.doc.nodes.find((n) => n.id === state.pinned) : node;
  showTooltip(shown, shown ? worldMap.dotOf(shown.id) || dot : null);
}

function showTooltip(node, dot) {
  document.querySelectorAll(".dot.selected").forEach((d) => d.classList.remove("selected"));
  document.querySelectorAll(".pod.selected").forEach((p) => p.classList.remove("selected"));
  if (!node || !dot) {
    tooltip.hidden = true;
    return;
  }
  dot.classList.add("selected");
  if (node.pod) document.querySelector(`.pod[data-pod="${CSS.escape(String(node.pod))}"]`)?.classList.add("selected");
  const cls = chipClass(node.chip);
  const up = uptimeOf(node, Date.now());
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
    <p class="tt-id">${esc(shortId(node.id))}${state.pinned ? " · pinned" : ""}</p>`;
  tooltip.hidden = false;
  // Next to the dot, inside the map's box.
  const box = mapWrap.getBoundingClientRect();
  const d = dot.getBoundingClientRect();
  const tw = tooltip.offsetWidth, th = tooltip.offsetHeight;
  let x = d.right - box.left + 8;
  if (x + tw > box.width) x = d.left - box.left - tw - 8;
  let y = d.top - box.top + d.height / 2 - th / 2;
  tooltip.style.left = `${Math.max(4, Math.min(x, box.width - tw - 4))}px`;
  tooltip.style.top = `${Math.max(4, Math.min(y, box.height - th - 4))}px`;
}

document.addEventListener("click", () => { if (state.pinned) { state.pinned = null; showTooltip(null); } });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") { state.pinned = null; showTooltip(null); } });

// Legend: colour by chip class, size by memory.
$("legend").innerHTML =
  CHIP_CLASSES.map((c) => `<li><span class="swatch c-${c.key}"></span>${c.label}</li>`).join("") +
  `<li class="sizes" aria-label="Dot size follows memory">` +
  [16, 64, 192].map((gb) => { const r = dotRadius(gb * GiB) * 0.8; return `<svg width="${2 * r + 2}" height="${2 * r + 2}" aria-hidden="true"><circle cx="${r + 1}" cy="${r + 1}" r="${r}"/></svg>`; }).join("") +
  `<span>16 · 64 · 192 GB</span></li>`;

// ---------------------------------------------------------------- totals

function renderTotals() {
  const t = state.doc.totals || {};
  const nodes = state.doc.nodes || [];
  $("stat-online").textContent = formatNumber(t.online ?? nodes.filter((n) => n.online).length);
  $("stat-nodes").textContent = `of ${formatNumber(t.nodes ?? nodes.length)} registered`;
  $("stat-memory").textContent = formatBytes(t.memory_bytes ?? 0);
  // The network's output over the last minute, as the coordinator counts it; never a sum of the
  // machines' last-job speeds (the table's column), which would claim output nobody is producing.
  $("stat-toks").textContent = t.tok_s == null ? "–" : formatNumber(t.tok_s, 1);
  $("stat-jobs").textContent = formatNumber(t.jobs_per_min ?? 0, 1);
  $("stat-served").textContent = `${formatNumber(t.jobs_served ?? 0)} served in all`;
  $("stat-queue").textContent = formatNumber(t.queue ?? 0);
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
  const cur = state.doc.totals?.tok_s ?? 0;
  $("tp-now").textContent = `${formatNumber(cur, 1)} tok/s`;
  $("tp-peak").textContent = pts.length ? `peak ${formatNumber(Math.max(...pts.map((p) => p[1])), 1)} tok/s` : "no data yet";
}

// ---------------------------------------------------------------- leaderboard

function renderLeaderboard() {
  const credits = state.doc.totals?.credits_by_seat || {};
  const machines = {};
  for (const n of state.doc.nodes || []) machines[n.seat || "shared"] = (machines[n.seat || "shared"] || 0) + 1;
  const seats = [...new Set([...Object.keys(credits), ...Object.keys(machines)])];
  const rows = seats.map((s) => ({ seat: s, credits: Number(credits[s]) || 0, machines: machines[s] || 0 }))
    .sort((a, b) => b.credits - a.credits || a.seat.localeCompare(b.seat));
  const top = Math.max(1e-9, ...rows.map((r) => r.credits));
  $("leaderboard").innerHTML = rows.length
    ? rows.map((r, i) => `
      <li>
        <span class="rank">${i + 1}</span>
        <span class="seat">${esc(seatLabel(r.seat))}<small>${r.machines} machine${r.machines === 1 ? "" : "s"}</small></span>
        <span class="credits">${formatNumber(r.credits, 2)}<small> credits</small></span>
        <span class="bar" aria-hidden="true"><span data-w="${((r.credits / top) * 100).toFixed(1)}"></span></span>
      </li>`).join("")
    : `<li class="empty">No credits earned yet</li>`;
  // Widths through the CSSOM: the page's Content-Security-Policy refuses inline style attributes.
  for (const b of $("leaderboard").querySelectorAll("[data-w]")) b.style.width = `${b.dataset.w}%`;
}

// ---------------------------------------------------------------- machines table

const fChip = $("f-chip"), fMem = $("f-mem"), fOffline = $("f-offline");
for (const f of [fChip, fMem, fOffline]) f.addEventListener("change", renderTable);
$("filters").addEventListener("submit", (e) => e.preventDefault());

function renderChipOptions() {
  const chips = [...new Set((state.doc.nodes || []).map((n) => n.chip || "Unknown"))].sort();
  const classes = CHIP_CLASSES.filter((c) => (state.doc.nodes || []).some((n) => chipClass(n.chip) === c.key));
  const want = ["", ...classes.map((c) => `class:${c.key}`), ...chips.map((c) => `chip:${c}`)];
  const have = [...fChip.options].map((o) => o.value);
  if (want.join("\n") === have.join("\n")) return;
  const current = fChip.value;
  fChip.innerHTML = `<option value="">All chips</option>` +
    (classes.length ? `<optgroup label="Class">${classes.map((c) => `<option value="class:${c.key}">${c.label} (any)</option>`).join("")}</optgroup>` : "") +
    (chips.length ? `<optgroup label="Chip">${chips.map((c) => `<option value="chip:${esc(c)}">${esc(c)}</option>`).join("")}</optgroup>` : "");
  fChip.value = want.includes(current) ? current : "";
}

function renderTable() {
  const chip = fChip.value, minGb = Number(fMem.value) || 0, offline = fOffline.checked;
  const now = Date.now();
  const all = state.doc.nodes || [];
  const rows = all.filter((n) =>
    (offline || n.online) &&
    (!chip || (chip.startsWith("class:") ? chipClass(n.chip) === chip.slice(6) : (n.chip || "Unknown") === chip.slice(5))) &&
    (Number(n.memory_bytes) || 0) >= minGb * GiB)
    .sort((a, b) => (b.online - a.online) || (b.memory_bytes - a.memory_bytes) || String(a.id).localeCompare(String(b.id)));
  $("machines").tBodies[0].innerHTML = rows.map((n) => {
    const cls = chipClass(n.chip), up = uptimeOf(n, now);
    return `<tr data-node-id="${esc(n.id)}" class="${n.online ? "" : "offline"}">
      <td><span class="state ${n.online ? "on" : "off"}" title="${n.online ? "online" : "offline"}"></span><code>${esc(shortId(n.id))}</code></td>
      <td><span class="swatch c-${cls}"></span>${esc(n.chip || "Unknown")}</td>
      <td class="num">${formatBytes(n.memory_bytes)}</td>
      <td>${esc(n.region || "–")}</td>
      <td>${esc(seatLabel(n.seat))}</td>
      <td>${esc(n.pod || "–")}</td>
      <td class="num">${formatNumber(n.jobs_served)}</td>
      <td class="num">${formatNumber(n.tok_s, 1)}</td>
      <td class="num">${n.online && up !== null ? formatDuration(up) : "–"}</td>
    </tr>`;
  }).join("") || `<tr class="empty"><td colspan="9">No machines match these filters</td></tr>`;
  $("table-count").textContent = `Showing ${rows.length} of ${all.length} machine${all.length === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------- data in

function render() {
  const info = worldMap.update(state.doc.nodes || []);
  $("map-desc").textContent = `World map: ${info.placed + info.unplaced} machines online in ${info.regions} regions`;
  renderTotals();
  renderSpark();
  renderLeaderboard();
  renderChipOptions();
  renderTable();
  if (state.pinned) {
    const n = state.doc.nodes.find((x) => x.id === state.pinned && x.online);
    if (n) showTooltip(n, worldMap.dotOf(n.id)); else { state.pinned = null; showTooltip(null); }
  } else if (!tooltip.hidden) {
    const sel = document.querySelector(".dot.selected");
    if (!sel) showTooltip(null);
  }
  document.body.dataset.version = String(state.version || 0); // for tests and tools
}

function acceptDoc(doc) {
  if (!doc || typeof doc !== "object") return;
  state.doc = { nodes: Array.isArray(doc.nodes) ? doc.nodes : [], totals: doc.totals || {} };
  state.receivedAt = Date.now();
  state.version = (state.version || 0) + 1;
  if (doc.sample) addSample(doc.sample);
  render();
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
    const r = await fetch("/v1/world", { cache: "no-store" });
    if (!r.ok) throw new Error(String(r.status));
    const doc = await r.json();
    if (!doc.sample) doc.sample = [Date.now(), doc.totals?.tok_s ?? 0, doc.totals?.jobs_per_min ?? 0];
    acceptDoc(doc);
    setStatus("polling", "Updating every 2 s");
  } catch {
    setStatus("down", "Coordinator unreachable");
  }
}
function startPolling() {
  if (pollTimer) return;
  fetch("/v1/world/history", { cache: "no-store" }).then((r) => (r.ok ? r.json() : null)).then(acceptHistory).catch(() => {});
  poll();
  pollTimer = setInterval(poll, 2000);
}

function connect() {
  if (!("EventSource" in window)) return startPolling();
  const es = new EventSource("/v1/world/events");
  es.addEventListener("open", () => setStatus("live", "Live"));
  es.addEventListener("history", (e) => acceptHistory(JSON.parse(e.data)));
  es.addEventListener("world", (e) => { acceptDoc(JSON.parse(e.data)); setStatus("live", "Live"); });
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

// Keep the "last hour" window and uptimes moving between events.
setInterval(() => { renderSpark(); }, 5000);
window.addEventListener("resize", () => { if (!tooltip.hidden) showTooltip(null); });

render();
connect();

// The cluster page: what the agent it came from knows (GET /cluster), refreshed every few
// seconds — the machines, the links between them and, for the model chosen in the picker, the
// planner's split (or why it cannot place it). The choice lives in the URL (#model=SHAPE:TYPE).
import "./style.css";

const kRefreshMs = 3000;
const $ = (id) => document.getElementById(id);
const shape = $("shape"), type = $("type"), status = $("status");

const gb = (bytes) => `${(bytes / 1e9).toFixed(1)} GB`;
const fixed = (x, digits) => (x > 0 ? x.toFixed(digits) : "—");
const span = (r) => (r ? `${r[0]}–${r[1]}` : "");

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c;
    tr.append(td);
  }
  tbody.append(tr);
}

function model() {
  return shape.value ? `${shape.value}:${type.value}` : "";
}

// The picker is filled once, from the presets the agent's planner knows.
function fillPicker(presets) {
  if (type.options.length) return;
  for (const s of presets.shapes) shape.append(new Option(s, s));
  for (const t of presets.types) type.append(new Option(t, t));
  const [s, t] = decodeURIComponent(location.hash.replace(/^#model=/, "")).split(":");
  shape.value = presets.shapes.includes(s) ? s : "";
  type.value = presets.types.includes(t) ? t : "q4_k_m";
}

// A machine's name: its hostname, with the start of its node id where two share one (two agents
// on one host).
function names(machines) {
  const count = new Map();
  for (const m of machines) count.set(m.hostname, (count.get(m.hostname) ?? 0) + 1);
  return new Map(machines.map((m) => [m.node_id, count.get(m.hostname) > 1 ? `${m.hostname} · ${m.node_id.slice(0, 6)}` : m.hostname]));
}

function showMachines(machines) {
  const name = names(machines);
  const tbody = $("machines").tBodies[0];
  tbody.replaceChildren();
  for (const m of machines)
    row(tbody, [name.get(m.node_id), m.chip, m.os, m.cores, gb(m.memory_total_bytes), gb(m.memory_free_bytes),
      fixed(m.decode_gbs, 1), fixed(m.compute_gflops, 0), m.models.length]);
}

function showLinks(links, machines) {
  const host = names(machines);
  const tbody = $("links").tBodies[0];
  tbody.replaceChildren();
  for (const l of links)
    row(tbody, [`${host.get(l.from) ?? l.from} (${l.from_addr})`, `${host.get(l.to) ?? l.to} (${l.to_addr})`,
      `${l.rtt_us.toFixed(0)} µs`, fixed(l.gbit_s, 2), l.transport]);
  $("no-links").hidden = links.length > 0;
}

function showPlan(plan) {
  $("plan").hidden = !plan;
  if (!plan) return;
  $("plan-model").textContent = plan.model;
  const summary = $("plan-summary"), tbody = $("assignment").tBodies[0];
  tbody.replaceChildren();
  if (plan.error) {
    summary.textContent = "The planner cannot place it.";
    summary.className = "error";
    $("assignment").hidden = true;
    $("plan-explanation").textContent = plan.error;
    return;
  }
  const p = plan.predicted;
  const speedup = p.speedup_vs_single ? `, ${p.speedup_vs_single.toFixed(2)}× one machine` : "";
  summary.className = "";
  summary.textContent = `${plan.strategy} (tp ${plan.tp} × pp ${plan.pp}): ${p.gen_tok_s.toFixed(1)} tok/s generation, ` +
    `${p.prompt_tok_s.toFixed(0)} tok/s prompt${speedup}`;
  $("assignment").hidden = false;
  for (const a of plan.assignment)
    row(tbody, [a.rank, a.host, span(a.layers) || "all", span(a.heads), span(a.experts),
      `${a.memory_gb.need.toFixed(1)} / ${a.memory_gb.usable.toFixed(1)} GB`]);
  $("plan-explanation").textContent = plan.explanation;
}

let timer = 0;
async function refresh() {
  clearTimeout(timer);
  const m = model();
  try {
    // The names come from the agent's own list, in the characters its query takes unescaped.
    const res = await fetch(m ? `/cluster?model=${m}` : "/cluster");
    const data = await res.json();
    if (!res.ok) throw new Error(data.error || `HTTP ${res.status}`);
    if (m !== model()) return; // the picker moved while this was on its way; its own refresh follows
    fillPicker(data.presets);
    showMachines(data.machines);
    showLinks(data.links, data.machines);
    showPlan(data.plan);
    status.className = "";
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    status.className = "error";
    status.textContent = `the agent did not answer (${e.message}); retrying`;
  }
  timer = setTimeout(refresh, kRefreshMs);
}

for (const el of [shape, type])
  el.addEventListener("change", () => {
    history.replaceState(null, "", model() ? `#model=${model()}` : location.pathname);
    refresh();
  });
refresh();

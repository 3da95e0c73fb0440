// The world map: country shapes from world-atlas (110m TopoJSON), Equal Earth projection, zoom
// and pan (d3-zoom). What is drawn never exceeds MAX_MARKS, whatever the population:
//   - at world zoom, one mark per region: a ring sized by its machines (or memory), its slices
//     the mix of chip classes, the count in it (from the summary the page already holds);
//   - zoomed in, the coordinator's marks for the view (/v1/world/map): each machine on the
//     hexagonal spiral of its region (pods side by side, linked), or clusters of them when more
//     than the budget would be in view.
import { geoEqualEarth, geoGraticule10, geoPath } from "d3-geo";
import { arc, pie } from "d3-shape";
import { select } from "d3-selection";
import { zoom, zoomIdentity } from "d3-zoom";
import { feature, mesh } from "topojson-client";
import world from "world-atlas/countries-110m.json";
import regions from "../../../data/regions.json";
import { CHIP_CLASSES, GiB, chipClass, classColor, esc, formatNumber } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 960;
export const MAX_MARKS = 2000;
// Map units between neighbours on a region's spiral: 100,000 machines in one place fill a disc
// of about 18 units (a small country) at world zoom.
const SPACING = 0.1;
const DETAIL_ZOOM = 3; // from here on, the coordinator's marks instead of one per region
const MAX_ZOOM = 400; // a phone's map is a third of a desktop's: it needs 3x the zoom to tell machines apart
const CELL_PX = 26; // clusters: a cell of the grid, in CSS pixels
// The smallest machine on screen, in CSS pixels of radius: one can always see and tap it.
export const MIN_DOT_PX = 3;
// Machines are drawn one by one only from this spacing on screen (CSS px) between neighbours, so
// no two overlap; closer, they are clusters.
const MACHINE_PX = 2 * MIN_DOT_PX + 1.5;

const regionIndex = new Map();
const countryIndex = new Map();
for (const r of regions) {
  regionIndex.set(r.name.toLowerCase(), r);
  const city = r.name.split(",")[0].trim().toLowerCase();
  if (!regionIndex.has(city)) regionIndex.set(city, r);
  if (!r.name.includes(",")) countryIndex.set(r.country.toUpperCase(), r);
}
for (const r of regions) if (!countryIndex.has(r.country.toUpperCase())) countryIndex.set(r.country.toUpperCase(), r);

// "Lisbon, PT", "lisbon", "Portugal", "PT", "Somewhere, PT" -> a region entry, or null.
export function findRegion(name) {
  const s = String(name || "").trim();
  if (!s) return null;
  const hit = regionIndex.get(s.toLowerCase());
  if (hit) return hit;
  const code = (s.match(/(?:^|,\s*)([A-Za-z]{2})$/) || [])[1];
  return code ? countryIndex.get(code.toUpperCase()) || null : null;
}

// The ring a spiral of n slots reaches (ring k holds 6k slots): as the coordinator lays them out.
function outerRing(n) {
  if (n <= 1) return 0;
  let k = Math.floor((1 + Math.sqrt(1 + (4 * (n - 2)) / 3)) / 2);
  while (1 + 3 * k * (k + 1) < n) k++;
  return k;
}

// A machine's radius in CSS px by memory (8 GB ~ 3.4, 64 GB ~ 6, 192 GB ~ 9).
export function dotPx(memoryBytes) {
  const gb = Math.max(1, (Number(memoryBytes) || 0) / GiB);
  return Math.min(12, 2 + 0.5 * Math.sqrt(gb));
}

function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

const slices = pie().sort(null).value((d) => d.n);

// A ring of slices, one per chip class with machines, at the origin: radius r, hole r * 0.55.
function classRing(parent, counts, r) {
  const data = CHIP_CLASSES.map((c, i) => ({ key: c.key, n: Number(counts?.[i]) || 0 })).filter((d) => d.n > 0);
  el("circle", { class: "ring-bg", r: r.toFixed(2) }, parent);
  const shape = arc().innerRadius(r * 0.55).outerRadius(r).padAngle(data.length > 1 ? 0.04 : 0);
  for (const s of slices(data)) el("path", { d: shape(s), fill: classColor(s.data.key) }, parent);
}

export class WorldMap {
  // onHover(info | null, element), onPin(info, element): info = {kind: "region"|"cluster"|"machine", ...}
  // fetchMarks(params) -> Promise of /v1/world/map's answer; onView({mode, marks, inView, zoom}).
  // recentDeltas() -> the event stream's last deltas; onStale(): the marks need asking for again.
  constructor(svg, { onHover, onPin, fetchMarks, onView, recentDeltas, onStale } = {}) {
    this.svg = svg;
    this.recentDeltas = recentDeltas || (() => []);
    this.onStale = onStale;
    this.onHover = onHover;
    this.onPin = onPin;
    this.fetchMarks = fetchMarks;
    this.onView = onView;
    this.regions = []; // the summary's, with their place: {name, online, ..., at: [x, y] | null}
    this.sizeBy = "machines";
    this.transform = zoomIdentity;
    this.detail = null; // the last /v1/world/map answer, with its request's centres
    this.regionMarks = new Map(); // region name -> its mark, at world zoom
    this.pending = 0;
    const countries = feature(world, world.objects.countries);
    countries.features = countries.features.filter((f) => f.id !== "010"); // Antarctica: no machines, much space
    this.projection = geoEqualEarth().fitWidth(W - 16, countries);
    const path = geoPath(this.projection);
    const [[, y0], [, y1]] = path.bounds(countries);
    this.height = Math.ceil(y1 - y0 + 24);
    this.projection.translate([this.projection.translate()[0] + 8, this.projection.translate()[1] - y0 + 12]);
    svg.setAttribute("viewBox", `0 0 ${W} ${this.height}`);
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");

    this.land = el("g", { class: "land" }, svg);
    el("path", { class: "graticule", d: path(geoGraticule10()) }, this.land);
    const countryLayer = el("g", { class: "countries" }, this.land);
    for (const f of countries.features) el("path", { d: path(f) }, countryLayer);
    el("path", { class: "borders", d: path(mesh(world, world.objects.countries, (a, b) => a !== b)) }, this.land);
    this.linkLayer = el("g", { class: "pods" }, svg);
    this.markLayer = el("g", { class: "marks" }, svg);
    this.tray = el("g", { class: "tray" }, svg);

    this.zoom = zoom()
      .scaleExtent([1, MAX_ZOOM])
      .translateExtent([[0, 0], [W, this.height]])
      .on("zoom", (e) => this.zoomed(e.transform));
    select(svg).call(this.zoom).on("dblclick.zoom", null);
    if (typeof ResizeObserver !== "undefined") new ResizeObserver(() => this.draw()).observe(svg);
  }

  // CSS pixels per viewBox unit (the map shrinks with the window).
  pxPerUnit() {
    return (this.svg.getBoundingClientRect().width || W) / W;
  }

  setRegions(list) {
    this.regions = list.map((r) => {
      const place = r.name ? findRegion(r.name) : null;
      return { ...r, at: place ? this.projection([place.lon, place.lat]) : null };
    });
    // Zoomed in, the marks stay until the next answer (the page asks again after a change).
    if (this.mode() === "regions") this.draw(); else this.drawTray();
  }

  setSizeBy(by) {
    this.sizeBy = by;
    this.draw();
  }

  mode() {
    return this.transform.k >= DETAIL_ZOOM ? "detail" : "regions";
  }

  zoomed(t) {
    const wasDetail = this.mode() === "detail";
    this.transform = t;
    this.land.setAttribute("transform", t.toString());
    if (this.mode() === "detail") {
      if (!wasDetail) this.detail = null;
      this.place(); // marks follow now; new ones come when the gesture rests
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.requestDetail(), 120);
    } else {
      this.detail = null;
      this.draw();
    }
  }

  zoomBy(f) {
    select(this.svg).transition().duration(250).call(this.zoom.scaleBy, f);
  }
  reset() {
    select(this.svg).transition().duration(300).call(this.zoom.transform, zoomIdentity);
  }
  // Centres a point (viewBox units, unzoomed) at zoom k.
  zoomTo([x, y], k) {
    const t = zoomIdentity.translate(W / 2, this.height / 2).scale(k).translate(-x, -y);
    select(this.svg).transition().duration(400).call(this.zoom.transform, t);
  }
  zoomToRegion(name) {
    const r = this.regions.find((g) => g.name === name);
    if (!r || !r.at) return;
    // Close enough to tell machines apart, and closer for a small place (its spiral a third of
    // the map's height across); a big place then shows clusters first.
    const radius = SPACING * (outerRing(r.slots || r.machines || 1) + 1);
    const apart = (1.05 * MACHINE_PX) / (SPACING * this.pxPerUnit());
    const k = Math.min(MAX_ZOOM, Math.max(DETAIL_ZOOM * 1.5, apart, this.height / 3 / (2 * radius)));
    this.zoomTo(r.at, k);
  }

  // What the coordinator is asked for this view: each region whose spiral meets it, the view in
  // the region's own units.
  viewRequest() {
    const t = this.transform;
    const [x0, y0] = t.invert([0, 0]), [x1, y1] = t.invert([W, this.height]);
    const unitPx = SPACING * t.k * this.pxPerUnit();
    const views = [];
    for (const r of this.regions) {
      if (!r.at || !r.online) continue;
      const reach = SPACING * (outerRing(r.slots || r.machines) + 1);
      const [cx, cy] = r.at;
      if (cx + reach < x0 || cx - reach > x1 || cy + reach < y0 || cy - reach > y1) continue;
      const f = (v) => v.toFixed(1);
      const rect = [f((x0 - cx) / SPACING), f((y0 - cy) / SPACING), f((x1 - cx) / SPACING), f((y1 - cy) / SPACING)];
      views.push({ region: r.name, at: r.at, rect: rect.map(Number), v: `${r.name}|${rect.join("|")}` });
    }
    return { views, cell: Math.max(0.5, CELL_PX / unitPx), unitPx, clusters: unitPx < MACHINE_PX };
  }

  // For a new view (data-loading is set until its marks are drawn), or the same view again after
  // a change (`refresh`).
  async requestDetail(refresh = false) {
    if (this.mode() !== "detail" || !this.fetchMarks) return;
    // A refresh waits for the request in flight (a new view replaces it): refreshes that each
    // replaced the last would never see an answer where one takes longer than they come.
    if (refresh && this.inflight) { this.refreshAfter = true; return; }
    const req = this.viewRequest();
    const ticket = ++this.pending;
    if (!refresh) this.svg.dataset.loading = "1";
    if (!req.views.length) {
      // Nothing in view to keep up (a place that comes online here shows at the next gesture).
      this.detail = { req, answer: { mode: "machines", regions: [], in_view: 0, marks: 0, at: Infinity } };
      delete this.svg.dataset.loading;
      return this.draw();
    }
    let answer;
    this.inflight = ticket;
    try {
      answer = await this.fetchMarks(req.views.map((v) => v.v), req.cell.toFixed(2), MAX_MARKS - 10, req.clusters);
    } catch {
      if (ticket === this.pending) delete this.svg.dataset.loading;
      return; // the next view or update asks again
    } finally {
      if (this.inflight === ticket) {
        this.inflight = 0;
        if (this.refreshAfter) { this.refreshAfter = false; setTimeout(() => this.requestDetail(true), 0); }
      }
    }
    if (ticket !== this.pending || this.mode() !== "detail") return; // a newer view was asked for
    delete this.svg.dataset.loading;
    this.detail = { req, answer };
    this.fetches = (this.fetches || 0) + 1;
    // Deltas that came while it was on its way, of changes after its version.
    for (const d of this.recentDeltas()) if (d.span[1] > answer.at && !this.patch(d, false)) { this.onStale?.(); break; }
    this.draw();
  }

  // Applies an event-stream delta (see main.js) to the machines drawn: one that leaves the view
  // or goes offline is taken away, one that comes into it is drawn on its slot. False when that
  // cannot be done here (clusters, whose figures and places move; more changed than listed; a
  // change the answer may half hold; past the budget): the view is then asked for again.
  patch(d, redraw = true) {
    if (!this.detail) return true;
    const { req, answer } = this.detail;
    if (!Number.isFinite(answer.at)) return false;
    const [from, to] = d.span;
    if (answer.at >= to) return true;
    if (answer.at < from) return false;
    const records = d.machines?.records || [];
    if ((d.machines?.changed || 0) > records.length) return false;
    const rects = new Map(req.views.map((v) => [v.region, v.rect]));
    // A record: [chip, memory, region, seat, pod, online, jobs, tok_s, online_since, x, y].
    const inView = (r) => {
      const rect = r && r[5] ? rects.get(r[2]) : null;
      return !!rect && r[9] >= rect[0] && r[9] <= rect[2] && r[10] >= rect[1] && r[10] <= rect[3];
    };
    const edits = [];
    let count = answer.in_view || 0;
    for (const [id, was, now, first, last] of records) {
      if (last <= answer.at) continue;
      const wasIn = inView(was), nowIn = inView(now);
      if (!wasIn && !nowIn) continue;
      if (first <= answer.at || answer.mode !== "machines") return false;
      count += (nowIn ? 1 : 0) - (wasIn ? 1 : 0);
      edits.push([id, wasIn ? was : null, nowIn ? now : null]);
    }
    if (count > MAX_MARKS - 10) return false;
    for (const [id, was, now] of edits) {
      if (was) {
        const group = answer.regions.find((g) => g.region === was[2]);
        if (group) group.machines = group.machines.filter((m) => m[2] !== id);
      }
      if (now) {
        let group = answer.regions.find((g) => g.region === now[2]);
        if (!group) answer.regions.push((group = { region: now[2], machines: [] }));
        group.machines.push([now[9], now[10], id, now[0], now[1], now[3], now[4], now[6], now[7], now[8]]);
      }
    }
    answer.in_view = answer.marks = count;
    answer.at = to;
    this.patches = (this.patches || 0) + 1;
    if (edits.length && redraw) this.draw();
    return true;
  }

  // Draws what the mode holds.
  draw() {
    this.linkLayer.replaceChildren();
    this.links = [];
    this.drawTray();
    let marks = 0, inView = 0, mode = "regions";
    if (this.mode() === "regions") {
      marks = this.drawRegions();
      inView = this.regions.reduce((s, r) => s + (r.at ? r.online || 0 : 0), 0);
    } else if (this.detail) {
      this.regionMarks.clear();
      this.markLayer.replaceChildren();
      mode = this.detail.answer.mode;
      marks = this.drawDetail();
      inView = this.detail.answer.in_view || 0;
    }
    this.svg.dataset.mode = mode;
    this.svg.dataset.marks = String(marks);
    this.svg.dataset.fetches = String(this.fetches || 0); // for tests and tools
    this.svg.dataset.patches = String(this.patches || 0);
    this.onView?.({ mode, marks, inView, zoom: this.transform.k });
  }

  // Region marks are kept by name and only redrawn when their figures change, so a mark under
  // the pointer or the focus stays the same element from one update to the next.
  drawRegions() {
    const px = this.pxPerUnit();
    const value = (r) => (this.sizeBy === "memory" ? Number(r.memory_bytes) || 0 : Number(r.online) || 0);
    const shown = this.regions.filter((r) => r.at && r.online > 0);
    const top = Math.max(1, ...shown.map(value));
    const keep = new Map();
    for (const r of shown) {
      const rPx = 6 + 18 * Math.sqrt(value(r) / top);
      let g = this.regionMarks.get(r.name);
      if (!g) {
        g = el("g", { class: "mark region", tabindex: "0", role: "button", "data-region": r.name });
        this.wire(g, () => ({ kind: "region", region: g.__region }), () => this.zoomToRegion(r.name));
      }
      g.__region = r;
      g.dataset.x = r.at[0];
      g.dataset.y = r.at[1];
      g.setAttribute("aria-label", `${r.name}: ${r.online} machines online`);
      const sig = `${rPx.toFixed(1)}|${r.online}|${r.classes}`;
      if (g.__sig !== sig) {
        g.__sig = sig;
        g.replaceChildren();
        classRing(g, r.classes, rPx);
        if (rPx >= 11) el("text", { class: "count", dy: "0.35em" }, g).textContent = formatNumber(r.online);
      }
      g.__size = rPx;
      keep.set(r.name, g);
    }
    const same = keep.size === this.regionMarks.size && [...keep.keys()].every((k) => this.regionMarks.has(k)) &&
      this.markLayer.childElementCount === keep.size;
    this.regionMarks = keep;
    if (!same) {
      // Biggest first, so small places stay on top and reachable.
      this.markLayer.replaceChildren(...[...keep.values()].sort((a, b) => b.__size - a.__size));
    }
    this.place();
    return shown.length;
  }

  drawDetail() {
    const { req, answer } = this.detail;
    const px = this.pxPerUnit();
    const at = new Map(req.views.map((v) => [v.region, v.at]));
    const unitPx = SPACING * this.transform.k * px;
    let marks = 0;
    const pods = new Map();
    for (const group of answer.regions || []) {
      const c = at.get(group.region);
      if (!c) continue;
      for (const m of group.machines || []) {
        const [lx, ly, id, chip, memory, seat, pod, jobs, tokS, since] = m;
        const pos = [c[0] + SPACING * lx, c[1] + SPACING * ly];
        const r = Math.max(MIN_DOT_PX, Math.min(dotPx(memory), unitPx * 0.45));
        const dot = el("circle", { class: "mark dot", tabindex: "0", role: "button", "data-node-id": id,
          "data-chip-class": chipClass(chip), r: (r / px).toFixed(3), fill: classColor(chipClass(chip)),
          "aria-label": `${esc(chip || "Unknown chip")}, ${Math.round(memory / GiB)} GB, ${esc(group.region)}` }, this.markLayer);
        dot.dataset.x = pos[0]; dot.dataset.y = pos[1];
        const node = { id, chip, memory_bytes: memory, seat, pod, jobs_served: jobs, tok_s: tokS, online: true,
          online_since: since, region: group.region };
        this.wire(dot, { kind: "machine", node }, null);
        if (pod) (pods.get(pod) || pods.set(pod, []).get(pod)).push(dot);
        marks++;
      }
      for (const cl of group.clusters || []) {
        const [lx, ly, count, classes, memory, podCount] = cl;
        const pos = [c[0] + SPACING * lx, c[1] + SPACING * ly];
        const cellPx = answer.cell * unitPx;
        const rPx = Math.max(5, Math.min(cellPx * 0.48, 4 + 2.2 * Math.sqrt(count)));
        const g = el("g", { class: "mark cluster", tabindex: "0", role: "button", "data-count": count,
          "aria-label": `${count} machines in ${group.region}` }, this.markLayer);
        g.dataset.x = pos[0]; g.dataset.y = pos[1]; g.dataset.scale = "1";
        classRing(g, classes, rPx);
        if (rPx >= 10) el("text", { class: "count", dy: "0.35em" }, g).textContent = formatNumber(count);
        this.wire(g, { kind: "cluster", region: group.region, count, classes, memory_bytes: memory, pods: podCount },
          () => this.zoomTo(pos, Math.min(MAX_ZOOM, this.transform.k * 3)));
        marks++;
      }
    }
    // Pods: a line through the members in view, under the dots.
    this.links = [];
    for (const [pod, dots] of pods) {
      if (dots.length < 2) continue;
      const g = el("g", { class: "pod", "data-pod": pod }, this.linkLayer);
      const halo = el("path", { class: "pod-halo" }, g), link = el("path", { class: "pod-link" }, g);
      this.links.push({ dots, halo, link });
    }
    this.place();
    return marks;
  }

  // Screen positions of the marks for the current transform (during a gesture, between answers).
  place() {
    const t = this.transform, px = this.pxPerUnit();
    for (const m of this.markLayer.children) {
      const [x, y] = t.apply([Number(m.dataset.x), Number(m.dataset.y)]);
      if (m.tagName === "circle") {
        m.setAttribute("cx", x.toFixed(1));
        m.setAttribute("cy", y.toFixed(1));
      } else {
        m.setAttribute("transform", `translate(${x.toFixed(1)},${y.toFixed(1)}) scale(${(1 / px).toFixed(4)})`);
      }
    }
    for (const l of this.links || []) {
      const pts = l.dots.map((d) => `${d.getAttribute("cx")},${d.getAttribute("cy")}`);
      const d = "M" + pts.join("L") + (pts.length > 2 ? "Z" : "");
      l.halo.setAttribute("d", d);
      l.link.setAttribute("d", d);
    }
  }

  // Machines whose region is not on the list: one mark in a corner, whatever the zoom.
  drawTray() {
    this.tray.replaceChildren();
    const r = this.regions.find((g) => !g.at && g.online > 0);
    if (!r) return;
    const px = this.pxPerUnit();
    const g = el("g", { class: "mark region unshared", tabindex: "0", role: "button", "data-region": r.name,
      "aria-label": `Region not shared: ${r.online} machines online`,
      transform: `translate(${(24 / px).toFixed(1)},${(this.height - 18 / px).toFixed(1)}) scale(${(1 / px).toFixed(4)})` }, this.tray);
    classRing(g, r.classes, 9);
    el("text", { class: "tray-label", x: 16, dy: "0.35em" }, g).textContent = `Region not shared (${formatNumber(r.online)})`;
    this.wire(g, { kind: "region", region: r }, null);
  }

  wire(node, what, activate) {
    const info = () => (typeof what === "function" ? what() : what);
    node.addEventListener("pointerenter", () => this.onHover?.(info(), node));
    node.addEventListener("focus", () => this.onHover?.(info(), node));
    node.addEventListener("pointerleave", () => this.onHover?.(null, node));
    node.addEventListener("blur", () => this.onHover?.(null, node));
    node.addEventListener("click", (ev) => {
      ev.stopPropagation();
      if (activate) activate(); else this.onPin?.(info(), node);
    });
    node.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); if (activate) activate(); else this.onPin?.(info(), node); }
    });
  }
}

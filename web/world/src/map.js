// The world map: country shapes from world-atlas (110m TopoJSON), Equal Earth projection, one dot
// per online machine at the region its owner shared, pods as links between their members.
import { geoEqualEarth, geoGraticule10, geoPath } from "d3-geo";
import { feature, mesh } from "topojson-client";
import world from "world-atlas/countries-110m.json";
import regions from "../../../data/regions.json";
import { GiB, chipClass, classColor, esc } from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 960;

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

// Dot radius in map units (the map is 960 wide): the area grows with memory
// (8 GB ~ 4.6, 64 GB ~ 8.5, 192 GB ~ 12.9, 512 GB ~ 19.5).
export function dotRadius(memoryBytes) {
  const gb = Math.max(1, (Number(memoryBytes) || 0) / GiB);
  return Math.min(20, 2.5 + 0.75 * Math.sqrt(gb));
}

// The smallest dot on screen, in CSS pixels of radius: the map shrinks with the window (on a phone
// a map unit is 0.4 px), and a 16 GB machine must stay a dot one can see and tap.
export const MIN_DOT_PX = 3;

function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

export class WorldMap {
  constructor(svg, { onSelect } = {}) {
    this.svg = svg;
    this.onSelect = onSelect;
    this.dots = new Map(); // id -> circle
    const countries = feature(world, world.objects.countries);
    countries.features = countries.features.filter((f) => f.id !== "010"); // Antarctica: no machines, much space
    this.projection = geoEqualEarth().fitWidth(W - 16, countries);
    const path = geoPath(this.projection);
    const [[, y0], [, y1]] = path.bounds(countries);
    this.height = Math.ceil(y1 - y0 + 24);
    this.projection.translate([this.projection.translate()[0] + 8, this.projection.translate()[1] - y0 + 12]);
    svg.setAttribute("viewBox", `0 0 ${W} ${this.height}`);
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");

    el("path", { class: "graticule", d: path(geoGraticule10()) }, svg);
    const land = el("g", { class: "countries" }, svg);
    for (const f of countries.features) el("path", { d: path(f) }, land);
    el("path", { class: "borders", d: path(mesh(world, world.objects.countries, (a, b) => a !== b)) }, svg);
    this.podLayer = el("g", { class: "pods" }, svg);
    this.dotLayer = el("g", { class: "dots" }, svg);
    this.trayLabel = el("text", { class: "tray-label", x: 14, y: this.height - 30 }, svg);
    // The minimum size is in screen pixels: lay the dots out again when the map's width changes.
    this.lastNodes = null;
    this.lastWidth = 0;
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => {
        const w = svg.getBoundingClientRect().width;
        if (this.lastNodes && Math.abs(w - this.lastWidth) > 1) this.update(this.lastNodes);
      }).observe(svg);
    }
  }

  // A machine's radius in map units: by memory, at least MIN_DOT_PX on screen.
  radiusOf(memoryBytes) {
    const width = this.svg.getBoundingClientRect().width || W;
    return Math.max(dotRadius(memoryBytes), (MIN_DOT_PX * W) / width);
  }

  // Places the online machines; returns {placed, regions, unplaced}.
  update(nodes) {
    this.lastNodes = nodes;
    this.lastWidth = this.svg.getBoundingClientRect().width;
    const online = nodes.filter((n) => n.online);
    const groups = new Map(); // region name -> nodes
    const unplaced = [];
    for (const n of online) {
      const r = findRegion(n.region);
      if (!r) { unplaced.push(n); continue; }
      if (!groups.has(r.name)) groups.set(r.name, { region: r, nodes: [] });
      groups.get(r.name).nodes.push(n);
    }

    const pos = new Map(); // id -> [x, y, r]
    for (const { region, nodes: members } of groups.values()) {
      const [cx, cy] = this.projection([region.lon, region.lat]);
      // Pod members next to each other, then a sunflower spiral so no two dots sit on one spot.
      members.sort((a, b) => String(a.pod || "~").localeCompare(String(b.pod || "~")) || String(a.id).localeCompare(String(b.id)));
      // Neighbours on a sunflower spiral sit about `spacing` apart: just more than the widest dot.
      const spacing = members.reduce((s, n) => Math.max(s, this.radiusOf(n.memory_bytes)), 0) * 2.1;
      members.forEach((n, i) => {
        const rr = spacing * Math.sqrt(i);
        const a = i * 2.399963;
        pos.set(n.id, [cx + rr * Math.cos(a), cy + rr * Math.sin(a), this.radiusOf(n.memory_bytes)]);
      });
    }
    // Machines whose region is not on the list wait in a tray under the map.
    let x = 20;
    for (const n of unplaced.sort((a, b) => String(a.id).localeCompare(String(b.id)))) {
      const r = this.radiusOf(n.memory_bytes);
      pos.set(n.id, [x + r, this.height - 14, r]);
      x += 2 * r + 4;
    }
    this.trayLabel.textContent = unplaced.length ? `Region not shared (${unplaced.length})` : "";

    // Pods: a link through the members, drawn under the dots.
    const pods = new Map();
    for (const n of online) if (n.pod && pos.has(n.id)) (pods.get(n.pod) || pods.set(n.pod, []).get(n.pod)).push(n);
    this.podLayer.replaceChildren();
    for (const [pod, members] of pods) {
      if (members.length < 2) continue;
      const pts = members.map((n) => pos.get(n.id));
      const d = pts.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("") + (pts.length > 2 ? "Z" : "");
      const g = el("g", { class: "pod", "data-pod": pod }, this.podLayer);
      el("path", { class: "pod-halo", d }, g);
      el("path", { class: "pod-link", d }, g);
    }

    // Dots, keyed by node id: new ones pop in, gone ones are removed.
    const seen = new Set();
    let added = false;
    for (const n of online) {
      const p = pos.get(n.id);
      if (!p) continue;
      seen.add(n.id);
      let c = this.dots.get(n.id);
      if (!c) {
        c = el("circle", { class: "dot enter", tabindex: "0", role: "button", "data-node-id": n.id });
        c.addEventListener("animationend", () => c.classList.remove("enter"), { once: true });
        c.addEventListener("pointerenter", () => this.onSelect?.(c.__node, c, false));
        c.addEventListener("focus", () => this.onSelect?.(c.__node, c, false));
        c.addEventListener("pointerleave", () => this.onSelect?.(null, c, false));
        c.addEventListener("blur", () => this.onSelect?.(null, c, false));
        c.addEventListener("click", (ev) => { ev.stopPropagation(); this.onSelect?.(c.__node, c, true); });
        c.addEventListener("keydown", (ev) => {
          if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); this.onSelect?.(c.__node, c, true); }
        });
        this.dotLayer.appendChild(c);
        this.dots.set(n.id, c);
        added = true;
      }
      c.__node = n;
      const cls = chipClass(n.chip);
      c.setAttribute("cx", p[0].toFixed(1));
      c.setAttribute("cy", p[1].toFixed(1));
      c.setAttribute("r", p[2].toFixed(1));
      c.setAttribute("fill", classColor(cls));
      c.setAttribute("data-chip-class", cls);
      c.setAttribute("aria-label", `${esc(n.chip || "Unknown chip")}, ${Math.round((n.memory_bytes || 0) / GiB)} GB, ${esc(n.region || "region not shared")}`);
    }
    for (const [id, c] of this.dots) {
      if (!seen.has(id)) { c.remove(); this.dots.delete(id); }
    }
    // Big dots first so small ones stay clickable on top of them (only when dots came: moving a
    // dot in the DOM would drop its focus).
    if (added) [...this.dots.values()].sort((a, b) => b.r.baseVal.value - a.r.baseVal.value).forEach((c) => this.dotLayer.appendChild(c));
    return { placed: pos.size - unplaced.length, regions: groups.size, unplaced: unplaced.length };
  }

  dotOf(id) {
    return this.dots.get(id) || null;
  }
}

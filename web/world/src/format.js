// Formatting and classification shared by the page's parts.

export const GiB = 1024 ** 3;

// Chip classes, in order, with colours picked for contrast on the dark map (WCAG AA against
// --panel for the legend text) and to stay apart for common colour-vision deficiencies.
export const CHIP_CLASSES = [
  { key: "base", label: "Base", color: "#5ab0ff" },
  { key: "pro", label: "Pro", color: "#3ddc97" },
  { key: "max", label: "Max", color: "#ffb340" },
  { key: "ultra", label: "Ultra", color: "#ff6fa5" },
];
const CLASS_BY_KEY = new Map(CHIP_CLASSES.map((c) => [c.key, c]));

// "Apple M2 Ultra" -> "ultra"; "M3" -> "base". An explicit class ("max") is taken as it is.
export function chipClass(chip) {
  const s = String(chip || "").toLowerCase();
  if (/\bultra\b/.test(s)) return "ultra";
  if (/\bmax\b/.test(s)) return "max";
  if (/\bpro\b/.test(s)) return "pro";
  return "base";
}
export const classColor = (key) => (CLASS_BY_KEY.get(key) || CHIP_CLASSES[0]).color;
export const classLabel = (key) => (CLASS_BY_KEY.get(key) || CHIP_CLASSES[0]).label;

export function formatBytes(bytes) {
  const gb = (Number(bytes) || 0) / GiB;
  if (gb >= 1024) return `${trim(gb / 1024)} TB`;
  return `${trim(gb)} GB`;
}

export function formatNumber(x, digits = 0) {
  const v = Number(x) || 0;
  if (Math.abs(v) >= 1e6) return `${trim(v / 1e6)} M`;
  if (Math.abs(v) >= 1e4) return `${trim(v / 1e3)} k`;
  return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

export function formatDuration(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min`;
  return `${s} s`;
}

export function shortId(id) {
  const s = String(id || "");
  return s.length > 10 ? s.slice(0, 8) : s;
}

export function seatLabel(seat) {
  const s = String(seat || "shared");
  return s.charAt(0).toUpperCase() + s.slice(1);
}

// Uptime in seconds: the coordinator's uptime_s, else from online_since (Unix ms).
export function uptimeOf(node, nowMs) {
  if (Number.isFinite(node.uptime_s)) return node.uptime_s;
  if (Number.isFinite(node.online_since)) return (nowMs - node.online_since) / 1000;
  return null;
}

function trim(v) {
  return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1).replace(/\.0$/, "") : v.toFixed(2).replace(/\.?0+$/, "");
}

// Escapes text for innerHTML.
export function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

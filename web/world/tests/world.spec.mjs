// The World page in a real browser: Debian's chromium (/usr/bin/chromium), headless, driven by
// playwright-core, against a coordinator this test starts and feeds with machines.
//
//   node web/world/tests/world.spec.mjs --server <world_test_server> [--out DIR]
//
// Checks: the page loads with no console errors and asks nothing of any host but the
// coordinator; one dot per online machine (data-node-id); a machine that joins or leaves shows
// within 2 s; hover shows its details; the table filters; totals and leaderboard; a phone-width
// (390 px) layout without sideways scrolling. Saves world-desktop.png and world-phone.png in DIR.
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const started = Date.now();
const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const arg = (name, fallback) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : fallback; };
const serverBin = arg("--server");
const outDir = resolve(arg("--out", join(here, "..", "test-results")));
const chromiumPath = process.env.ORCHARD_CHROMIUM || "/usr/bin/chromium";
if (!serverBin) { console.error("usage: world.spec.mjs --server <world_test_server> [--out DIR]"); process.exit(2); }
mkdirSync(outDir, { recursive: true });

const GB = 1024 ** 3;
let failures = 0;
function check(cond, what) {
  if (cond) console.log(`  ok   ${what}`);
  else { failures++; console.log(`  FAIL ${what}`); }
}
async function waitFor(fn, timeoutMs, what) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// ------------------------------------------------------------------ the coordinator

function startServer() {
  const proc = spawn(serverBin, ["--port", "0", "--history-demo"], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => reject(new Error("the coordinator did not start in 10 s")), 10000);
    proc.on("exit", (code) => reject(new Error(`the coordinator exited (${code})`)));
    createInterface({ input: proc.stdout }).on("line", (line) => {
      const m = line.match(/listening on (\d+)/);
      if (m) { clearTimeout(timer); resolveStart({ proc, port: Number(m[1]) }); }
    });
  });
}

const { proc: server, port } = await startServer();
const base = `http://127.0.0.1:${port}`;
const api = async (method, path, body) => {
  const r = await fetch(base + path, { method, body: JSON.stringify(body ?? {}), headers: { "content-type": "application/json" } });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status}`);
  return r.json();
};

const node = (id, chip, gb, region, extra = {}) => ({
  id: id.padEnd(64, "0"), chip, memory_bytes: gb * GB, region, seat: "shared", pod: "", online: true,
  jobs_served: 0, tok_s: 0, uptime_s: 3600, ...extra,
});
const fleet = [
  node("a1", "M2 Ultra", 192, "Lisbon, PT", { seat: "dedicated", pod: "lisbon-rack", jobs_served: 412, tok_s: 38.5 }),
  node("a2", "M2 Ultra", 192, "Lisbon, PT", { seat: "dedicated", pod: "lisbon-rack", jobs_served: 388, tok_s: 36.1 }),
  node("a3", "M3 Max", 128, "Lisbon, PT", { seat: "dedicated", pod: "lisbon-rack", jobs_served: 120, tok_s: 22 }),
  node("b1", "M4 Pro", 48, "Berlin, DE", { jobs_served: 58, tok_s: 14.2 }),
  node("b2", "M1", 16, "San Francisco, US", { jobs_served: 7 }),
  node("b3", "M3 Max", 64, "Tokyo, JP", { pod: "pacific", jobs_served: 91, tok_s: 18 }),
  node("b4", "M3 Max", 64, "Sydney, AU", { pod: "pacific", jobs_served: 77 }),
  node("b5", "M2 Pro", 32, "Sao Paulo, BR", { jobs_served: 12 }),
  node("b6", "M4", 24, "Nairobi, KE", { jobs_served: 3 }),
  node("b7", "M1 Ultra", 128, "Toronto, CA", { seat: "dedicated", jobs_served: 240, tok_s: 29 }),
  node("b8", "M2", 8, "Mumbai, IN", { jobs_served: 1 }),
  node("c1", "M1 Max", 64, "Atlantis", { jobs_served: 5 }), // not on the list: the tray
  node("z9", "M2 Max", 96, "Paris, FR", { online: false, jobs_served: 33 }), // offline: no dot
];
for (const n of fleet) await api("POST", "/test/nodes", n);
await api("POST", "/test/totals", { tok_s: 157.8, jobs_per_min: 12.5, queue: 4, credits_by_seat: { dedicated: 1843.25, shared: 412.5 } });
const onlineIds = () => fleet.filter((n) => n.online).map((n) => n.id).sort();

// ------------------------------------------------------------------ the browser

const browser = await chromium.launch({
  executablePath: chromiumPath,
  headless: true, // playwright runs it with a fresh temporary --user-data-dir
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

const foreign = [];
const consoleErrors = [];
async function newPage(options) {
  const context = await browser.newContext(options);
  // Nothing may leave the coordinator: any other host is refused and counted.
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.protocol === "data:" || (u.hostname === "127.0.0.1" && Number(u.port) === port)) return route.continue();
    foreign.push(route.request().url());
    return route.abort();
  });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  return page;
}
const dotIds = (page) => page.$$eval("#map circle.dot[data-node-id]", (ds) => ds.map((d) => d.dataset.nodeId).sort());
const sameIds = async (page) => JSON.stringify(await dotIds(page)) === JSON.stringify(onlineIds());

try {
  console.log(`[world] coordinator ${base}, chromium ${browser.version()}`);

  // -- the JSON and the routes
  const world = await (await fetch(`${base}/v1/world`)).json();
  check(Array.isArray(world.nodes) && world.nodes.length === fleet.length && typeof world.totals === "object",
    "GET /v1/world has nodes and totals");
  const keys = ["id", "chip", "memory_bytes", "region", "seat", "pod", "online", "jobs_served", "tok_s"];
  check(world.nodes.every((n) => keys.every((k) => k in n)), "every node has the fields the issue names");
  const pageRes = await fetch(`${base}/world`);
  check(pageRes.headers.get("content-type")?.startsWith("text/html") && pageRes.headers.get("cache-control") === "no-cache",
    "/world is HTML, revalidated (Cache-Control: no-cache)");
  const asset = (await pageRes.text()).match(/\/world\/assets\/[^"]+\.js/)?.[0];
  const assetRes = await fetch(base + asset);
  check(assetRes.ok && /javascript/.test(assetRes.headers.get("content-type")) && /immutable/.test(assetRes.headers.get("cache-control")),
    `${asset} is JavaScript, cached as immutable`);
  check((await fetch(`${base}/world/assets/nope.js`)).status === 404, "an unknown asset is a 404");

  // -- desktop
  const page = await newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(`${base}/world`, { waitUntil: "load" });
  const firstMs = await waitFor(() => sameIds(page), 5000, "one dot per online machine");
  check(true, `one dot per online machine (${onlineIds().length}), after ${firstMs} ms`);
  await waitFor(async () => (await page.textContent("#status-text")) === "Live", 3000, "the event stream is live");
  check(true, "the event stream is live");
  check((await page.textContent("#stat-online")).trim() === String(onlineIds().length), "the online counter matches");
  check((await page.textContent("#stat-toks")).includes("157.8") && (await page.textContent("#stat-queue")).trim() === "4",
    "tokens/s and queue come from the coordinator's totals");
  check((await page.$$("#map .pod path.pod-link")).length === 2, "two pods drawn as links");
  const lb = await page.$$eval("#leaderboard li .seat", (xs) => xs.map((x) => x.firstChild.textContent.trim()));
  check(JSON.stringify(lb) === JSON.stringify(["Dedicated", "Shared"]), `leaderboard ranks seat classes by credits (${lb})`);

  // a machine joins, one leaves: both show within 2 s
  const joiner = node("d1", "M4 Max", 128, "Reykjavik, IS", { jobs_served: 2, tok_s: 9 });
  fleet.push(joiner);
  let t0 = Date.now();
  await api("POST", "/test/nodes", joiner);
  await waitFor(() => page.$(`#map circle.dot[data-node-id="${joiner.id}"]`), 2000, "the joining machine's dot");
  const joinMs = Date.now() - t0;
  check(joinMs <= 2000 && (await sameIds(page)), `a joining machine appears in ${joinMs} ms (<= 2000)`);
  const leaver = fleet.find((n) => n.id.startsWith("b4"));
  leaver.online = false;
  t0 = Date.now();
  await api("DELETE", `/test/nodes/${leaver.id}`);
  await waitFor(async () => !(await page.$(`#map circle.dot[data-node-id="${leaver.id}"]`)), 2000, "the leaving machine's dot to go");
  const leaveMs = Date.now() - t0;
  check(leaveMs <= 2000 && (await sameIds(page)), `a leaving machine disappears in ${leaveMs} ms (<= 2000)`);
  check((await page.$$("#map .pod path.pod-link")).length === 1, "a pod left with one member is no longer linked");

  // hover: chip, memory, seat, jobs served, uptime
  await page.hover(`#map circle.dot[data-node-id="${fleet[0].id}"]`);
  const tip = await page.textContent("#tooltip");
  check(await page.isVisible("#tooltip") && /M2 Ultra/.test(tip) && /192 GB/.test(tip) && /Dedicated/.test(tip) && /412/.test(tip) && /1 h/.test(tip),
    "hovering a dot shows chip, memory, seat, jobs served and uptime");

  // table filters
  const rows = () => page.$$eval("#machines tbody tr[data-node-id]", (rs) => rs.length);
  check(await rows() === onlineIds().length, "the table lists the online machines");
  await page.selectOption("#f-chip", "class:ultra");
  check(await rows() === fleet.filter((n) => n.online && /ultra/i.test(n.chip)).length, "filter by chip class (Ultra)");
  await page.selectOption("#f-chip", "");
  await page.selectOption("#f-mem", "64");
  check(await rows() === fleet.filter((n) => n.online && n.memory_bytes >= 64 * GB).length, "filter by memory (>= 64 GB)");
  await page.check("#f-offline");
  check(await rows() === fleet.filter((n) => n.memory_bytes >= 64 * GB).length, "show offline machines too");
  await page.selectOption("#f-mem", "0");
  await page.uncheck("#f-offline");

  await page.mouse.move(5, 5);
  await page.screenshot({ path: join(outDir, "world-desktop.png"), fullPage: true });

  // -- a phone
  const phone = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await phone.goto(`${base}/world`, { waitUntil: "load" });
  await waitFor(() => sameIds(phone), 5000, "phone: one dot per online machine");
  check(true, "phone: one dot per online machine");
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `phone: no sideways scrolling (overflow ${overflow} px)`);
  const mapWidth = await phone.$eval("#map", (m) => m.getBoundingClientRect().width);
  check(mapWidth > 300 && mapWidth <= 390, `phone: the map fits the screen (${Math.round(mapWidth)} px)`);
  await phone.tap(`#map circle.dot[data-node-id="${fleet.find((n) => n.id.startsWith("b7")).id}"]`);
  check(/M1 Ultra/.test(await phone.textContent("#tooltip")), "phone: tapping a dot shows its details");
  await phone.screenshot({ path: join(outDir, "world-phone.png"), fullPage: true });

  check(consoleErrors.length === 0, `no console errors${consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""}`);
  check(foreign.length === 0, `no request left the coordinator${foreign.length ? ": " + foreign.join(", ") : ""}`);
} catch (e) {
  failures++;
  console.log(`  FAIL ${e.message}`);
} finally {
  await browser.close().catch(() => {});
  await fetch(`${base}/test/quit`, { method: "POST", body: "{}" }).catch(() => {});
  setTimeout(() => server.kill("SIGKILL"), 2000).unref();
}
console.log(`[world] ${failures ? `${failures} check(s) failed` : "all checks passed"} in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${outDir}`);
process.exit(failures ? 1 : 0);

// The World page in a real browser: Debian's chromium (/usr/bin/chromium), headless, driven by
// playwright-core, against a real coordinator (`orchard network`) that this test starts, with
// real `orchard node` agents registered to it.
//
//   node web/world/tests/world.spec.mjs --orchard <build>/orchard [--out DIR]
//
// The network: 8 agents with different chips, regions and seats (one in a region not on the map,
// one that stops before the page opens), one of them holding a tiny model that serves three real
// jobs (jobs served, tokens/s, credits); and two pods of two machines each, registered by this
// test over the signed node API so that they can claim hardware this machine is not and leave on
// cue (`orchard node --pod` declares a real pod, whose leader starts ranks over ssh). A machine joins by
// starting an agent and leaves by stopping one (SIGTERM: the agent withdraws).
//
// Checks: the page loads with no console errors and asks nothing of any host but the
// coordinator; one mark per region with machines online, counting them; zoomed into a region, one
// dot per machine (data-node-id) and its pod linked; a machine that joins or leaves shows within
// 2 s; hover and tap show its details; the table's filters (answered by the coordinator); totals
// and leaderboard match the coordinator; a phone-width (390 px) layout without sideways
// scrolling. Saves world-desktop.png and world-phone.png in DIR. Every process it starts is
// stopped on the way out, failed or not. (world_scale.spec.mjs: 20,000 machines.)
import { spawnSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { formatBytes, formatNumber } from "../src/format.js";
import {
  GiB, check, fail, finish, guardedPage, launch as launchIn, launchBrowser, nodeKey, portOf, setup, signedPost as signedPostTo,
  stop, tapElement, timeoutFactor, waitFor, watchdog as startWatchdog,
} from "./harness.mjs";

const ctx = setup("world", "world.spec.mjs --orchard <orchard binary> [--out DIR]");
const { orchard, outDir, tmp, chromiumPath } = ctx;
const launch = (argv, log) => launchIn(orchard, tmp, argv, log);
const JOIN_LEAVE_MS = 2000;
const AGENT_EXIT_MS = 12000; // a stopped agent exits when its long poll (10 s) returns
// Times timeoutFactor where the run is emulated (scripts/test-arm64-all.sh), as ctest's TIMEOUT is.
const LIMIT_MS = 90000 * timeoutFactor; // below ctest's TIMEOUT, so this test, not ctest, stops what it started

// ------------------------------------------------------------------ the network

const run = (argv) => {
  const r = spawnSync(orchard, argv, { encoding: "utf8", timeout: 30000 * timeoutFactor });
  if (r.status !== 0) throw new Error(`orchard ${argv.join(" ")}: ${r.stderr || r.error}`);
  return r.stdout.trim();
};
const db = `sqlite://${join(tmp, "network.db")}`;
const modelsDir = join(tmp, "models"), emptyDir = join(tmp, "none");
mkdirSync(modelsDir);
mkdirSync(emptyDir);
run(["make-model", "--shape", "tiny", "--type", "q8_0", "-o", join(modelsDir, "tiny.gguf")]);
const apiKey = run(["network", "add-key", "--db", db, "--name", "world-test"]);

const coordinator = launch(["network", "--db", db, "--host", "127.0.0.1", "--port", "0"], "coordinator.log");
const port = await portOf(coordinator, /listening on [^ ]*:(\d+)/, 10000);
const base = `http://127.0.0.1:${port}`;
// The radius on screen, in CSS px, of the smallest dot (from its r: a dot popping in is scaled).
const smallestDotPx = (p) => p.$eval("#map", (svg) => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return Math.min(...[...svg.querySelectorAll("circle.dot")].map((c) => c.r.baseVal.value * scale));
});
// The summary's totals, and every machine (a handful here) as the table's route lists them.
const getWorld = async () => ({
  ...(await (await fetch(`${base}/v1/world`)).json()),
  nodes: (await (await fetch(`${base}/v1/world/machines?online=any&limit=500`)).json()).machines,
});

// Agents. Shared seats lend only while the owner is away: no idle wait, any load.
const agents = [
  { name: "lisbon-m4max", chip: "M4 Max", mem: "24G", region: "Lisbon, PT", dedicated: true, model: true },
  { name: "berlin-m2pro", chip: "M2 Pro", mem: "16G", region: "Berlin, DE" },
  { name: "sf-m1", chip: "M1", mem: "8G", region: "San Francisco, US" },
  { name: "tokyo-m3max", chip: "M3 Max", mem: "16G", region: "Tokyo, JP", dedicated: true }, // leaves
  { name: "nairobi-m4", chip: "M4", mem: "8G", region: "Nairobi, KE" },
  { name: "toronto-m1ultra", chip: "M1 Ultra", mem: "20G", region: "Toronto, CA", dedicated: true },
  { name: "atlantis-m2max", chip: "M2 Max", mem: "12G", region: "Atlantis" }, // not on the list: the tray
  { name: "paris-m3", chip: "M3", mem: "8G", region: "Paris, FR" }, // stops before the page opens
];
const joiner = { name: "reykjavik-m4pro", chip: "M4 Pro", mem: "16G", region: "Reykjavik, IS" };
function startAgent(a) {
  a.key = nodeKey(join(tmp, `${a.name}.key`));
  a.proc = launch(["node", "--network", base, "--key-file", join(tmp, `${a.name}.key`), "--name", a.name,
    "--chip", a.chip, "--region", a.region, "--max-memory", a.mem, "--models", a.model ? modelsDir : emptyDir,
    "--threads", "1", "--max-context", "256",
    ...(a.dedicated ? ["--dedicated"] : ["--idle-after", "0s", "--max-load", "1000"])], `${a.name}.log`);
  return a.key.id;
}

// Pod members speak the node protocol themselves: signed registration and heartbeats.
const podMembers = [
  { name: "lisbon-rack-1", chip: "M2 Ultra", gib: 192, region: "Lisbon, PT", seat: "dedicated", pod: "lisbon-rack" },
  { name: "lisbon-rack-2", chip: "M2 Ultra", gib: 192, region: "Lisbon, PT", seat: "dedicated", pod: "lisbon-rack" },
  { name: "pacific-1", chip: "M3 Max", gib: 64, region: "Sydney, AU", seat: "shared", pod: "pacific" }, // leaves
  { name: "pacific-2", chip: "M3 Max", gib: 64, region: "Tokyo, JP", seat: "shared", pod: "pacific" },
];
for (const m of podMembers) m.key = nodeKey();
const signedPost = (key, path, body) => signedPostTo(port, key, path, body);
const registerMember = (m) => signedPost(m.key, "/v1/nodes/register", {
  name: m.name, chip: m.chip, memory_bytes: m.gib * GiB, memory_bandwidth_gbs: 400, region: m.region,
  seat: m.seat, models: [], offering: true,
  pod: { id: m.pod, members: podMembers.filter((o) => o.pod === m.pod).map((o) => o.key.id), links: [] },
});
// Every 2 s, as the agent does, so the coordinator's silence timeout never takes them offline.
const heartbeats = setInterval(() => {
  for (const m of podMembers) if (!m.left) signedPost(m.key, "/v1/nodes/heartbeat", { offering: true }).catch(() => {});
}, 2000);

const jobApi = async (method, path, body) => {
  const r = await fetch(base + path, { method, body: body && JSON.stringify(body),
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` } });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.json();
};

// ------------------------------------------------------------------ the browser

let browser = null;
const sink = { foreign: [], errors: [] };
const newPage = (options) => guardedPage(browser, port, options, sink);

const online = new Set(); // ids the test expects online
const dot = (id) => `#map circle.dot[data-node-id="${id}"]`;
const find = (doc, id) => doc.nodes.find((n) => n.id === id);
// The regions the map draws at world zoom, with the count each says: {"Lisbon, PT": 3, ...}.
const regionMarks = (page) => page.$$eval("#map .mark.region[data-region]", (ms) =>
  Object.fromEntries(ms.map((m) => [m.dataset.region, Number((m.getAttribute("aria-label") || "").match(/: (\d+) machines/)?.[1] ?? -1)])));
// What they should be: online machines per listed region, from the coordinator's own list.
const expectedMarks = (doc) => {
  const out = {};
  for (const n of doc.nodes) if (n.online && online.has(n.id)) out[n.region] = (out[n.region] || 0) + 1;
  return out;
};
const sameMarks = async (page, doc) => JSON.stringify(Object.entries(await regionMarks(page)).sort()) === JSON.stringify(Object.entries(expectedMarks(doc)).sort());
async function zoomInto(page, region) {
  await page.click("#zoom-reset");
  await page.waitForTimeout(400);
  await page.click(`#map .mark.region[data-region="${region}"]`);
  await waitFor(async () => (await page.getAttribute("#map", "data-mode")) === "machines" && !(await page.getAttribute("#map", "data-loading")), 5000, `zoomed into ${region}`);
}

const watchdog = startWatchdog(LIMIT_MS);

try {
  console.log(`[world] coordinator ${base} (${tmp})`);

  // -- the network: agents and pods register, one agent stops, three jobs run
  for (const a of agents) online.add(startAgent(a));
  for (const m of podMembers) { await registerMember(m); online.add(m.key.id); }
  await waitFor(async () => (await getWorld()).totals.online === online.size, 20000, `${online.size} machines online`);
  const paris = agents.find((a) => a.name === "paris-m3");
  online.delete(paris.key.id);
  paris.proc.kill("SIGTERM");
  const parisStopped = Date.now();
  const parisMs = await waitFor(async () => !find(await getWorld(), paris.key.id).online, 5000, "the stopped agent to go offline");
  check(parisMs <= JOIN_LEAVE_MS, `a stopped agent withdraws at once (offline after ${parisMs} ms)`);

  // One at a time: placement weighs a machine's queue against having the model on disk, and only
  // one agent has it.
  for (const prompt of ["The orchard", "Once upon a time", "Apples and pears"]) {
    const job = await jobApi("POST", "/v1/jobs", { model: "tiny", prompt, max_tokens: 200, temperature: 0 });
    await waitFor(async () => (await jobApi("GET", `/v1/jobs/${job.id}`)).state === "completed", 30000, `job ${job.id}`);
  }
  check(true, "three jobs completed");

  // -- the JSON and the routes
  const world = await getWorld();
  const all = agents.length + podMembers.length;
  check(world.nodes.length === all && world.totals.nodes === all && world.totals.online === online.size,
    `GET /v1/world lists ${all} machines, ${online.size} online`);
  const keys = ["id", "chip", "memory_bytes", "region", "seat", "pod", "online", "jobs_served", "tok_s"];
  check(world.nodes.every((n) => keys.every((k) => k in n) && n.online === Number.isFinite(n.online_since)),
    "every node has the fields the issue names, and online_since while online");
  const served = find(world, agents[0].key.id);
  check(served.jobs_served === 3 && served.tok_s > 0, `the serving agent: 3 jobs served at ${served.tok_s.toFixed(1)} tok/s`);
  const t = world.totals;
  check(t.tok_s > 0 && t.jobs_per_min === 3 && t.queue === 0 && t.credits_by_seat.dedicated > 0,
    `totals from the coordinator: ${t.tok_s.toFixed(1)} tok/s, ${t.jobs_per_min} jobs/min, queue ${t.queue}, credits ${JSON.stringify(t.credits_by_seat)}`);
  const pageRes = await fetch(`${base}/world`);
  check(pageRes.headers.get("content-type")?.startsWith("text/html") && pageRes.headers.get("cache-control") === "no-cache",
    "/world is HTML, revalidated (Cache-Control: no-cache)");
  const asset = (await pageRes.text()).match(/\/world\/assets\/[^"]+\.js/)?.[0];
  const assetRes = await fetch(base + asset);
  check(assetRes.ok && /javascript/.test(assetRes.headers.get("content-type")) && /immutable/.test(assetRes.headers.get("cache-control")),
    `${asset} is JavaScript, cached as immutable`);
  check((await fetch(`${base}/world/assets/nope.js`)).status === 404, "an unknown asset is a 404");

  browser = await launchBrowser(chromiumPath);
  console.log(`[world] chromium ${browser.version()}`);

  // -- desktop
  const page = await newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(`${base}/world`, { waitUntil: "load" });
  const firstMs = await waitFor(async () => sameMarks(page, await getWorld()), 5000, "one mark per region with machines online");
  check(true, `one mark per region with machines online, each with its count, after ${firstMs} ms`);
  await waitFor(async () => (await page.textContent("#status-text")) === "Live", 3000, "the event stream is live");
  check(true, "the event stream is live");
  check((await page.textContent("#stat-online")).trim() === String(online.size), "the online counter matches");
  check((await page.textContent("#stat-toks")).trim() === formatNumber(t.tok_s, 1) &&
    (await page.textContent("#stat-jobs")).trim() === formatNumber(t.jobs_per_min, 1) &&
    (await page.textContent("#stat-queue")).trim() === "0", "tokens/s, jobs/min and queue are the coordinator's");
  check((await page.textContent("#l-toks + .value + .sub")).includes("last minute") &&
    (await page.textContent("#machines thead")).includes("Last job tok/s"),
    "the header's tokens/s says it is the last minute's output, the table's column that it is a last job's speed");
  check(world.totals.pods === 2, "two pods formed");
  check((await page.textContent("#map .tray-label")) === "Region not shared (1)", "a machine in an unknown region sits in the tray");
  const lb = await page.$$eval("#leaderboard li .seat", (xs) => xs.map((x) => x.firstChild.textContent.trim()));
  const lbTop = (await page.textContent("#leaderboard li .credits")).trim();
  check(JSON.stringify(lb) === JSON.stringify(["Dedicated", "Shared"]) && lbTop.startsWith(formatNumber(t.credits_by_seat.dedicated, 2)),
    `leaderboard ranks seat classes by the coordinator's credits (${lb}; ${lbTop})`);
  await page.hover('#map .mark.region[data-region="Lisbon, PT"]');
  check(/Lisbon, PT[\s\S]*Online\s*3 of 3/.test(await page.textContent("#tooltip")), "hovering a region shows its machines online");

  // Zoomed into Lisbon: its three machines one by one, the rack's two linked as a pod.
  await zoomInto(page, "Lisbon, PT");
  const lisbonIds = [agents[0].key.id, podMembers[0].key.id, podMembers[1].key.id].sort();
  const shown = (await page.$$eval("#map circle.dot[data-node-id]", (ds) => ds.map((d) => d.dataset.nodeId))).filter((id) => lisbonIds.includes(id)).sort();
  check(JSON.stringify(shown) === JSON.stringify(lisbonIds), "zoomed into Lisbon: its three machines, one dot each");
  check((await page.$$('#map .pod[data-pod="lisbon-rack"] path.pod-link')).length === 1, "the rack's two members are linked as a pod");
  // hover: chip, memory, seat, jobs served, uptime
  await page.hover(dot(served.id));
  const tip = await page.textContent("#tooltip");
  check(await page.isVisible("#tooltip") && tip.includes("M4 Max") && tip.includes(formatBytes(served.memory_bytes)) &&
    /Dedicated/.test(tip) && /Jobs served\s*3(?!\d)/.test(tip) && /Uptime\s*\d+ (s|min)/.test(tip),
    "hovering a dot shows chip, memory, seat, jobs served and uptime");
  await page.mouse.move(5, 5);
  await page.click("#zoom-reset");
  await page.waitForTimeout(400);

  // a machine joins (an agent starts), one leaves (an agent stops): both show within 2 s
  const tableCounters = () => page.evaluate(() => [Number(document.body.dataset.tableFetches), Number(document.body.dataset.tablePatches)]);
  const [fetchesBefore, patchesBefore] = await tableCounters();
  let t0 = Date.now();
  online.add(startAgent(joiner));
  await waitFor(() => page.$('#map .mark.region[data-region="Reykjavik, IS"]'), 10000, "the joining machine's region");
  const joinMs = Date.now() - t0;
  check(joinMs <= JOIN_LEAVE_MS && (await sameMarks(page, await getWorld())), `a starting agent's region appears in ${joinMs} ms (<= ${JOIN_LEAVE_MS})`);
  const leaver = agents.find((a) => a.name === "tokyo-m3max");
  online.delete(leaver.key.id);
  t0 = Date.now();
  leaver.proc.kill("SIGTERM");
  await waitFor(async () => (await regionMarks(page))["Tokyo, JP"] === 1, 10000, "Tokyo to count one machine");
  const leaveMs = Date.now() - t0;
  check(leaveMs <= JOIN_LEAVE_MS && (await sameMarks(page, await getWorld())), `a stopped agent leaves its region's count in ${leaveMs} ms (<= ${JOIN_LEAVE_MS})`);
  const pacific = podMembers.find((m) => m.name === "pacific-1");
  pacific.left = true;
  online.delete(pacific.key.id);
  await signedPost(pacific.key, "/v1/nodes/heartbeat", { offering: false });
  await waitFor(async () => !(await page.$('#map .mark.region[data-region="Sydney, AU"]')), JOIN_LEAVE_MS, "a withdrawn pod member's region to go");
  check(true, "a withdrawn pod member leaves the map");
  // The table took those from the event stream's deltas, not by asking again.
  const tableIds = () => page.$$eval("#machines tbody tr[data-node-id]", (rs) => rs.map((r) => r.dataset.nodeId));
  const onlineSorted = async () => (await (await fetch(`${base}/v1/world/machines?limit=500`)).json()).machines.map((n) => n.id);
  await waitFor(async () => JSON.stringify(await tableIds()) === JSON.stringify(await onlineSorted()), 3000, "the table to follow the joins and leaves");
  const [fetchesAfter, patchesAfter] = await tableCounters();
  check(fetchesAfter === fetchesBefore && patchesAfter > patchesBefore,
    `the table's rows follow a join and two leaves, in the server's order, patched from ${patchesAfter - patchesBefore} deltas with no new request (${fetchesAfter - fetchesBefore})`);

  // table filters, answered by the coordinator, against its own list
  const now = await getWorld();
  const rows = () => page.$$eval("#machines tbody tr[data-node-id]", (rs) => rs.length);
  const count = (f) => now.nodes.filter(f).length;
  const settle = (want, what) => waitFor(async () => (await rows()) === want, 3000, what).then(() => true, () => false);
  check(await settle(online.size, "the online machines"), "the table lists the online machines");
  await page.selectOption("#f-chip", "class:ultra");
  check(await settle(count((n) => n.online && /ultra/i.test(n.chip)), "Ultras"), "filter by chip class (Ultra)");
  await page.selectOption("#f-chip", "");
  await page.selectOption("#f-mem", "64");
  check(await settle(count((n) => n.online && n.memory_bytes >= 64 * GiB), ">= 64 GB"), "filter by memory (>= 64 GB)");
  await page.selectOption("#f-status", "any");
  check(await settle(count((n) => n.memory_bytes >= 64 * GiB), "offline too"), "show offline machines too");
  await page.selectOption("#f-mem", "0");
  await page.selectOption("#f-region", "r:Tokyo, JP");
  check(await settle(count((n) => n.region === "Tokyo, JP"), "Tokyo"), "filter by region (Tokyo, offline too)");
  await page.selectOption("#f-region", "");
  await page.selectOption("#f-status", "true");

  await page.mouse.move(5, 5);
  await page.screenshot({ path: join(outDir, "world-desktop.png"), fullPage: true });

  // -- a phone
  const phone = await newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await phone.goto(`${base}/world`, { waitUntil: "load" });
  await waitFor(async () => sameMarks(phone, await getWorld()), 5000, "phone: one mark per region");
  check(true, "phone: one mark per region");
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `phone: no sideways scrolling (overflow ${overflow} px)`);
  const mapWidth = await phone.$eval("#map", (m) => m.getBoundingClientRect().width);
  check(mapWidth > 300 && mapWidth <= 390, `phone: the map fits the screen (${Math.round(mapWidth)} px)`);
  // A finger, not a key: a touch tap (touchstart/touchend, then the click the browser makes of it)
  // on Toronto's mark, through d3-zoom's own touch handling, zooms into it.
  check(await phone.evaluate(() => navigator.maxTouchPoints > 0 && "ontouchstart" in window), "phone: the browser has a touch screen");
  await phone.evaluate(() => {
    window.__touches = [];
    for (const t of ["touchstart", "touchend", "click"]) window.addEventListener(t, () => window.__touches.push(t), { capture: true });
  });
  await tapElement(phone, '#map .mark.region[data-region="Toronto, CA"]');
  const touches = await phone.evaluate(() => window.__touches.join(" "));
  check(/touchstart touchend.*click/.test(touches), `phone: the tap reached the page as a touch (${touches})`);
  await waitFor(async () => (await phone.getAttribute("#map", "data-mode")) === "machines" && !(await phone.getAttribute("#map", "data-loading")), 5000, "phone: zoomed into Toronto by a tap");
  check(true, "phone: tapping a region zooms into it");
  const smallest = await smallestDotPx(phone);
  check(smallest >= 2.9, `phone: the smallest machine is a dot of ${smallest.toFixed(1)} px radius (>= 3)`);
  await tapElement(phone, dot(agents.find((a) => a.name === "toronto-m1ultra").key.id));
  check(/M1 Ultra/.test(await phone.textContent("#tooltip")), "phone: tapping a dot shows its details");
  await phone.screenshot({ path: join(outDir, "world-phone.png"), fullPage: true });

  check(sink.errors.length === 0, `no console errors${sink.errors.length ? ": " + sink.errors.join(" | ") : ""}`);
  check(sink.foreign.length === 0, `no request left the coordinator${sink.foreign.length ? ": " + sink.foreign.join(", ") : ""}`);
  await Promise.race([paris.proc.exited, new Promise((r) => setTimeout(r, AGENT_EXIT_MS - (Date.now() - parisStopped)))]);
  check(paris.proc.exitCode === 0, `the agent stopped first has exited by itself (${Date.now() - parisStopped} ms after SIGTERM)`);
} catch (e) {
  fail(e);
} finally {
  clearInterval(heartbeats);
  await browser?.close().catch(() => {});
  // Agents first, so their withdrawals reach a coordinator that is still up.
  await stop(agents.concat(joiner).map((a) => a.proc).filter(Boolean), 1500);
  await stop([coordinator], 5000);
  clearTimeout(watchdog);
}
finish("world", ctx);

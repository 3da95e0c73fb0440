// The cluster page in a real browser: Debian's chromium (/usr/bin/chromium), headless, driven by
// playwright-core, against two real `orchard agent`s on loopback that this test starts.
//
//   node web/cluster/tests/cluster.spec.mjs --orchard <build>/orchard [--out DIR] [--screenshot FILE]
//
// Checks: the page loads from the agent's port with no console errors and asks nothing of any
// host but the agent; the machines table shows this machine (chip, and its memory as the OS
// counts it) and the links the agents measured; picking a preset shows the planner's split with predicted rates, and a model too
// big for the machine shows why it cannot be placed; the choice survives a reload (#model=...);
// the figures refresh by themselves; the same page on `orchard serve`'s port at /cluster.html
// shows what the local agent knows. Saves cluster.png in DIR (and FILE).
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const arg = (name, fallback) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : fallback; };
const orchard = arg("--orchard");
const outDir = resolve(arg("--out", join(here, "..", "test-results")));
const screenshot = arg("--screenshot");
const chromiumPath = process.env.ORCHARD_CHROMIUM || "/usr/bin/chromium";
if (!orchard) { console.error("usage: cluster.spec.mjs --orchard <orchard binary> [--out DIR] [--screenshot FILE]"); process.exit(2); }
mkdirSync(outDir, { recursive: true });

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`  ok   ${what}`);
  else { failures++; console.log(`  FAIL ${what}`); }
}

// Two agents of one cluster on this host (they share the announcement port, so they find each
// other and measure the link between them): free TCP ports (probes, queries, the page) and a UDP one.
const freeTcp = () => new Promise((res) => { const s = createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); }); });
const udpPort = await new Promise((res) => { const s = createSocket("udp4").bind(0, () => { const p = s.address().port; s.close(() => res(p)); }); });
const tcpPorts = [await freeTcp(), await freeTcp()];
const agents = tcpPorts.map((port) => spawn(orchard, ["agent", "--cluster", `page-test-${process.pid}`, "--secret", "page-test",
  "--port", String(udpPort), "--agent-port", String(port), "--threads", "1", "--probe-mb", "4"], { stdio: ["ignore", "inherit", "inherit"] }));
const servers = [];
process.on("exit", () => [...agents, ...servers].forEach((p) => p.kill("SIGKILL")));
const tmp = mkdtempSync(join(tmpdir(), "orchard-cluster-"));
const url = `http://127.0.0.1:${tcpPorts[0]}`;
let status = null;
// An agent answers once it has measured its machine: 30 s, times ORCHARD_TEST_TIMEOUT_FACTOR where
// a run is emulated (scripts/test-arm64-all.sh: under qemu-user the measurement alone took 55 s).
const waitSeconds = 30 * (Number(process.env.ORCHARD_TEST_TIMEOUT_FACTOR ?? 1) || 1);
for (let i = 0; i < waitSeconds * 10 && !(status?.machines.length === 2 && status.links.length > 0); i++) {
  try { status = await (await fetch(`${url}/cluster`)).json(); } catch { /* not listening yet */ }
  await new Promise((r) => setTimeout(r, 100));
}
if (!status) { console.error(`the agent did not answer on ${url} within ${waitSeconds} s`); process.exit(1); }
check(status.machines.length === 2 && status.links.length > 0,
  `the agents found each other (${status.machines.length} machines, ${status.links.length} link(s) measured)`);
const me = status.machines[0];

const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 820 } });
  const errors = [];
  const foreign = [];
  let polls = 0;
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => {
    if (!r.url().startsWith(url) && !r.url().startsWith("data:")) foreign.push(r.url());
    if (r.url().startsWith(`${url}/cluster`)) polls++;
  });

  await page.goto(`${url}/`);
  await page.waitForSelector("#machines tbody tr");
  const cells = await page.$$eval("#machines tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(cells.length === status.machines.length && cells.length >= 1, `the machines table has the agent's ${status.machines.length} machine(s)`);
  check(me.chip.length > 0 && cells[0][0].startsWith(me.hostname) && cells[0][1] === me.chip, `this machine: ${cells[0][0]}, chip "${cells[0][1]}"`);
  // Memory as the OS counts it (node's os.totalmem), shown in GB with one decimal.
  const memory = Number.parseFloat(cells[0][4]);
  check(Math.abs(memory * 1e9 - totalmem()) <= 0.06e9 + 0.01 * totalmem(), `its memory ${cells[0][4]} is the OS's ${(totalmem() / 1e9).toFixed(2)} GB`);
  check(/^\d+\.\d GB$/.test(cells[0][5]) && Number.parseFloat(cells[0][5]) <= memory, `free memory ${cells[0][5]}`);
  const links = await page.$$eval("#links tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(links.length >= status.links.length && links.every((l) => /^\d+ µs$/.test(l[2]) && l[4] === "tcp") && await page.isHidden("#no-links"),
    `the links table: ${JSON.stringify(links[0])}`);
  check(await page.isHidden("#plan"), "no plan before a model is picked");

  // A model that fits: the planner's split over the machine, with predicted rates.
  await page.selectOption("#type", "q4_0");
  await page.selectOption("#shape", "tinyllama-1.1b");
  await page.waitForSelector("#plan:not([hidden]) #assignment tbody tr");
  const summary = await page.textContent("#plan-summary");
  const expected = await (await fetch(`${url}/cluster?model=tinyllama-1.1b:q4_0`)).json();
  check(summary.startsWith(`${expected.plan.strategy} (tp ${expected.plan.tp} × pp ${expected.plan.pp}): `) &&
    /: [\d.]+ tok\/s generation, \d+ tok\/s prompt/.test(summary), `a plan for tinyllama-1.1b:q4_0: "${summary}"`);
  const ranks = await page.$$eval("#assignment tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  const first = expected.plan.assignment[0];
  const range = (r) => (r ? `${r[0]}–${r[1]}` : "");
  check(ranks.length === expected.plan.assignment.length && ranks[0][1] === first.host && ranks[0][2] === (range(first.layers) || "all") &&
    ranks[0][3] === range(first.heads), `rank 0 on ${ranks[0][1]}: layers "${ranks[0][2]}", heads "${ranks[0][3]}"`);
  check((await page.textContent("#plan-explanation")).length > 20, "with the planner's reasons");
  check(page.url().endsWith("#model=tinyllama-1.1b:q4_0"), `the choice is in the URL (${page.url()})`);

  // The same choice after a reload.
  await page.reload();
  await page.waitForSelector("#plan:not([hidden]) #assignment tbody tr");
  check(await page.inputValue("#shape") === "tinyllama-1.1b" && await page.inputValue("#type") === "q4_0", "a reload keeps the chosen model");

  // The figures refresh by themselves.
  const before = polls;
  await page.waitForTimeout(3500);
  check(polls > before, `the page asked /cluster again by itself (${polls - before} time(s) in 3.5 s)`);
  const shot = join(outDir, "cluster.png");
  await page.screenshot({ path: shot, fullPage: true });
  if (screenshot) copyFileSync(shot, screenshot);

  // A model no single machine of this size holds: the planner's explanation instead of a split.
  await page.selectOption("#type", "f32");
  await page.selectOption("#shape", "kimi-k2");
  await page.waitForSelector("#plan-summary.error");
  const why = await page.textContent("#plan-explanation");
  check(await page.isHidden("#assignment") && why.length > 20, `kimi-k2:f32 cannot be placed: "${why.slice(0, 100)}..."`);

  check(errors.length === 0, `no console errors ${errors.length ? JSON.stringify(errors) : ""}`);
  check(foreign.length === 0, `no request leaves the agent ${foreign.length ? JSON.stringify(foreign) : ""}`);

  // The same page on `orchard serve`'s port, at /cluster.html beside the chat page: what the
  // local agent (the first one, named by --agent-port) knows.
  const model = join(tmp, "tiny.gguf");
  execFileSync(orchard, ["make-model", "--arch", "llama", "--shape", "tiny", "--type", "q8_0", "-o", model], { stdio: "ignore" });
  const server = spawn(orchard, ["serve", "-m", model, "--port", "0", "--threads", "1", "--parallel", "1",
    "--cluster", `page-test-${process.pid}`, "--secret", "page-test", "--agent-port", String(tcpPorts[0])],
    { stdio: ["ignore", "pipe", "inherit"] });
  servers.push(server);
  const serveUrl = await new Promise((res, rej) => {
    let out = "";
    server.stdout.on("data", (d) => { out += d; const m = out.match(/listening on (http:\/\/\S+)/); if (m) res(m[1]); });
    server.on("exit", (code) => rej(new Error(`orchard serve exited with ${code}`)));
  });
  const served = await browser.newPage({ viewport: { width: 1100, height: 820 } });
  const serveErrors = [];
  const serveForeign = [];
  served.on("console", (m) => { if (m.type() === "error") serveErrors.push(m.text()); });
  served.on("pageerror", (e) => serveErrors.push(String(e)));
  served.on("request", (r) => { if (!r.url().startsWith(serveUrl) && !r.url().startsWith("data:")) serveForeign.push(r.url()); });
  await served.goto(`${serveUrl}/cluster.html`);
  await served.waitForFunction(() => document.querySelectorAll("#machines tbody tr").length === 2, null, { timeout: 20000 });
  const servedRows = await served.$$eval("#machines tbody tr", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(servedRows.length === 2 && servedRows.some((r) => r[0].startsWith(me.hostname)),
    `serve's /cluster.html shows the agent's 2 machines (${servedRows.map((r) => r[0]).join(", ")})`);
  check(await served.$$eval("#links tbody tr", (rows) => rows.length) >= 1, "and the links the agents measured");
  await served.selectOption("#type", "q4_0");
  await served.selectOption("#shape", "tinyllama-1.1b");
  await served.waitForSelector("#plan:not([hidden]) #assignment tbody tr");
  check(/tok\/s generation/.test(await served.textContent("#plan-summary")), "and the planner's split of a picked model");
  check((await (await fetch(`${serveUrl}/`)).text()).includes("Orchard chat"), "/ on serve's port is still the chat page");
  check(serveErrors.length === 0, `no console errors on serve's port ${serveErrors.length ? JSON.stringify(serveErrors) : ""}`);
  check(serveForeign.length === 0, `no request leaves serve's port ${serveForeign.length ? JSON.stringify(serveForeign) : ""}`);
} finally {
  await browser.close();
  agents.forEach((a) => a.kill("SIGTERM"));
  servers.forEach((s) => s.kill("SIGTERM"));
  rmSync(tmp, { recursive: true, force: true });
}
console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);

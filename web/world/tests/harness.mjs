// What the World page's browser tests share: their arguments, checks and waits, the orchard
// processes they start (and always stop), the signed node API, and a browser page that may reach
// nothing but the server under test and counts console errors. (world.spec.mjs, world_scale.spec.mjs)
import { spawn } from "node:child_process";
import { createHash, generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { createInterface } from "node:readline";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const GiB = 1024 ** 3;

// The command line: --orchard BINARY (required), --out DIR, and the test's own options via arg().
export function setup(name, usage) {
  const args = process.argv.slice(2);
  const arg = (flag, fallback) => { const i = args.indexOf(flag); return i >= 0 ? args[i + 1] : fallback; };
  const orchard = arg("--orchard");
  if (!orchard) { console.error(`usage: ${usage}`); process.exit(2); }
  const outDir = resolve(arg("--out", join(here, "..", "test-results")));
  mkdirSync(outDir, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), `orchard-${name}-`));
  return { arg, orchard, outDir, tmp, started: Date.now(), chromiumPath: process.env.ORCHARD_CHROMIUM || "/usr/bin/chromium" };
}

let failures = 0;
export const failed = () => failures;
export function check(cond, what) {
  if (cond) console.log(`  ok   ${what}`);
  else { failures++; console.log(`  FAIL ${what}`); }
}
// A throw from a test's body: counted as a failure.
export function fail(e) {
  failures++;
  console.log(`  FAIL ${e.message}`);
}
// Multiplies every wait and watchdog of these tests: scripts/test-arm64-all.sh sets
// ORCHARD_TEST_TIMEOUT_FACTOR for the run under qemu-user, where the server is several times
// slower than a native one (1 when unset).
export const timeoutFactor = Number(process.env.ORCHARD_TEST_TIMEOUT_FACTOR ?? 1) || 1;

// Polls fn every 50 ms until it returns something truthy (for at most timeoutMs times
// timeoutFactor); the time it took, or a throw naming `what`.
export async function waitFor(fn, timeoutMs, what) {
  timeoutMs *= timeoutFactor;
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return Date.now() - t0;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// ------------------------------------------------------------------ processes

// Everything started and not yet exited; on the way out (an exception before cleanup, a signal,
// the watchdog) nothing outlives the test.
const procs = new Set();
process.on("exit", () => { for (const p of procs) p.kill("SIGKILL"); });
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(1));

// Starts `orchard argv...`, its stdout and stderr appended to tmp/log.
export function launch(orchard, tmp, argv, log) {
  const fd = openSync(join(tmp, log), "a");
  const proc = spawn(orchard, argv, { stdio: ["ignore", fd, "pipe"] });
  procs.add(proc);
  proc.stderr.on("data", (d) => writeSync(fd, d));
  proc.exited = new Promise((r) => proc.on("exit", () => { procs.delete(proc); r(); }));
  return proc;
}
// SIGTERM, then SIGKILL for whatever has not exited after graceMs.
export async function stop(list, graceMs) {
  const live = list.filter((p) => procs.has(p));
  for (const p of live) p.kill("SIGTERM");
  await Promise.race([Promise.all(live.map((p) => p.exited)), new Promise((r) => setTimeout(r, graceMs))]);
  for (const p of live) if (procs.has(p)) p.kill("SIGKILL");
  await Promise.all(live.map((p) => p.exited));
}
export const running = () => [...procs];
// The port a server prints on stderr (the first group of `pattern`).
export function portOf(proc, pattern, timeoutMs = 60000) {
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start in ${timeoutMs / 1000} s`)), timeoutMs);
    proc.on("exit", (code) => reject(new Error(`orchard exited (${code})`)));
    createInterface({ input: proc.stderr }).on("line", (line) => {
      const m = line.match(pattern);
      if (m) { clearTimeout(timer); resolveStart(Number(m[1])); }
    });
  });
}
// Below ctest's TIMEOUT, so that the test, not ctest, stops what it started.
export function watchdog(limitMs) {
  return setTimeout(() => { console.log(`  FAIL the test ran over ${limitMs / 1000} s`); process.exit(1); }, limitMs);
}
// The verdict: logs kept on failure; the exit code.
export function finish(label, { tmp, outDir, started }) {
  if (failures) console.log(`[${label}] logs kept in ${tmp}`);
  else rmSync(tmp, { recursive: true, force: true });
  console.log(`[${label}] ${failures ? `${failures} check(s) failed` : "all checks passed"} in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${outDir}`);
  process.exit(failures ? 1 : 0);
}

// ------------------------------------------------------------------ the signed node API

// A node key as the agent keeps it (hex of libsodium's secret key: seed, then public key, 0600)
// when `file` is given.
export function nodeKey(file) {
  const jwk = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });
  const seed = Buffer.from(jwk.d, "base64url"), pub = Buffer.from(jwk.x, "base64url");
  if (file) writeFileSync(file, Buffer.concat([seed, pub]).toString("hex") + "\n", { mode: 0o600 });
  return { id: pub.toString("hex"), jwk };
}

const keepAlive = new Agent({ keepAlive: true, maxSockets: 16 });
// POST a body signed as the node protocol signs it; the answer's JSON.
export function signedPost(port, key, path, body) {
  const text = JSON.stringify(body);
  const ts = Date.now(), nonce = randomBytes(16).toString("hex");
  const digest = createHash("sha256").update(text).digest("hex");
  const signature = sign(null, Buffer.from(`POST\n${path}\n${ts}\n${nonce}\n${digest}`), { key: key.jwk, format: "jwk" }).toString("hex");
  const headers = { "content-type": "application/json", "content-length": Buffer.byteLength(text), "x-orchard-node": key.id,
    "x-orchard-timestamp": String(ts), "x-orchard-nonce": nonce, "x-orchard-signature": signature };
  return new Promise((ok, no) => {
    const req = request({ host: "127.0.0.1", port, path, method: "POST", agent: keepAlive, headers }, (res) => {
      let answer = "";
      res.on("data", (d) => { answer += d; });
      res.on("end", () => (res.statusCode === 200 ? ok(answer ? JSON.parse(answer) : null) : no(new Error(`${path}: ${res.statusCode} ${answer}`))));
    });
    req.on("error", no);
    req.end(text);
  });
}

// ------------------------------------------------------------------ the browser

export function launchBrowser(chromiumPath) {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true, // playwright runs it with a fresh temporary --user-data-dir
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

// A page in a fresh context that may reach only 127.0.0.1:port: anything else is refused and
// listed in sink.foreign; console errors and uncaught exceptions go to sink.errors.
export async function guardedPage(browser, port, options, sink) {
  const context = await browser.newContext(options);
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.protocol === "data:" || (u.hostname === "127.0.0.1" && Number(u.port) === port)) return route.continue();
    sink.foreign.push(route.request().url());
    return route.abort();
  });
  // Playwright's own 30 s for navigations and actions, scaled like the waits above.
  context.setDefaultTimeout(30000 * timeoutFactor);
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") sink.errors.push(m.text()); });
  page.on("pageerror", (e) => sink.errors.push(String(e)));
  return page;
}

// Taps the middle of an element with a touch (the page must come from a context with hasTouch).
export async function tapElement(page, selector) {
  const box = await (await page.$(selector)).boundingBox();
  await page.touchscreen.tap(box.x + box.width / 2, box.y + box.height / 2);
}

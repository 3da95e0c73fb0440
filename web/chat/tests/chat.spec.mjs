// The chat page in a real browser: Debian's chromium (/usr/bin/chromium), headless, driven by
// playwright-core, against a real `orchard serve` on a tiny synthetic model that this test starts.
//
//   node web/chat/tests/chat.spec.mjs --orchard <build>/orchard [--out DIR] [--screenshot FILE]
//
// Checks: the page loads with no console errors and asks nothing of any host but the server; the
// model picker lists /v1/models; a message gets a reply that arrives in pieces (streamed) and shows
// its tokens/s; Stop ends a reply early and frees the server's slot; a reload shows the
// conversation again (localStorage); New chat clears it. Saves chat.png in DIR (and FILE).
import { spawn, execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
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
if (!orchard) { console.error("usage: chat.spec.mjs --orchard <orchard binary> [--out DIR] [--screenshot FILE]"); process.exit(2); }
mkdirSync(outDir, { recursive: true });
const tmp = mkdtempSync(join(tmpdir(), "orchard-chat-"));

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`  ok   ${what}`);
  else { failures++; console.log(`  FAIL ${what}`); }
}

// Where the server is emulated (scripts/test-arm64-all.sh: qemu-user), times its waits.
const timeoutFactor = Number(process.env.ORCHARD_TEST_TIMEOUT_FACTOR ?? 1) || 1;

// The server: the small corpus-fitted llama (the default model, which writes words), one slot,
// so that a stopped reply's slot must be freed for the next. Its replies take seconds (up to its
// 2048-token context at a few hundred tokens/s), so Stop always lands while one streams, even on a busy host.
// Emulated, a slot has 256 positions instead: qemu-user writes 2.6 tokens/s, where a reply to the
// model's 2048 took over 13 minutes against a wait of 5 (one minute, times the factor); a reply of about
// 200 tokens (the second prompt is ~60) still lasts over a minute there, so Stop lands while the
// first streams, and the second ends as natively (an end token or the context's end).
const model = join(tmp, "small.gguf");
execFileSync(orchard, ["make-model", "--arch", "llama", "--shape", "small", "--type", "q8_0", "--fit-corpus", "-o", model],
             { stdio: "ignore" });
const server = spawn(orchard, ["serve", "-m", model, "--port", "0", "--alias", "tiny", "--threads", "1", "--parallel", "1",
                                ...(timeoutFactor > 1 ? ["-c", "256"] : [])], {
  stdio: ["ignore", "pipe", "inherit"],
});
process.on("exit", () => server.kill("SIGKILL"));
const url = await new Promise((resolve, reject) => {
  let out = "";
  server.stdout.on("data", (d) => { out += d; const m = out.match(/listening on (http:\/\/\S+)/); if (m) resolve(m[1]); });
  server.on("exit", (code) => reject(new Error(`orchard serve exited with ${code}`)));
});
const metric = async (name) => {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
};

const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  page.setDefaultTimeout(30000 * timeoutFactor); // Playwright's own 30 s for waits and actions, scaled too
  const errors = [];
  const foreign = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith(url) && !r.url().startsWith("data:")) foreign.push(r.url()); });

  await page.goto(`${url}/`);
  await page.waitForFunction(() => document.querySelector("#model option") !== null);
  check((await page.$$eval("#model option", (o) => o.map((x) => x.value))).join() === "tiny", "the model picker lists /v1/models");

  // Stop as soon as the first reply starts: it ends early and the server's one slot is free again.
  const cancelledBefore = await metric('orchard_completions_total{finish_reason="cancelled"}');
  // Clicked from the page at the DOM change that shows the first text: a short reply can end
  // within the few milliseconds a click from here takes to land.
  await page.evaluate(() => {
    window.stopShown = null;
    const observer = new MutationObserver(() => {
      if (!(document.querySelector(".message.assistant .text")?.textContent.length > 0)) return;
      observer.disconnect();
      const stop = document.querySelector("#stop");
      window.stopShown = !stop.hidden && stop.getClientRects().length > 0;
      stop.click();
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.fill("#input", "Tell me about orchards.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => window.stopShown !== null);
  check(await page.evaluate(() => window.stopShown), "a Stop button shows while a reply streams");
  await page.waitForSelector(".message.assistant[data-finish]");
  const stopped = await page.$eval(".message.assistant", (el) => ({ finish: el.dataset.finish, meta: el.querySelector(".meta").textContent }));
  check(stopped.finish === "stopped", `Stop ends the reply (finish ${stopped.finish}, "${stopped.meta}")`);
  let freed = false;
  for (let i = 0; i < 100 && !freed; i++) {
    const health = await (await fetch(`${url}/health`)).json();
    freed = health.active_slots === 0;
    if (!freed) await new Promise((r) => setTimeout(r, 50));
  }
  check(freed, "the server's slot is free after Stop");
  check(await metric('orchard_completions_total{finish_reason="cancelled"}') === cancelledBefore + 1, "the server counted one cancelled completion");
  check(await page.isVisible("#send") && !(await page.isVisible("#stop")), "Send is back after Stop");

  // The next message gets a whole reply, streamed: its text changes many times.
  await page.evaluate(() => {
    window.updates = 0;
    new MutationObserver(() => { window.updates++; }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
  });
  await page.fill("#input", "And in winter?");
  await page.press("#input", "Enter");
  const done = ".message.assistant:nth-of-type(4)[data-finish]";
  await page.waitForSelector(done, { timeout: 60000 * timeoutFactor });
  const reply = await page.$eval(done, (el) => ({ text: el.querySelector(".text").textContent, meta: el.querySelector(".meta").textContent, finish: el.dataset.finish }));
  check(reply.text.length > 0 && ["stop", "length"].includes(reply.finish), `a reply came (${reply.text.length} characters, finish ${reply.finish})`);
  const updates = await page.evaluate(() => window.updates);
  check(updates > 5, `it arrived in pieces (${updates} updates)`);
  check(/^\d+ tokens · [\d.]+ tok\/s/.test(reply.meta), `tokens/s shown: "${reply.meta}"`);

  // The conversation survives a reload.
  const before = await page.$$eval(".message", (els) => els.map((e) => [e.dataset.role, e.querySelector(".text").textContent]));
  await page.reload();
  await page.waitForSelector(".message");
  const after = await page.$$eval(".message", (els) => els.map((e) => [e.dataset.role, e.querySelector(".text").textContent]));
  check(before.length === 4 && JSON.stringify(after) === JSON.stringify(before), `a reload shows the ${after.length} messages again`);
  const shot = join(outDir, "chat.png");
  await page.screenshot({ path: shot });
  if (screenshot) copyFileSync(shot, screenshot);

  await page.click("#new-chat");
  check((await page.$$(".message")).length === 0, "New chat clears the conversation");
  await page.reload();
  await page.waitForFunction(() => document.querySelector("#model option") !== null);
  check((await page.$$(".message")).length === 0, "and it stays cleared after a reload");

  check(errors.length === 0, `no console errors ${errors.length ? JSON.stringify(errors) : ""}`);
  check(foreign.length === 0, `no request leaves the server ${foreign.length ? JSON.stringify(foreign) : ""}`);
} finally {
  await browser.close();
  server.kill("SIGTERM");
  rmSync(tmp, { recursive: true, force: true });
}
console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);

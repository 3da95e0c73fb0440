// Bundles the chat page into one folder `orchard serve` embeds (src/serve/CMakeLists.txt):
//   index.html and assets/<name>-<hash>.{js,css}. The page needs nothing but the server it came from.
// Usage: node build.mjs [--outdir DIR] [--dev]   (default outdir: dist)
import * as esbuild from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const at = args.indexOf("--outdir");
const outdir = resolve(at >= 0 ? args[at + 1] : join(here, "dist"));
const dev = args.includes("--dev");

rmSync(outdir, { recursive: true, force: true });
mkdirSync(join(outdir, "assets"), { recursive: true });

const result = await esbuild.build({
  entryPoints: { chat: join(here, "src/main.js") },
  bundle: true,
  minify: !dev,
  format: "esm",
  target: ["es2020", "chrome90", "firefox90", "safari14"],
  outdir,
  entryNames: "assets/[name]-[hash]",
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((p) => relative(outdir, resolve(p)));
const js = outputs.find((p) => p.endsWith(".js"));
const css = outputs.find((p) => p.endsWith(".css"));
if (!js || !css) throw new Error(`[chat] build produced ${outputs.join(", ")}: expected a .js and a .css`);

// The page is served at / and /chat, so asset URLs are absolute.
const html = readFileSync(join(here, "src/index.html"), "utf8")
  .replace("%CHAT_JS%", `/chat/${js}`)
  .replace("%CHAT_CSS%", `/chat/${css}`);
writeFileSync(join(outdir, "index.html"), html);
console.log(`[chat] built ${outdir}: index.html, ${js}, ${css}`);

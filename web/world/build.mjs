// Bundles the World page into one folder the coordinator embeds (src/network/world):
//   index.html and assets/<name>-<hash>.{js,css}. Everything the page needs at run time is in
//   it: the country shapes (world-atlas) and the region list (data/regions.json) are bundled.
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
  entryPoints: { world: join(here, "src/main.js") },
  bundle: true,
  minify: !dev,
  sourcemap: false,
  format: "esm",
  target: ["es2020", "chrome90", "firefox90", "safari14"],
  outdir,
  entryNames: "assets/[name]-[hash]",
  assetNames: "assets/[name]-[hash]",
  loader: { ".json": "json" },
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
  // The page must not reach outside the coordinator: no code may load URLs at run time.
  define: { "process.env.NODE_ENV": '"production"' },
});

const outputs = Object.keys(result.metafile.outputs).map((p) => relative(outdir, resolve(p)));
const js = outputs.find((p) => p.endsWith(".js"));
const css = outputs.find((p) => p.endsWith(".css"));
if (!js || !css) throw new Error(`[world] build produced ${outputs.join(", ")}: expected a .js and a .css`);

// The page is served at /world (no trailing slash), so asset URLs are absolute.
const html = readFileSync(join(here, "src/index.html"), "utf8")
  .replace("%WORLD_JS%", `/world/${js}`)
  .replace("%WORLD_CSS%", `/world/${css}`);
writeFileSync(join(outdir, "index.html"), html);

const size = (p) => readFileSync(join(outdir, p)).length;
console.log(`[world] built ${outdir}: index.html, ${js} (${(size(js) / 1024).toFixed(0)} KiB), ${css} (${(size(css) / 1024).toFixed(0)} KiB)`);

// Bundles one web page (web/chat, web/cluster) into the folder the orchard binary embeds
// (cmake/web_page.cmake): index.html and assets/<name>-<hash>.{js,css}; the page needs nothing but
// the server it came from. Each page's build.mjs passes its own esbuild (resolved from its own
// node_modules) and the URL prefix its assets are served under.
//   buildPage({ esbuild, here, name, prefix })  with argv: [--outdir DIR] [--dev]  (default outdir: here/dist)
// src/index.html names the bundle as %JS% and %CSS%.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

export async function buildPage({ esbuild, here, name, prefix }) {
  const args = process.argv.slice(2);
  const at = args.indexOf("--outdir");
  const outdir = resolve(at >= 0 ? args[at + 1] : join(here, "dist"));
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(join(outdir, "assets"), { recursive: true });

  const result = await esbuild.build({
    entryPoints: { [name]: join(here, "src/main.js") },
    bundle: true,
    minify: !args.includes("--dev"),
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
  if (!js || !css) throw new Error(`[${name}] build produced ${outputs.join(", ")}: expected a .js and a .css`);
  // Asset URLs are absolute: a page may be served at more than one path.
  const html = readFileSync(join(here, "src/index.html"), "utf8")
    .replace("%JS%", `${prefix}/${js}`)
    .replace("%CSS%", `${prefix}/${css}`);
  writeFileSync(join(outdir, "index.html"), html);
  console.log(`[${name}] built ${outdir}: index.html, ${js}, ${css}`);
}

// Bundles the cluster page (served at / on an agent's port, its assets under /assets).
// Usage: node build.mjs [--outdir DIR] [--dev]   (default outdir: dist)
import * as esbuild from "esbuild";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { buildPage } from "../build_page.mjs";

await buildPage({ esbuild, here: dirname(fileURLToPath(import.meta.url)), name: "cluster", prefix: "" });

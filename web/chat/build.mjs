// Bundles the chat page (served at / and /chat by `orchard serve`, its assets under /chat/assets).
// Usage: node build.mjs [--outdir DIR] [--dev]   (default outdir: dist)
import * as esbuild from "esbuild";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { buildPage } from "../build_page.mjs";

await buildPage({ esbuild, here: dirname(fileURLToPath(import.meta.url)), name: "chat", prefix: "/chat" });

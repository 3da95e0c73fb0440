// Writes each file of a built page's folder compressed beside it, FILE.br (Brotli, best quality)
// and FILE.gz (gzip, best level), when that is smaller: cmake/web_embed.cmake embeds them with the
// file, so a server sends them as they are instead of compressing at its first request.
//   node compress_dist.mjs DIR
import { brotliCompressSync, constants, gzipSync } from "node:zlib";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith(".")) continue;  // stamps are not served
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (entry.isFile() && !/\.(br|gz)$/.test(entry.name)) yield path;
  }
}

const dir = process.argv[2];
if (!dir) throw new Error("usage: node compress_dist.mjs DIR");
for (const path of files(dir)) {
  const bytes = readFileSync(path);
  const brotli = brotliCompressSync(bytes, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY,
      [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT,
      [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
    },
  });
  const gzip = gzipSync(bytes, { level: constants.Z_BEST_COMPRESSION });
  if (brotli.length < bytes.length) writeFileSync(`${path}.br`, brotli);
  if (gzip.length < bytes.length) writeFileSync(`${path}.gz`, gzip);
}

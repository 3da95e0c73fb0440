// Starts `orchard serve` on a synthetic model for a test and stops it afterwards.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';

// Multiplies the waits and timeouts a test sets itself: scripts/test-arm64-all.sh sets it for
// the run under qemu-user, several times slower than a native one.
export const timeoutFactor = Number(process.env.ORCHARD_TEST_TIMEOUT_FACTOR ?? 1) || 1;

// Writes a tiny synthetic model (`orchard make-model`) and serves it with --port 0; resolves
// when the server printed its address. `extra`: more `orchard serve` flags.
// The URL a server process prints once it listens ("listening on http://..."); rejects when it
// exits first.
export function listeningUrl(child, name) {
  let out = '';
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`${name} exited with ${code} before listening`)));
  });
}

export async function startServer(orchard, { arch = 'llama', extra = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-serve-'));
  const model = join(dir, `${arch}-tiny.gguf`);
  execFileSync(orchard, ['make-model', '--arch', arch, '--shape', 'tiny', '--type', 'q8_0', '-o', model], { stdio: 'inherit' });
  // One kernel thread: on a machine busy with other work (CI), a pool's threads wait on each
  // other's time slices; the tiny model needs no more.
  const child = spawn(orchard, ['serve', '-m', model, '--port', '0', '--alias', 'tiny', '--threads', '1', ...extra], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await listeningUrl(child, 'orchard serve');
  return {
    url,
    baseURL: `${url}/v1`,
    // The exit code; a server that already ended (a rank failed) says so at once, where waiting
    // for its exit event would wait for ever.
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) {
        rmSync(dir, { recursive: true, force: true });
        return child.exitCode ?? child.signalCode;
      }
      child.kill('SIGTERM');
      const [code] = await once(child, 'exit');
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

// The value of a Prometheus sample line, e.g. metric(text, 'orchard_queue_depth').
export function metric(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

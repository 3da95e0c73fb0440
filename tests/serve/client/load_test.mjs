// Load: 16 clients at once through 4 slots, streamed and not, greedy and seeded; each answer must
// equal the answer to the same request made alone, so nothing is dropped or mixed up.
//   node load_test.mjs PATH/TO/orchard
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metric } from './server.mjs';

const orchard = process.argv[2];
const kClients = 16;
let server;
let client;

before(async () => {
  server = await startServer(orchard, { extra: ['--parallel', '4', '--queue', '16'] });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

function request(i) {
  const sampled = i % 2 === 1;
  return {
    model: 'tiny',
    messages: [{ role: 'user', content: `Client ${i} asks about tree number ${i * 7}.` }],
    max_tokens: 24 + (i % 5) * 8,
    temperature: sampled ? 0.9 : 0,
    ...(sampled ? { seed: 1000 + i } : {}),
  };
}

// Usage without prompt_tokens_details: how much of a prompt the prompt cache held depends on
// what the slots served before, not on the answer (which must be the same either way).
function counts(usage) {
  const { prompt_tokens_details: details, ...rest } = usage;
  assert.ok(details.cached_tokens >= 0 && details.cached_tokens < usage.prompt_tokens, JSON.stringify(usage));
  return rest;
}

async function ask(i, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(request(i));
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: counts(r.usage) };
  }
  let text = '';
  let finish = null;
  let usage = null;
  const s = await client.chat.completions.create({ ...request(i), stream: true, stream_options: { include_usage: true } });
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage: counts(usage) };
}

test(`${kClients} concurrent clients get what they get alone`, async () => {
  const alone = [];
  for (let i = 0; i < kClients; i++) alone.push(await ask(i, false));
  const started = Date.now();
  const together = await Promise.all(Array.from({ length: kClients }, (_, i) => ask(i, i % 3 === 0)));
  const seconds = (Date.now() - started) / 1000;
  for (let i = 0; i < kClients; i++) assert.deepEqual(together[i], alone[i], `client ${i}`);
  const texts = new Set(alone.map((a) => a.text));
  assert.ok(texts.size > kClients / 2, 'the requests differ, so a mix-up would show');

  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.equal(metric(metrics, 'orchard_queue_depth'), 0);
  assert.equal(metric(metrics, 'orchard_active_slots'), 0);
  assert.equal(metric(metrics, 'orchard_requests_total{status="200"}'), 2 * kClients);
  const generated = alone.reduce((n, a) => n + a.usage.completion_tokens, 0);
  assert.equal(metric(metrics, 'orchard_tokens_generated_total'), 2 * generated);
  console.log(`# ${kClients} concurrent chats, ${generated} tokens, in ${seconds.toFixed(2)} s`);
});

// `orchard serve --world 2`: a model split over two local ranks answers exactly what one process
// answers (greedy), concurrent requests (batched on every rank) exactly what each gets alone, keeps its followers alive through idle periods longer than the comm timeout,
// reports every rank's forward time in /metrics,
// and stops cleanly on SIGTERM.
//   node split_test.mjs PATH/TO/orchard
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { startServer, timeoutFactor } from './server.mjs';

const orchard = process.argv[2];
let single;
let split;
let tensor;
// Short, so that the idle test below is quick; emulated runs scale it (a busy rank under qemu-user
// can take longer than 2 s to answer).
const commTimeout = 2 * timeoutFactor;

before(async () => {
  [single, split, tensor] = await Promise.all([
    startServer(orchard, { arch: 'qwen2' }),
    startServer(orchard, { arch: 'qwen2', extra: ['--world', '2', '--strategy', 'pipeline', '--comm-timeout', String(commTimeout)] }),
    startServer(orchard, { arch: 'qwen2', extra: ['--world', '2', '--strategy', 'tensor', '--comm-timeout', String(commTimeout)] }),
  ]);
});
after(async () => {
  assert.equal(await single.stop(), 0, 'the single server stops cleanly');
  assert.equal(await split.stop(), 0, 'the split server stops cleanly on SIGTERM');
  assert.equal(await tensor.stop(), 0, 'the tensor split server stops cleanly on SIGTERM');
});

const client = (server) => new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
const ask = (server, content) =>
  client(server).chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0,
  });

for (const [name, server] of [['pipeline', () => split], ['tensor', () => tensor]]) {
  test(`the ${name} split server answers like one process, several requests at once`, async () => {
    const prompts = ['Tell me about apples.', 'What is a pear?', 'Count to five.'];
    const [alone, together] = await Promise.all([
      Promise.all(prompts.map((p) => ask(single, p))),
      Promise.all(prompts.map((p) => ask(server(), p))),
    ]);
    for (let i = 0; i < prompts.length; i++) {
      assert.equal(together[i].choices[0].message.content, alone[i].choices[0].message.content, prompts[i]);
      // Without prompt_tokens_details: what the prompt cache held depends on request timing.
      assert.deepEqual({ ...together[i].usage, prompt_tokens_details: null }, { ...alone[i].usage, prompt_tokens_details: null });
    }
    // Concurrent requests share one batched pass per round on every rank (one kEvalBatch
    // command); a request alone is one slot's eval each round: both give the same answer.
    for (let i = 0; i < prompts.length; i++) {
      const one_slot = await ask(server(), prompts[i]);
      assert.equal(one_slot.choices[0].message.content, together[i].choices[0].message.content, prompts[i]);
    }
  });
}

test('a prompt prefix reused or copied from a busy slot answers as computed, on every rank', async () => {
  const long = `Tell me about the orchard: ${'apples, pears, plums and cherries, '.repeat(8)}`;
  const first = ask(split, `${long}and the first tree.`);
  await sleep(300);  // the first request's prompt evaluated: its slot is busy and holds the prefix
  const [second, alone] = await Promise.all([ask(split, `${long}and the second tree.`), ask(single, `${long}and the second tree.`)]);
  await first;
  assert.equal(second.choices[0].message.content, alone.choices[0].message.content);
  console.log(`# the second request found ${second.usage.prompt_tokens_details.cached_tokens} of ${second.usage.prompt_tokens} prompt positions cached`);
});

test('followers outlive an idle period longer than the comm timeout', async () => {
  await sleep(1500 * commTimeout);
  const [a, b] = await Promise.all([ask(single, 'Still there?'), ask(split, 'Still there?')]);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test('/metrics reports the forward time of every rank', async () => {
  await sleep(750 * commTimeout);  // idle: a report comes with the next heartbeat
  const text = await (await fetch(`${split.url}/metrics`)).text();
  for (const rank of [0, 1]) {
    const line = text.split('\n').find((l) => l.startsWith(`orchard_rank_forward_seconds_total{rank="${rank}"} `));
    assert.ok(line, `no line for rank ${rank} in:\n${text}`);
    assert.ok(Number(line.split(' ')[1]) > 0, line);
  }
});

// The official OpenAI client against `orchard serve`: chat and text completions, streamed and
// not, the models list, and how errors map to the client's exception classes.
//   node api_test.mjs PATH/TO/orchard
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metric } from './server.mjs';

const orchard = process.argv[2];
let server;
let client;

before(async () => {
  server = await startServer(orchard, { extra: ['--parallel', '2'] });
  client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal(await server.stop(), 0, 'the server stops cleanly on SIGTERM');
});

const messages = [
  { role: 'system', content: 'You are brief.' },
  { role: 'user', content: 'Tell me about orchards.' },
];

test('models list names the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, 'tiny');
  assert.equal(models[0].object, 'model');
});

test('chat completion, whole and streamed, agree', async () => {
  const whole = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices.length, 1);
  const choice = whole.choices[0];
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(['stop', 'length'].includes(choice.finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0);
  assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 20);
  assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);

  const stream = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(text, choice.message.content);
  assert.equal(finish, choice.finish_reason);
  // The same prompt again: the prompt cache held all of it but the last position.
  assert.equal(whole.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens - 1);
  assert.deepEqual({ ...usage, prompt_tokens_details: null }, { ...whole.usage, prompt_tokens_details: null });
});

test('text completion, whole and streamed, agree; stop strings cut the text', async () => {
  const request = { model: 'tiny', prompt: 'The orchard in spring', max_tokens: 24, temperature: 0 };
  const whole = await client.completions.create(request);
  assert.equal(whole.object, 'text_completion');
  const text = whole.choices[0].text;
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...request, stream: true })) {
    assert.equal(chunk.object, 'text_completion');
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, text);

  assert.ok(text.length >= 4, `long enough to cut: ${JSON.stringify(text)}`);
  const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 2);
  const cut = await client.completions.create({ ...request, stop: [stop] });
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('a seed makes sampling repeatable', async () => {
  const request = { model: 'tiny', messages, max_tokens: 16, temperature: 1.0, top_p: 0.9, seed: 42 };
  const a = await client.chat.completions.create(request);
  const b = await client.chat.completions.create(request);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test('errors map to the client exception classes', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages }), (e) => {
    assert.ok(e instanceof OpenAI.NotFoundError);
    assert.equal(e.code, 'model_not_found');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages, max_tokens: 'ten' }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.param, 'max_tokens');
    assert.equal(e.type, 'invalid_request_error');
    return true;
  });
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [] }), OpenAI.BadRequestError);
  await assert.rejects(client.completions.create({ model: 'tiny', prompt: 'long story '.repeat(400) }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError);
    assert.equal(e.code, 'context_length_exceeded');
    return true;
  });
  await assert.rejects(client.get('/nothing-here'), OpenAI.NotFoundError);
  // Raw bodies the client would never send.
  for (const body of ['{"messages": [', 'null', '[]', '{"messages": [{"role": "user", "content": 1}]}']) {
    const res = await fetch(`${server.baseURL}/chat/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 400, body);
    const j = await res.json();
    assert.equal(j.error.type, 'invalid_request_error', body);
  }
});

test('health and metrics', async () => {
  const health = await (await fetch(`${server.url}/health`)).json();
  assert.equal(health.status, 'ok');
  assert.equal(health.slots, 2);
  const text = await (await fetch(`${server.url}/metrics`)).text();
  assert.ok(metric(text, 'orchard_tokens_generated_total') > 0);
  assert.equal(metric(text, 'orchard_queue_depth'), 0);
  assert.ok(metric(text, 'orchard_requests_total{status="400"}') >= 4);
});

test('a qwen2 model is served with the ChatML template', async () => {
  const qwen = await startServer(orchard, { arch: 'qwen2' });
  try {
    const health = await (await fetch(`${qwen.url}/health`)).json();
    assert.equal(health.chat_template, 'chatml');
    const qclient = new OpenAI({ baseURL: qwen.baseURL, apiKey: 'unused', maxRetries: 0 });
    const r = await qclient.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, temperature: 0 });
    assert.ok(r.usage.completion_tokens >= 1);
  } finally {
    assert.equal(await qwen.stop(), 0);
  }
});

// The official Ollama client (npm `ollama`) against `orchard serve`: list, show, chat and
// generate (streamed and not), errors as the client's ResponseError, and a greedy reply equal to
// the OpenAI route's for the same messages.
//   node ollama_test.mjs PATH/TO/orchard
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { startServer } from './server.mjs';

const orchard = process.argv[2];
let server;
let ollama;
let openai;

before(async () => {
  server = await startServer(orchard, { extra: ['--parallel', '2', '-c', '2048'] });  // room for the tool definitions
  ollama = new Ollama({ host: server.url });
  openai = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal(await server.stop(), 0, 'the server stops cleanly on SIGTERM');
});

const messages = [
  { role: 'system', content: 'You are brief.' },
  { role: 'user', content: 'Tell me about orchards.' },
];
// Greedy, seeded, and without Ollama's default repetition penalty (1.1), which OpenAI's API has not.
const greedy = { temperature: 0, seed: 42, num_predict: 20, repeat_penalty: 1 };

function checkDurations(r) {
  for (const name of ['total_duration', 'prompt_eval_duration', 'eval_duration']) {
    assert.ok(Number.isInteger(r[name]) && r[name] > 0, `${name}: ${r[name]}`);
  }
  assert.equal(r.load_duration, 0);
  assert.ok(r.total_duration >= r.prompt_eval_duration + r.eval_duration);
  assert.ok(r.total_duration < 60e9, 'nanoseconds');
  assert.ok(!Number.isNaN(Date.parse(r.created_at)), r.created_at);
}

test('list and show describe the served model', async () => {
  const { models } = await ollama.list();
  assert.equal(models.length, 1);
  assert.equal(models[0].name, 'tiny:latest');
  assert.equal(models[0].details.format, 'gguf');
  assert.equal(models[0].details.family, 'llama');
  assert.equal(models[0].details.quantization_level, 'Q8_0');
  assert.ok(models[0].size > 0);

  const show = await ollama.show({ model: 'tiny' });
  assert.equal(show.details.family, 'llama');
  assert.equal(show.model_info['general.architecture'], 'llama');
  assert.ok(show.model_info['general.parameter_count'] > 0);

  const { models: running } = await ollama.ps();
  assert.equal(running[0].name, 'tiny:latest');
  assert.equal(typeof (await ollama.version()).version, 'string');
});

test('chat, whole and streamed, agree; a greedy reply equals the OpenAI route\'s', async () => {
  const whole = await ollama.chat({ model: 'tiny', messages, options: greedy });
  assert.equal(whole.model, 'tiny:latest');
  assert.equal(whole.message.role, 'assistant');
  assert.equal(whole.done, true);
  assert.ok(['stop', 'length'].includes(whole.done_reason));
  assert.ok(whole.prompt_eval_count > 0);
  assert.ok(whole.eval_count > 0 && whole.eval_count <= 20);
  checkDurations(whole);

  let text = '';
  let last = null;
  let parts = 0;
  for await (const part of await ollama.chat({ model: 'tiny:latest', messages, options: greedy, stream: true })) {
    parts++;
    text += part.message.content;
    if (part.done) last = part;
  }
  // Text that came while the previous line was written goes out as one line, so a reply that a
  // fast model finishes before the first write is one content line and the last: at least two.
  assert.ok(parts >= 2, `${parts} parts`);
  assert.equal(text, whole.message.content);
  assert.equal(last.done_reason, whole.done_reason);
  assert.equal(last.eval_count, whole.eval_count);
  assert.equal(last.prompt_eval_count, whole.prompt_eval_count);
  checkDurations(last);

  const reference = await openai.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 0, seed: 42 });
  assert.equal(whole.message.content, reference.choices[0].message.content);
  assert.equal(whole.done_reason, reference.choices[0].finish_reason);
  assert.equal(whole.prompt_eval_count, reference.usage.prompt_tokens);
  assert.equal(whole.eval_count, reference.usage.completion_tokens);
});

test('generate, whole and streamed, agree; seeds repeat; stop strings cut', async () => {
  const whole = await ollama.generate({ model: 'tiny', prompt: 'Tell me about orchards.', options: greedy });
  assert.equal(typeof whole.response, 'string');
  assert.equal(whole.done, true);
  checkDurations(whole);
  let text = '';
  for await (const part of await ollama.generate({ model: 'tiny', prompt: 'Tell me about orchards.', options: greedy, stream: true })) {
    text += part.response;
  }
  assert.equal(text, whole.response);
  // Without "raw" the prompt is a user turn of the chat template: the same reply as chat.
  const chat = await ollama.chat({ model: 'tiny', messages: [{ role: 'user', content: 'Tell me about orchards.' }], options: greedy });
  assert.equal(whole.response, chat.message.content);

  const sampled = { temperature: 1, seed: 9, num_predict: 16 };
  const a = await ollama.generate({ model: 'tiny', prompt: 'The orchard', raw: true, options: sampled });
  const b = await ollama.generate({ model: 'tiny', prompt: 'The orchard', raw: true, options: sampled });
  assert.equal(a.response, b.response);

  assert.ok(a.response.length >= 4, JSON.stringify(a.response));
  const stop = a.response.slice(2, 4);
  const cut = await ollama.generate({ model: 'tiny', prompt: 'The orchard', raw: true, options: { ...sampled, stop: [stop] } });
  assert.equal(cut.response, a.response.slice(0, a.response.indexOf(stop)));
  assert.equal(cut.done_reason, 'stop');
});

test('errors reach the client as ResponseError with the server\'s message', async () => {
  await assert.rejects(ollama.chat({ model: 'llama3', messages }), (e) => {
    assert.equal(e.name, 'ResponseError');
    assert.equal(e.status_code, 404);
    assert.match(e.error, /'llama3' does not exist/);
    return true;
  });
  await assert.rejects(ollama.chat({ model: 'tiny', messages, options: { temperature: 'hot' } }), (e) => {
    assert.equal(e.status_code, 400);
    assert.match(e.error, /'options.temperature' must be a number/);
    return true;
  });
  await assert.rejects(ollama.chat({ model: 'tiny', messages, format: { type: 'object', patternProperties: {} } }), (e) => {
    assert.equal(e.status_code, 400);
    assert.match(e.error, /'format' is not supported/);
    return true;
  });
  await assert.rejects(ollama.pull({ model: 'tiny' }), (e) => e.status_code === 404);
});

// `format` as Ollama's clients send it: "json" or a schema; every sampled answer must parse and
// validate (ajv, an independent validator), streamed or whole.
test('format json and a schema: every sampled answer parses and validates', async () => {
  const ajv = new Ajv({ strict: false });
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', maxLength: 10 }, trees: { type: 'integer' }, fruit: { enum: ['apple', 'pear'] } },
    required: ['name', 'trees', 'fruit'],
    additionalProperties: false,
  };
  for (let seed = 1; seed <= 6; seed++) {
    const options = { temperature: 1, seed, num_predict: 400 };
    // Free JSON has no bound on its strings: an answer cut at num_predict is a valid prefix.
    const json = await ollama.chat({ model: 'tiny', messages, format: 'json', options });
    if (json.done_reason !== 'length') {
      const any = JSON.parse(json.message.content);
      assert.ok(any !== null && typeof any === 'object' && !Array.isArray(any), json.message.content);
    }

    const prompt = 'Describe an orchard as JSON.';
    const whole = await ollama.generate({ model: 'tiny', prompt, format: schema, options });
    assert.ok(ajv.validate(schema, JSON.parse(whole.response)), `${whole.response}: ${ajv.errorsText()}`);
    let streamed = '';
    for await (const part of await ollama.generate({ model: 'tiny', prompt, format: schema, options, stream: true })) streamed += part.response;
    assert.equal(streamed, whole.response);
  }
});

test('tools are offered and a tool result round trip is answered', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const show = await ollama.show({ model: 'tiny' });
  assert.ok(show.capabilities.includes('tools'));
  // The model decides whether to call (Ollama has no tool_choice); a call, if any, must name an
  // offered tool with object arguments.
  const first = await ollama.chat({ model: 'tiny', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools, options: greedy });
  for (const call of first.message.tool_calls ?? []) {
    assert.equal(call.function.name, 'get_weather');
    assert.equal(typeof call.function.arguments, 'object');
  }
  const roundTrip = [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Oslo' } } }] },
    { role: 'tool', content: '-3 C and snow', tool_name: 'get_weather' },
  ];
  const answer = await ollama.chat({ model: 'tiny', messages: roundTrip, tools, options: greedy });
  assert.equal(answer.done, true);
  assert.ok(answer.prompt_eval_count > 0);
  // The tool turn is rendered into the prompt: a longer prompt than the question alone.
  assert.ok(answer.prompt_eval_count > first.prompt_eval_count, `${answer.prompt_eval_count} vs ${first.prompt_eval_count}`);
});

// Streamed tool calls through the official OpenAI client's streaming helper
// (client.chat.completions.stream): in every chat template's tool style — Hermes (Llama 2 and
// ChatML), Llama 3, Mistral, DeepSeek and gpt-oss's Harmony — a call's arguments arrive in pieces
// (tool_calls.function.arguments.delta events), add up to the arguments of the whole answer, and
// validate against the function's schema (ajv, an independent validator).
//   node tool_stream_test.mjs PATH/TO/orchard
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { startServer } from './server.mjs';

const orchard = process.argv[2];
const ajv = new Ajv({ strict: false });

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const clock = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 6 } }, required: ['zone'] } },
};
const tools = [weather, clock];

const styles = [
  ['hermes (llama2)', { extra: ['-c', '1024'] }, 'llama2'],
  ['llama3', { extra: ['-c', '1024', '--chat-template', 'llama3'] }, 'llama3'],
  ['mistral', { extra: ['-c', '1024', '--chat-template', 'mistral'] }, 'mistral'],
  ['deepseek', { extra: ['-c', '1024', '--chat-template', 'deepseek'] }, 'deepseek'],
  ['harmony (gpt-oss)', { arch: 'gpt-oss', extra: ['-c', '1024'] }, 'harmony'],
];

for (const [label, options, template] of styles) {
  test(`${label}: a streamed call's arguments come in pieces and add up to the whole answer's`, async () => {
    const server = await startServer(orchard, options);
    try {
      assert.match(await (await fetch(`${server.url}/health`)).text(), new RegExp(`"chat_template":"${template}"`));
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
      for (const seed of [1, 2]) {
        const request = { model: 'tiny', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools, tool_choice: 'required', temperature: 1, seed };
        const whole = await client.chat.completions.create(request);
        assert.equal(whole.choices[0].finish_reason, 'tool_calls');
        const expected = whole.choices[0].message.tool_calls[0];

        // The server sends what was generated since its last write, so a writer thread kept
        // off the CPU while the whole call is written (another test busy on both cores) sends it
        // in one piece: the same seed streams the same call again, up to three times.
        let pieces, done, final;
        for (let attempt = 0; attempt < 3 && !(pieces?.length > 1); ++attempt) {
          const stream = client.chat.completions.stream(request);
          pieces = [];
          done = null;
          stream.on('tool_calls.function.arguments.delta', (e) => pieces.push(e.arguments_delta));
          stream.on('tool_calls.function.arguments.done', (e) => { done = e; });
          final = await stream.finalChatCompletion();
        }
        const call = final.choices[0].message.tool_calls[0];
        assert.equal(final.choices[0].finish_reason, 'tool_calls');
        assert.equal(final.choices[0].message.tool_calls.length, 1);
        assert.ok(pieces.length > 1, `the arguments came in ${pieces.length} piece(s)`);
        assert.equal(pieces.join(''), call.function.arguments);
        assert.equal(done.name, call.function.name);
        assert.equal(done.arguments, call.function.arguments);
        // The same seed: the same call as the whole answer's.
        assert.equal(call.function.name, expected.function.name);
        assert.equal(call.function.arguments, expected.function.arguments);
        assert.equal(call.id.length > 0, true);
        const tool = tools.find((t) => t.function.name === call.function.name);
        assert.ok(tool, call.function.name);
        assert.ok(ajv.validate(tool.function.parameters, JSON.parse(call.function.arguments)), `${call.function.arguments}: ${ajv.errorsText()}`);
        assert.equal(final.choices[0].message.content ?? '', '');
      }
      // The call and its result fed back render in the template's style and are answered.
      const first = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: 'required', temperature: 0 });
      const call = first.choices[0].message.tool_calls[0];
      const followUp = [{ role: 'user', content: 'Weather?' }, first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 3}' }];
      const second = await client.chat.completions.create({ model: 'tiny', messages: followUp, tools, max_tokens: 8, temperature: 0 });
      assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
    } finally {
      assert.equal(await server.stop(), 0);
    }
  });
}

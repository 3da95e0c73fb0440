// Reasoning and Mistral's newer tool calls as the official clients read them: a server whose model
// is scripted (serve_scripted_server: every reply is the given text, all else `orchard serve`'s own)
// answers with what a reasoning model writes, and
//   - DeepSeek R1 / Qwen3's <think>...</think> comes out as OpenAI's reasoning_content (whole and
//     streamed) and Ollama's message.thinking / thinking, left out with Ollama's think: false;
//   - gpt-oss's analysis channel likewise, its reasoning effort (OpenAI's reasoning_effort,
//     Ollama's think: "low") written into the prompt's system message, a bad one a 400;
//   - DeepSeek R1's newer template opens the think block itself (the prompt ends in "<think>\n"):
//     the reply, which starts inside its reasoning, is split the same way;
//   - Mistral v11's [TOOL_CALLS]NAME[ARGS]{...} comes out as tool_calls, whole and streamed.
//   node reasoning_test.mjs PATH/TO/orchard PATH/TO/serve_scripted_server
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { listeningUrl } from './server.mjs';

const [orchard, scripted] = process.argv.slice(2);

// A synthetic model's file (its tokenizer and chat template family) served with a scripted reply.
// `jinja`: a chat template the model file is served as if it carried.
async function startScripted({ arch, reply, template = 'auto', jinja }) {
  const dir = mkdtempSync(join(tmpdir(), 'orchard-scripted-'));
  if (jinja) {
    template = join(dir, 'template.jinja');
    writeFileSync(template, jinja);
  }
  const model = join(dir, `${arch}.gguf`);
  const log = join(dir, 'prompts.txt');
  execFileSync(orchard, ['make-model', '--arch', arch, '--shape', 'tiny', '--type', 'q8_0', '-o', model], { stdio: 'ignore' });
  const child = spawn(scripted, [model, reply, template, log], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await listeningUrl(child, 'serve_scripted_server');
  return {
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }),
    ollama: new Ollama({ host: url }),
    // The last prompt the model was given, as text.
    lastPrompt: () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n---\n').filter((p) => p).at(-1) : ''),
    async stop() {
      child.kill('SIGTERM');
      const [code] = await once(child, 'exit');
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

const hi = [{ role: 'user', content: 'Hi' }];

// OpenAI's streamed deltas, each kind joined.
async function streamed(client, request) {
  let reasoning = '', content = '', chunks = 0;
  for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
    const delta = chunk.choices[0]?.delta ?? {};
    reasoning += delta.reasoning_content ?? '';
    content += delta.content ?? '';
    chunks++;
  }
  return { reasoning, content, chunks };
}

// Ollama's streamed lines, joined.
async function ollamaStreamed(stream, field = (p) => p.message) {
  let thinking = '', content = '', thinkingLines = 0;
  for await (const part of stream) {
    const m = field(part);
    if (m.thinking) thinkingLines++;
    thinking += m.thinking ?? '';
    content += m.content ?? m.response ?? '';
  }
  return { thinking, content, thinkingLines };
}

test('a <think> block (Qwen3, DeepSeek R1) is reasoning_content and Ollama\'s thinking', async () => {
  for (const arch of ['qwen3', 'deepseek2']) {
    const server = await startScripted({ arch, reply: '<think>\nThe user greets me. I greet back.\n</think>\n\nHello there!' });
    try {
      const whole = await server.openai.chat.completions.create({ model: 'tiny', messages: hi });
      assert.equal(whole.choices[0].message.reasoning_content, 'The user greets me. I greet back.', arch);
      assert.equal(whole.choices[0].message.content, 'Hello there!');
      assert.equal(whole.choices[0].finish_reason, 'stop');
      const s = await streamed(server.openai, { model: 'tiny', messages: hi });
      assert.equal(s.reasoning, 'The user greets me. I greet back.');
      assert.equal(s.content, 'Hello there!');
      // Text that arrives while the previous event is written goes out together: a scripted reply
      // may be one update, still a reasoning event, a content event and the last.
      assert.ok(s.chunks >= 3, `${s.chunks} chunks`);

      const chat = await server.ollama.chat({ model: 'tiny', messages: hi });
      assert.equal(chat.message.thinking, 'The user greets me. I greet back.');
      assert.equal(chat.message.content, 'Hello there!');
      const chatStream = await ollamaStreamed(await server.ollama.chat({ model: 'tiny', messages: hi, think: true, stream: true }));
      assert.equal(chatStream.thinking, 'The user greets me. I greet back.');
      assert.equal(chatStream.content, 'Hello there!');
      assert.ok(chatStream.thinkingLines >= 1);
      const generated = await server.ollama.generate({ model: 'tiny', prompt: 'Hi' });
      assert.equal(generated.thinking, 'The user greets me. I greet back.');
      assert.equal(generated.response, 'Hello there!');
      const generatedStream = await ollamaStreamed(await server.ollama.generate({ model: 'tiny', prompt: 'Hi', stream: true }), (p) => p);
      assert.equal(generatedStream.thinking, 'The user greets me. I greet back.');
      assert.equal(generatedStream.content, 'Hello there!');

      // think: false leaves the thinking out, whole and streamed.
      const quiet = await server.ollama.chat({ model: 'tiny', messages: hi, think: false });
      assert.equal(quiet.message.thinking, undefined);
      assert.equal(quiet.message.content, 'Hello there!');
      const quietStream = await ollamaStreamed(await server.ollama.chat({ model: 'tiny', messages: hi, think: false, stream: true }));
      assert.equal(quietStream.thinking, '');
      assert.equal(quietStream.content, 'Hello there!');
      await assert.rejects(server.ollama.chat({ model: 'tiny', messages: hi, think: 'max' }), (e) => {
        assert.equal(e.status_code, 400);
        assert.match(e.error, /'think' must be true, false, "low", "medium" or "high", not "max"/);
        return true;
      });
    } finally {
      assert.equal(await server.stop(), 0);
    }
  }
});

// The parts of DeepSeek R1's newer chat template (R1-0528's) that shape this prompt: its
// generation prompt opens the think block, so the model's reply has no <think> of its own.
const r1Template = "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}" +
  "{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' %}" +
  "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}" +
  "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";

test('DeepSeek R1\'s newer template: the reply starts inside its reasoning', async () => {
  const server = await startScripted({ arch: 'deepseek2', jinja: r1Template, reply: 'The user greets me.\n</think>\n\nHello there!' });
  try {
    const whole = await server.openai.chat.completions.create({ model: 'tiny', messages: hi });
    assert.equal(whole.choices[0].message.reasoning_content, 'The user greets me.');
    assert.equal(whole.choices[0].message.content, 'Hello there!');
    assert.ok(server.lastPrompt().endsWith('<｜User｜>Hi<｜Assistant｜><think>\n'), JSON.stringify(server.lastPrompt()));
    const s = await streamed(server.openai, { model: 'tiny', messages: hi });
    assert.equal(s.reasoning, 'The user greets me.');
    assert.equal(s.content, 'Hello there!');

    const chat = await server.ollama.chat({ model: 'tiny', messages: hi });
    assert.equal(chat.message.thinking, 'The user greets me.');
    assert.equal(chat.message.content, 'Hello there!');
    const chatStream = await ollamaStreamed(await server.ollama.chat({ model: 'tiny', messages: hi, stream: true }));
    assert.equal(chatStream.thinking, 'The user greets me.');
    assert.equal(chatStream.content, 'Hello there!');
    const quiet = await server.ollama.chat({ model: 'tiny', messages: hi, think: false });
    assert.equal(quiet.message.thinking, undefined);
    assert.equal(quiet.message.content, 'Hello there!');
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('gpt-oss: the analysis channel is reasoning; the reasoning effort reaches the system message', async () => {
  const server = await startScripted({
    arch: 'gpt-oss',
    reply: '<|channel|>analysis<|message|>Need a greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hi!',
  });
  try {
    const whole = await server.openai.chat.completions.create({ model: 'tiny', messages: hi, reasoning_effort: 'high' });
    assert.equal(whole.choices[0].message.reasoning_content, 'Need a greeting.');
    assert.equal(whole.choices[0].message.content, 'Hi!');
    assert.match(server.lastPrompt(), /<\|start\|>system<\|message\|>[^]*\nReasoning: high\n/);
    const s = await streamed(server.openai, { model: 'tiny', messages: hi });
    assert.equal(s.reasoning, 'Need a greeting.');
    assert.equal(s.content, 'Hi!');
    assert.match(server.lastPrompt(), /\nReasoning: medium\n/);
    await assert.rejects(server.openai.chat.completions.create({ model: 'tiny', messages: hi, reasoning_effort: 'extreme' }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, 'reasoning_effort');
      assert.match(e.message, /'reasoning_effort' must be low, medium or high, not 'extreme'/);
      return true;
    });

    const chat = await server.ollama.chat({ model: 'tiny', messages: hi, think: 'low' });
    assert.equal(chat.message.thinking, 'Need a greeting.');
    assert.equal(chat.message.content, 'Hi!');
    assert.match(server.lastPrompt(), /\nReasoning: low\n/);
    const show = await server.ollama.show({ model: 'tiny' });
    assert.ok(show.capabilities.includes('thinking'), JSON.stringify(show.capabilities));
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('Mistral v11: [TOOL_CALLS]NAME[ARGS]{...} is a tool call, whole and streamed', async () => {
  const tools = [{
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  }];
  const server = await startScripted({ arch: 'qwen3', reply: '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}', template: 'mistral' });
  try {
    const request = { model: 'tiny', messages: [{ role: 'user', content: 'Weather in Oslo?' }], tools };
    const whole = await server.openai.chat.completions.create(request);
    assert.equal(whole.choices[0].finish_reason, 'tool_calls');
    assert.equal(whole.choices[0].message.content, null);
    const [call] = whole.choices[0].message.tool_calls;
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Oslo' });
    // The tools stand before the user's turn, as Mistral's template puts them.
    assert.match(server.lastPrompt(), /\[AVAILABLE_TOOLS\] \[\{"type":"function","function":\{"name":"get_weather"[^]*\[\/AVAILABLE_TOOLS\]\[INST\] Weather in Oslo\? \[\/INST\]$/);

    const stream = server.openai.chat.completions.stream(request);
    const pieces = [];
    stream.on('tool_calls.function.arguments.delta', (e) => pieces.push(e.arguments_delta));
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0].finish_reason, 'tool_calls');
    assert.equal(final.choices[0].message.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(pieces.join('')), { city: 'Oslo' });

    const chat = await server.ollama.chat(request);
    assert.deepEqual(chat.message.tool_calls[0].function, { index: 0, name: 'get_weather', arguments: { city: 'Oslo' } });
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

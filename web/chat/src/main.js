// The chat page: talks to the server it came from through the OpenAI routes (/v1/models,
// /v1/chat/completions streamed as server-sent events) and keeps the conversation in
// localStorage, so a reload shows it again.
import "./style.css";

const kStore = "orchard.chat.v1";
const $ = (id) => document.getElementById(id);
const log = $("log"), input = $("input"), picker = $("model"), status = $("status");
const send = $("send"), stop = $("stop"), keyInput = $("api-key");

// { model, messages: [{ role, content, meta? }] }: meta is what the page shows under a reply.
let state = load();
let controller = null; // the reply in progress, while there is one

function load() {
  try {
    const s = JSON.parse(localStorage.getItem(kStore) || "null");
    if (s && Array.isArray(s.messages)) return s;
  } catch { /* a damaged entry starts a new conversation */ }
  return { model: "", messages: [] };
}
function save() { localStorage.setItem(kStore, JSON.stringify(state)); }

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = localStorage.getItem(kStore + ".key");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// A 401 shows the key field; a key typed there is kept for the next requests.
function needKey() {
  keyInput.hidden = false;
  status.textContent = "This server wants an API key.";
}
keyInput.addEventListener("change", () => {
  localStorage.setItem(kStore + ".key", keyInput.value.trim());
  status.textContent = "";
  loadModels();
});

function bubble(message) {
  const el = document.createElement("div");
  el.className = `message ${message.role}`;
  el.dataset.role = message.role;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = message.content;
  el.append(text);
  const meta = document.createElement("span");
  meta.className = "meta";
  meta.textContent = message.meta || "";
  meta.hidden = !message.meta;
  el.append(meta);
  log.append(el);
  log.scrollTop = log.scrollHeight;
  return { el, text, meta };
}

function render() {
  log.replaceChildren();
  for (const m of state.messages) bubble(m);
}

async function loadModels() {
  const res = await fetch("/v1/models", { headers: headers() });
  if (res.status === 401) return needKey();
  if (!res.ok) { status.textContent = `Could not list the models: HTTP ${res.status}`; return; }
  const { data } = await res.json();
  picker.replaceChildren(...data.map((m) => new Option(m.id, m.id)));
  if (data.some((m) => m.id === state.model)) picker.value = state.model;
  state.model = picker.value;
  save();
}
picker.addEventListener("change", () => { state.model = picker.value; save(); });

// Yields the JSON of each server-sent event until "[DONE]".
async function* events(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue; // ": keep-alive" comments
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

function rate(tokens, seconds) { return seconds > 0 ? `${(tokens / seconds).toFixed(1)} tok/s` : ""; }

async function ask(text) {
  state.messages.push({ role: "user", content: text });
  bubble(state.messages.at(-1));
  const reply = { role: "assistant", content: "" };
  const view = bubble(reply);
  const history = state.messages.map(({ role, content }) => ({ role, content }));
  state.messages.push(reply);
  save();

  controller = new AbortController();
  send.hidden = true;
  stop.hidden = false;
  status.textContent = "";
  const started = performance.now();
  let first = 0, chunks = 0, usage = null, finish = "";
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify({ model: state.model, messages: history, stream: true, stream_options: { include_usage: true } }),
      signal: controller.signal,
    });
    if (res.status === 401) needKey();
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      throw new Error(body.error?.message || `HTTP ${res.status}`);
    }
    for await (const event of events(res.body)) {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) usage = event.usage;
      for (const choice of event.choices || []) {
        const delta = choice.delta?.content || "";
        if (delta) {
          if (!first) first = performance.now();
          chunks++;
          reply.content += delta;
          view.text.textContent = reply.content;
          log.scrollTop = log.scrollHeight;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else { finish = "error"; status.textContent = e.message; }
  }
  // Tokens per second of the generation, from the first token on (the prompt's time excluded);
  // a stopped reply has no usage, so its text pieces (about a token each) stand in.
  const tokens = usage ? usage.completion_tokens : chunks;
  const seconds = first ? (performance.now() - first) / 1000 : 0;
  reply.meta = [`${tokens} tokens`, rate(tokens, seconds), finish && finish !== "stop" ? finish : ""].filter(Boolean).join(" · ");
  reply.meta += ` · ${((performance.now() - started) / 1000).toFixed(1)} s`;
  view.meta.textContent = reply.meta;
  view.meta.hidden = false;
  view.el.dataset.finish = finish;
  if (finish === "error" && !reply.content) state.messages.splice(-2); // nothing to keep of a failed turn
  save();
  controller = null;
  send.hidden = false;
  stop.hidden = true;
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  ask(text);
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
stop.addEventListener("click", () => controller?.abort());
$("new-chat").addEventListener("click", () => {
  controller?.abort();
  state.messages = [];
  save();
  render();
});

render();
loadModels();

// kvloom chat page. Plain JavaScript, no framework, no network beyond this
// server: /v1/models (model id), /v1/chat/completions (streamed, SSE read from
// fetch), /metrics (KV blocks). The API key, when the server wants one, is
// asked for on the first 401, kept in localStorage and sent as
// "Authorization: Bearer". All model text goes into the page as text nodes,
// never as HTML (answers are rendered as markdown by building DOM nodes).
'use strict';

const $ = (id) => document.getElementById(id);

const store = {
  get(key, fallback) {
    try {
      const v = localStorage.getItem('kvloom.' + key);
      return v === null ? fallback : JSON.parse(v);
    } catch (e) {
      return fallback;
    }
  },
  set(key, value) {
    try {
      if (value === null) localStorage.removeItem('kvloom.' + key);
      else localStorage.setItem('kvloom.' + key, JSON.stringify(value));
    } catch (e) { /* private mode: settings last for the page only */ }
  },
};

const DEFAULTS = { system: '', temperature: 0.8, maxTokens: 512, tools: '', toolChoice: 'auto', parallel: true };

const state = {
  messages: [],      // {role, content, reasoning, toolCalls, finish, error, stopped, el}
  controller: null,  // AbortController of the running request
  settings: Object.assign({}, DEFAULTS, store.get('settings', {})),
  apiKey: store.get('apiKey', ''),
  keyDeclined: false, // the person cancelled the key dialog: background polls stop asking
  modelId: '',
};

// ---------------------------------------------------------------- API key

let keyPromise = null;

// Shows the key dialog once for every caller waiting on it; resolves true
// when a key was entered, false when cancelled.
function askKey(refused) {
  if (keyPromise) return keyPromise;
  keyPromise = new Promise((resolve) => {
    const dlg = $('key-dialog');
    $('key-error').hidden = !refused;
    $('key-input').value = '';
    const done = (ok) => {
      if (dlg.open) dlg.close();
      keyPromise = null;
      if (!ok) state.keyDeclined = true;
      resolve(ok);
    };
    $('key-form').onsubmit = (ev) => {
      ev.preventDefault();
      const key = $('key-input').value.trim();
      if (!key) {
        $('key-input').focus();
        return;
      }
      state.apiKey = key;
      state.keyDeclined = false;
      store.set('apiKey', key);
      showKeyState();
      done(true);
    };
    $('key-cancel').onclick = () => done(false);
    dlg.oncancel = (ev) => {
      ev.preventDefault();
      done(false);
    };
    dlg.showModal();
    $('key-input').focus();
  });
  return keyPromise;
}

function showKeyState() {
  $('key-state').textContent = state.apiKey ? 'saved in this browser' : 'none';
  $('btn-forget-key').hidden = !state.apiKey;
}

// fetch with the key; on 401 asks for a key (unless `background` and the
// person already declined) and tries again.
async function apiFetch(path, opts = {}, background = false) {
  for (;;) {
    const headers = Object.assign({}, opts.headers || {});
    if (state.apiKey) headers.Authorization = 'Bearer ' + state.apiKey;
    const res = await fetch(path, Object.assign({}, opts, { headers }));
    if (res.status !== 401 || (background && state.keyDeclined)) return res;
    if (!(await askKey(Boolean(state.apiKey)))) return res;
  }
}

// The message of an OpenAI error body, or the status line.
async function errorText(res) {
  let text = '';
  try {
    text = await res.text();
    const o = JSON.parse(text);
    if (o && o.error) return `${res.status}: ${o.error.message || JSON.stringify(o.error)}`;
  } catch (e) { /* not JSON */ }
  return `${res.status} ${res.statusText}${text ? ': ' + text.slice(0, 300) : ''}`;
}

// ---------------------------------------------------------------- SSE

// Calls onEvent with every JSON event of an SSE response until [DONE] or the
// end of the body.
async function readSSE(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf = (buf + decoder.decode(value, { stream: true })).replace(/\r\n?/g, '\n');
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      let ev;
      try {
        ev = JSON.parse(data);
      } catch (e) {
        continue;
      }
      onEvent(ev);
    }
  }
}

// ---------------------------------------------------------------- rendering

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function nearBottom() {
  const s = $('scroller');
  return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
}

function scrollDown() {
  const s = $('scroller');
  s.scrollTop = s.scrollHeight;
}

function addMessage(m) {
  $('empty').hidden = true;
  m.el = el('div', 'msg ' + m.role);
  m.el.append(el('div', 'role', m.role === 'user' ? 'you' : 'assistant'));
  if (m.role === 'user') {
    m.el.append(el('div', 'content', m.content));
  } else {
    const body = el('div', 'body');
    m.el.append(body);
  }
  state.messages.push(m);
  $('messages').append(m.el);
  scrollDown();
  if (m.role === 'assistant') renderAssistant(m);
}

// ---------------------------------------------------------------- markdown

// Markdown of an answer as DOM nodes: headings, paragraphs (line breaks
// kept), bullet and numbered lists (nested by indentation), block quotes,
// rules, fenced code blocks with a Copy button (an unclosed fence, while the
// answer streams, runs to the end), and inline code, **strong**, *em*,
// ~~strike~~ and [links](https://...). Every piece of model text becomes a
// text node (createTextNode / textContent), never HTML: markup in the
// answer (<script>, <img onerror=...>) shows as text, and a link is an <a>
// only for http(s) and mailto URLs.
function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  let para = null; // lines of the paragraph being gathered
  const flushPara = () => {
    if (!para) return;
    const p = el('p');
    para.forEach((l, k) => {
      if (k) p.append(el('br'));
      inline(p, l);
    });
    frag.append(p);
    para = null;
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/.exec(line))) {
      flushPara();
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !new RegExp('^ {0,3}' + fence[0] + '{' + fence.length + ',}\\s*$').test(lines[i])) body.push(lines[i++]);
      i++; // the closing fence (or the end)
      frag.append(codeBlock(body.join('\n'), m[2]));
      continue;
    }
    if ((m = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
      flushPara();
      const h = el('h' + m[1].length);
      inline(h, m[2]);
      frag.append(h);
      i++;
      continue;
    }
    if (/^ {0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flushPara();
      frag.append(el('hr'));
      i++;
      continue;
    }
    if (/^ {0,3}>/.test(line)) {
      flushPara();
      const quoted = [];
      while (i < lines.length && /^ {0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^ {0,3}> ?/, ''));
      const q = el('blockquote');
      q.append(renderMarkdown(quoted.join('\n')));
      frag.append(q);
      continue;
    }
    if (/^\s*([-*+]|\d{1,9}[.)])\s+/.test(line)) {
      flushPara();
      const items = [];
      while (i < lines.length) {
        const l = lines[i];
        const lm = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(l);
        if (lm) items.push({ indent: lm[1].replace(/\t/g, '    ').length, ordered: /\d/.test(lm[2]), start: parseInt(lm[2], 10), text: lm[3] });
        else if (/^\s+\S/.test(l) && items.length) items[items.length - 1].text += '\n' + l.trim();
        else break;
        i++;
      }
      frag.append(list(items, 0).node);
      continue;
    }
    if (!line.trim()) {
      flushPara();
      i++;
      continue;
    }
    (para = para || []).push(line);
    i++;
  }
  flushPara();
  return frag;
}

// A list from items[k..] at the first item's indentation; deeper items nest
// under the item before them. Returns the node and the next index.
function list(items, k) {
  const base = items[k].indent;
  const node = el(items[k].ordered ? 'ol' : 'ul');
  if (items[k].ordered && items[k].start > 1) node.start = items[k].start;
  let li = null;
  while (k < items.length && items[k].indent >= base) {
    if (items[k].indent > base && li) {
      const sub = list(items, k);
      li.append(sub.node);
      k = sub.next;
      continue;
    }
    li = el('li');
    items[k].text.split('\n').forEach((t, n) => {
      if (n) li.append(el('br'));
      inline(li, t);
    });
    node.append(li);
    k++;
  }
  return { node, next: k };
}

function codeBlock(code, lang) {
  const box = el('div', 'code');
  const head = el('div', 'code-head');
  const copy = el('button', 'copy', 'Copy');
  copy.type = 'button';
  copy.onclick = async () => {
    try {
      await navigator.clipboard.writeText(code);
      copy.textContent = 'Copied';
    } catch (e) {
      copy.textContent = 'Copy failed';
    }
    setTimeout(() => { copy.textContent = 'Copy'; }, 1500);
  };
  head.append(el('span', 'code-lang', lang || 'code'), copy);
  const pre = el('pre');
  const c = el('code', null, code);
  if (lang) c.dataset.lang = lang;
  pre.append(c);
  box.append(head, pre);
  return box;
}

// Inline spans of one line into parent: `code` first (nothing inside it is
// markup), then links, **strong**, *em* / _em_, ~~strike~~.
function inline(parent, text) {
  const re = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(([^)\s]+)\)|\*\*(?=\S)([\s\S]*?\S)\*\*|(?<![\w])__(?=\S)([\s\S]*?\S)__(?![\w])|~~(?=\S)([\s\S]*?\S)~~|\*(?=[^\s*])([\s\S]*?[^\s*])\*|(?<![\w])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\w])/g;
  let at = 0;
  let m;
  while ((m = re.exec(text))) {
    if (m.index > at) parent.append(document.createTextNode(text.slice(at, m.index)));
    if (m[1]) {
      parent.append(el('code', null, m[2].replace(/^ (.*) $/, '$1')));
    } else if (m[3] !== undefined) {
      if (/^(https?:|mailto:)/i.test(m[4])) {
        const a = el('a');
        a.href = m[4];
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        inline(a, m[3]);
        parent.append(a);
      } else {
        parent.append(document.createTextNode(m[0])); // javascript: and the like stay text
      }
    } else {
      const tag = m[5] !== undefined || m[6] !== undefined ? 'strong' : m[7] !== undefined ? 's' : 'em';
      const span = el(tag);
      inline(span, m[5] ?? m[6] ?? m[7] ?? m[8] ?? m[9]);
      parent.append(span);
    }
    at = re.lastIndex;
  }
  if (at < text.length) parent.append(document.createTextNode(text.slice(at)));
}

// Rebuilds an assistant message's body from its fields (cheap: a handful of
// nodes; called at most once per animation frame while streaming).
function renderAssistant(m) {
  const follow = nearBottom();
  const body = m.el.querySelector('.body');
  m.el.dataset.state = m.error ? 'error' : m.stopped ? 'stopped' : m.done ? 'done' : 'streaming';
  if (m.reasoning) {
    let det = body.querySelector('details.reasoning');
    if (!det) {
      det = el('details', 'reasoning');
      det.append(el('summary'), el('div', 'reasoning-text'));
      body.prepend(det);
    }
    const thinking = !m.done && !m.content && !m.toolCalls.length;
    det.querySelector('summary').textContent = thinking ? 'Thinking…' : `Reasoning (${m.reasoning.length} characters)`;
    det.querySelector('.reasoning-text').textContent = m.reasoning;
  }
  let content = body.querySelector('.content');
  if (!content) {
    content = el('div', 'content');
    body.append(content);
  }
  if (content.dataset.raw !== m.content) {
    content.replaceChildren(renderMarkdown(m.content));
    content.dataset.raw = m.content; // what the server sent, for the tests and copying
  }
  let calls = body.querySelector('.tool-calls');
  if (m.toolCalls.length) {
    if (!calls) {
      calls = el('div', 'tool-calls');
      content.after(calls);
    }
    calls.replaceChildren(...m.toolCalls.map((c) => {
      const box = el('div', 'tool-call');
      const head = el('div', 'tc-head');
      let args = c.args;
      // ended by max tokens or Stop: not a call (the server says so too)
      const cut = m.done && !callComplete(c);
      if (m.done && !cut) args = JSON.stringify(JSON.parse(c.args), null, 2);
      box.classList.toggle('cut', cut);
      head.append(el('span', 'tc-label', cut ? 'tool call, cut short' : 'tool call'), el('span', 'tc-name', c.name || '…'),
        el('span', 'tc-id', c.id));
      box.append(head, el('pre', 'tc-args', args));
      return box;
    }));
  }
  let meta = body.querySelector('.meta');
  const bits = [];
  if (m.stopped) bits.push('stopped');
  if (m.finish && m.finish !== 'stop') bits.push(m.finish === 'length' ? 'cut at max tokens' : m.finish.replace('_', ' '));
  if (m.nTokens) bits.push(`${m.nTokens} tokens`);
  if (m.tps) bits.push(`${m.tps.toFixed(1)} tokens/s`);
  if (bits.length) {
    if (!meta) {
      meta = el('div', 'meta');
      body.append(meta);
    }
    meta.textContent = bits.join(' · ');
  }
  if (m.error) {
    let err = body.querySelector('.error');
    if (!err) {
      err = el('div', 'error');
      body.append(err);
    }
    err.textContent = m.error;
  }
  if (follow) scrollDown();
}

let renderQueued = new Set();
function scheduleRender(m) {
  if (renderQueued.has(m)) return;
  renderQueued.add(m);
  requestAnimationFrame(() => {
    renderQueued.delete(m);
    renderAssistant(m);
  });
}

// ---------------------------------------------------------------- status strip

function setState(text, dot) {
  $('st-state').textContent = text;
  $('st-dot').className = 'dot ' + (dot || '');
}

async function loadModel() {
  try {
    const res = await apiFetch('/v1/models', {}, false);
    if (!res.ok) {
      setState(res.status === 401 ? 'API key needed' : 'server error ' + res.status, 'bad');
      return;
    }
    const o = await res.json();
    state.modelId = (o.data && o.data[0] && o.data[0].id) || '';
    $('st-model').textContent = state.modelId || '–';
    $('top-model').textContent = state.modelId;
    document.title = state.modelId ? `${state.modelId} · kvloom` : 'kvloom';
    if (!state.controller) setState('ready', 'ok');
  } catch (e) {
    setState('server unreachable', 'bad');
  }
}

function metricValue(text, name) {
  const m = text.match(new RegExp('^' + name + ' ([0-9.eE+-]+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}

async function loadMetrics() {
  try {
    const res = await apiFetch('/metrics', {}, true);
    if (!res.ok) return;
    const text = await res.text();
    const used = metricValue(text, 'kvloom_kv_blocks_used');
    const total = metricValue(text, 'kvloom_kv_blocks_total');
    if (Number.isFinite(used) && Number.isFinite(total) && total > 0) {
      $('st-kv').textContent = `${used} / ${total} blocks`;
      $('st-kv-bar').style.width = `${Math.min(100, (100 * used) / total).toFixed(1)}%`;
    }
    if (!state.controller && $('st-state').textContent !== 'ready') {
      if (state.modelId) setState('ready', 'ok');
      else loadModel();
    }
  } catch (e) {
    if (!state.controller) setState('server unreachable', 'bad');
  }
}

// ---------------------------------------------------------------- settings

function readSettings() {
  const s = state.settings;
  s.system = $('set-system').value;
  s.temperature = Number($('set-temp').value);
  const max = parseInt($('set-max').value, 10);
  s.maxTokens = Number.isFinite(max) && max > 0 ? max : DEFAULTS.maxTokens;
  s.tools = $('set-tools').value;
  s.toolChoice = $('set-tool-choice').value;
  s.parallel = $('set-parallel').checked;
  $('temp-val').textContent = s.temperature.toFixed(2);
  store.set('settings', s);
}

function showSettings() {
  const s = state.settings;
  $('set-system').value = s.system;
  $('set-temp').value = String(s.temperature);
  $('set-max').value = String(s.maxTokens);
  $('set-tools').value = s.tools;
  $('set-tool-choice').value = s.toolChoice;
  $('set-parallel').checked = s.parallel;
  $('temp-val').textContent = Number(s.temperature).toFixed(2);
}

// The tools array, null for none; throws with a readable message.
function parseTools() {
  const t = state.settings.tools.trim();
  if (!t) return null;
  let v;
  try {
    v = JSON.parse(t);
  } catch (e) {
    throw new Error('Tools: not valid JSON (' + e.message + ')');
  }
  if (!Array.isArray(v)) throw new Error('Tools: expected a JSON array of tools');
  return v.length ? v : null;
}

// ---------------------------------------------------------------- chat

// A streamed call is complete when its arguments are whole JSON.
function callComplete(c) {
  try {
    JSON.parse(c.args);
    return true;
  } catch (e) {
    return false;
  }
}

// The conversation as the API wants it.
function apiMessages() {
  const out = [];
  if (state.settings.system.trim()) out.push({ role: 'system', content: state.settings.system });
  for (const m of state.messages) {
    if (m.role === 'user') {
      out.push({ role: 'user', content: m.content });
    } else if (m.content || m.toolCalls.length) {
      const a = { role: 'assistant', content: m.content || null };
      // a call cut by max tokens (its arguments never closed) was not a call:
      // it does not go back to the model (the server drops it from whole
      // answers the same way; a stream had already shown its start)
      const calls = m.stopped ? [] : m.toolCalls.filter(callComplete);
      if (calls.length)
        a.tool_calls = calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } }));
      out.push(a);
    }
  }
  return out;
}

function setBusy(busy) {
  $('btn-send').hidden = busy;
  $('btn-stop').hidden = !busy;
  if (busy) setState('generating', 'busy');
}

async function send(text) {
  if (state.controller) return;
  readSettings();
  let tools;
  try {
    tools = parseTools();
    $('tools-error').hidden = true;
  } catch (e) {
    $('tools-error').textContent = e.message;
    $('tools-error').hidden = false;
    $('settings').hidden = false;
    $('btn-settings').setAttribute('aria-expanded', 'true');
    return;
  }
  addMessage({ role: 'user', content: text });
  const body = {
    messages: apiMessages(),
    stream: true,
    stream_options: { include_usage: true },
    temperature: state.settings.temperature,
    max_tokens: state.settings.maxTokens,
  };
  if (state.modelId) body.model = state.modelId;
  if (tools) {
    body.tools = tools;
    body.tool_choice = state.settings.toolChoice;
    body.parallel_tool_calls = state.settings.parallel;
  }
  const m = { role: 'assistant', content: '', reasoning: '', toolCalls: [], finish: '', error: '', done: false };
  addMessage(m);
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  const t0 = performance.now();
  let tFirst = 0;
  let nChunks = 0;
  let usage = null;
  const liveSpeed = () => {
    const s = (performance.now() - tFirst) / 1000;
    if (nChunks > 1 && s > 0) $('st-tps').textContent = `${((nChunks - 1) / s).toFixed(1)} tok/s`;
  };
  const metricsTimer = setInterval(loadMetrics, 1000);
  try {
    const res = await apiFetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) {
      m.error = await errorText(res);
    } else {
      await readSSE(res, (ev) => {
        if (ev.error) {
          m.error = ev.error.message || JSON.stringify(ev.error);
          return;
        }
        if (ev.usage) usage = ev.usage;
        const ch = ev.choices && ev.choices[0];
        if (!ch) return;
        const d = ch.delta || {};
        let token = false;
        if (d.content) {
          m.content += d.content;
          token = true;
        }
        if (d.reasoning_content) {
          m.reasoning += d.reasoning_content;
          token = true;
        }
        for (const tc of d.tool_calls || []) {
          const i = tc.index || 0;
          const c = m.toolCalls[i] || (m.toolCalls[i] = { id: '', name: '', args: '' });
          if (tc.id) c.id = tc.id;
          if (tc.function && tc.function.name) c.name += tc.function.name;
          if (tc.function && tc.function.arguments) c.args += tc.function.arguments;
          token = true;
        }
        if (ch.finish_reason) m.finish = ch.finish_reason;
        if (token) {
          nChunks++;
          if (!tFirst) tFirst = performance.now();
          liveSpeed();
        }
        scheduleRender(m);
      });
      if (!m.finish && !m.error) m.error = 'the stream ended early';
    }
  } catch (e) {
    if (e.name === 'AbortError') m.stopped = true;
    else m.error = String(e.message || e);
  } finally {
    clearInterval(metricsTimer);
    const tEnd = performance.now();
    m.done = true;
    // Speed: generated tokens over the time since the first one (the first
    // token's wait is prefill); the server's count when it sent usage.
    const n = usage ? usage.completion_tokens : nChunks;
    const secs = (tEnd - (tFirst || t0)) / 1000;
    if (n > 1 && secs > 0) {
      m.tps = (n - 1) / secs;
      $('st-tps').textContent = `${m.tps.toFixed(1)} tok/s`;
    }
    m.nTokens = n;
    if (usage) {
      const cached = (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens) || 0;
      $('st-cached').textContent = `${cached} / ${usage.prompt_tokens} tokens`;
    }
    renderQueued.delete(m);
    renderAssistant(m);
    state.controller = null;
    setBusy(false);
    setState(m.error ? 'error' : m.stopped ? 'stopped' : 'ready', m.error ? 'bad' : 'ok');
    loadMetrics();
    $('input').focus();
  }
}

function stop() {
  if (state.controller) state.controller.abort();
}

function newChat() {
  stop();
  state.messages = [];
  $('messages').replaceChildren($('empty'));
  $('empty').hidden = false;
  $('st-cached').textContent = '–';
  $('input').focus();
}

// ---------------------------------------------------------------- wiring

function autoGrow() {
  const t = $('input');
  t.style.height = 'auto';
  t.style.height = Math.min(t.scrollHeight + 2, window.innerHeight * 0.4) + 'px';
}

function init() {
  showSettings();
  showKeyState();
  $('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = $('input').value;
    if (!text.trim() || state.controller) return;
    $('input').value = '';
    autoGrow();
    send(text);
  });
  $('input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('input').addEventListener('input', autoGrow);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && state.controller && !$('key-dialog').open) stop();
  });
  $('btn-stop').addEventListener('click', stop);
  $('btn-new').addEventListener('click', newChat);
  $('btn-settings').addEventListener('click', () => {
    const open = $('settings').hidden;
    $('settings').hidden = !open;
    $('btn-settings').setAttribute('aria-expanded', String(open));
  });
  for (const id of ['set-system', 'set-temp', 'set-max', 'set-tools', 'set-tool-choice', 'set-parallel'])
    $(id).addEventListener('input', readSettings);
  $('btn-forget-key').addEventListener('click', () => {
    state.apiKey = '';
    store.set('apiKey', null);
    showKeyState();
  });
  $('input').focus();
  loadModel().then(loadMetrics);
  setInterval(() => {
    if (!document.hidden && !state.controller) loadMetrics();
  }, 3000);
}

init();

// webui.mjs — the chat page at GET / in a real browser (Debian's chromium,
// headless, driven by puppeteer-core), against two kvloom servers started by
// tests/webui_test.sh:
//   A: no API key, --step-delay-us (a long answer takes seconds, so it can be
//      stopped), no CORS;
//   B: --api-key KEY, --cors-origin <A's origin>.
// Checks: the page loads and shows the model id; a message streams in (seen
// growing) and equals the non-streamed answer at temperature 0; the status
// strip shows tokens/s, cached-prefix tokens (> 0 on the second turn) and KV
// blocks; Stop aborts a long answer and the server counts a 499 in /metrics;
// forced tool calls are shown as calls; on B the page asks for the key on the
// 401, refuses a wrong one, keeps the right one across a reload; CORS works
// from A's origin to B and is refused from B's origin to A; answers are
// rendered as markdown (headings, lists, emphasis, links, code blocks with a
// working Copy button) and model text never becomes HTML (a canned stream).
//   node webui.mjs URL_A URL_B KEY SCREENSHOT.png
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

const [urlA, urlB, key, shot] = process.argv.slice(2);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
let pass = 0;
let fail = 0;
function check(ok, what) {
  if (ok) pass++;
  else {
    fail++;
    console.log('FAIL: ' + what);
  }
}
const watchdog = setTimeout(() => {
  console.log('FAIL: watchdog (150 s)');
  console.log(`webui: ${pass} passed, ${fail + 1} failed`);
  process.exit(1);
}, 150000);

const profile = mkdtempSync(join(tmpdir(), 'kvloom-chromium-'));
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  userDataDir: profile,
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-dev-shm-usage',
  ],
  protocolTimeout: 60000,
});

async function metric(page, base, name, auth) {
  return page.evaluate(async (base, name, auth) => {
    const r = await fetch(base + '/metrics', { headers: auth ? { Authorization: 'Bearer ' + auth } : {} });
    const t = await r.text();
    const esc = name.replace(/[{}"=]/g, (c) => '\\' + c);
    const m = t.match(new RegExp('^' + esc + ' ([0-9.]+)$', 'm'));
    return m ? Number(m[1]) : 0;
  }, base, name, auth || '');
}

// Types a message, sends it with Enter and waits for the answer to end.
// Returns the last assistant message's state, text and the lengths of its
// text seen while it streamed.
async function ask(page, text, timeout = 30000) {
  const before = await page.$$eval('.msg.assistant', (l) => l.length);
  await page.evaluate(() => {
    window.__seen = [];
    window.__obs = new MutationObserver(() => {
      const l = document.querySelectorAll('.msg.assistant');
      const m = l[l.length - 1];
      if (m && m.dataset.state === 'streaming') window.__seen.push(m.querySelector('.content').textContent.length);
    });
    window.__obs.observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true, attributes: true });
  });
  await page.click('#input');
  await page.type('#input', text);
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.querySelectorAll('.msg.assistant').length > n, { timeout: 5000 }, before);
  await page.waitForFunction(() => {
    const l = document.querySelectorAll('.msg.assistant');
    return l[l.length - 1].dataset.state !== 'streaming';
  }, { timeout });
  return page.evaluate(() => {
    window.__obs.disconnect();
    const l = document.querySelectorAll('.msg.assistant');
    const m = l[l.length - 1];
    return {
      state: m.dataset.state,
      text: m.querySelector('.content').dataset.raw, // the answer's text (rendered as markdown: `shown`)
      shown: m.querySelector('.content').textContent,
      meta: (m.querySelector('.meta') || {}).textContent || '',
      error: (m.querySelector('.error') || {}).textContent || '',
      seen: window.__seen,
    };
  });
}

async function setField(page, id, value) {
  await page.evaluate((id, value) => {
    const e = document.getElementById(id);
    e.value = value;
    e.dispatchEvent(new Event('input', { bubbles: true }));
  }, id, value);
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

try {
  // ---- A: no key ----
  const page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 800 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const resp = await page.goto(urlA + '/', { waitUntil: 'load', timeout: 20000 });
  check(resp.status() === 200 && /text\/html/.test(resp.headers()['content-type']), 'GET / is an HTML page');
  await page.waitForFunction(() => document.getElementById('st-model').textContent !== '–', { timeout: 10000 });
  check((await text(page, '#st-model')) === 'stories260K', 'model id in the status strip: ' + (await text(page, '#st-model')));
  await page.waitForFunction(() => /blocks/.test(document.getElementById('st-kv').textContent), { timeout: 10000 });
  check(/^\d+ \/ \d+ blocks$/.test(await text(page, '#st-kv')), 'KV use in the status strip: ' + (await text(page, '#st-kv')));

  await page.click('#btn-settings');
  await setField(page, 'set-temp', '0');
  await setField(page, 'set-max', '48');
  const r1 = await ask(page, 'Once upon a time');
  check(r1.state === 'done' && r1.text.length > 10, `first answer: ${JSON.stringify(r1)}`);
  check(new Set(r1.seen).size >= 3, `the answer streamed in (lengths seen: ${r1.seen.slice(0, 20)})`);
  const direct = await page.evaluate(async () => {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 48 }),
    });
    return (await r.json()).choices[0].message.content;
  });
  check(direct === r1.text, `streamed text == the API's non-streamed answer:\n  page: ${JSON.stringify(r1.text)}\n  api:  ${JSON.stringify(direct)}`);
  check(/[*_`#\[>~]/.test(direct) || r1.shown.replace(/\s+/g, '') === direct.replace(/\s+/g, ''),
    `plain prose is shown as it is: ${JSON.stringify(r1.shown)}`);
  check(/tok\/s$/.test(await text(page, '#st-tps')), 'tokens/s shown: ' + (await text(page, '#st-tps')));
  check(/^\d+ \/ \d+ tokens$/.test(await text(page, '#st-cached')), 'cached prefix shown: ' + (await text(page, '#st-cached')));

  const r2 = await ask(page, 'What happened next?');
  check(r2.state === 'done' && r2.text.length > 0, `second answer: ${JSON.stringify(r2)}`);
  const cached = Number((await text(page, '#st-cached')).split(' ')[0]);
  check(cached > 0, 'the second turn reuses the first turn\'s prefix: cached ' + (await text(page, '#st-cached')));

  // Stop a long answer: the server sees the client leave (499).
  const n499 = await metric(page, '', 'kvloom_requests_total{status="499"}');
  await setField(page, 'set-temp', '0.8');
  await setField(page, 'set-max', '100000');
  await page.click('#input');
  await page.type('#input', 'Tell me a very long story.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => {
    const l = document.querySelectorAll('.msg.assistant');
    return l.length === 3 && l[2].querySelector('.content').textContent.length > 30;
  }, { timeout: 20000 });
  check(await page.$eval('#btn-stop', (b) => !b.hidden), 'Stop button shown while generating');
  await page.click('#btn-stop');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[2].dataset.state === 'stopped', { timeout: 5000 });
  check(/stopped/.test(await page.$eval('.msg.assistant:nth-last-child(1) .meta', (e) => e.textContent)), 'the message says stopped');
  let counted = false;
  for (let i = 0; i < 50 && !counted; i++) {
    counted = (await metric(page, '', 'kvloom_requests_total{status="499"}')) > n499;
    if (!counted) await new Promise((r) => setTimeout(r, 100));
  }
  check(counted, 'the server counted the stopped request as cancelled (499)');
  check(await page.$eval('#btn-send', (b) => !b.hidden), 'Send button back after Stop');

  // Forced tool calls are shown as calls.
  await setField(page, 'set-max', '200');
  await setField(page, 'set-temp', '0');
  await page.$eval('details.advanced', (d) => { d.open = true; });
  await setField(page, 'set-tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'] } } }]));
  await setField(page, 'set-tool-choice', 'required');
  await page.$eval('#set-parallel', (e) => { e.checked = false; e.dispatchEvent(new Event('input', { bubbles: true })); });
  const r3 = await ask(page, 'What is the weather in Paris?');
  const call = await page.evaluate(() => {
    const l = document.querySelectorAll('.msg.assistant');
    const c = l[l.length - 1].querySelector('.tool-call');
    return c ? { name: c.querySelector('.tc-name').textContent, args: c.querySelector('.tc-args').textContent } : null;
  });
  let args = null;
  try { args = JSON.parse(call.args); } catch (e) { /* checked below */ }
  check(r3.state === 'done' && /tool calls/.test(r3.meta) && call && call.name === 'get_weather' && args && typeof args.city === 'string',
    `tool call shown: ${JSON.stringify(call)} (${JSON.stringify(r3)})`);
  await setField(page, 'set-tools', '');
  await setField(page, 'set-tool-choice', 'auto');
  await page.$eval('details.advanced', (d) => { d.open = false; });
  await page.$eval('#scroller', (e) => { e.scrollTop = e.scrollHeight; });
  check(errors.length === 0, 'no JavaScript errors: ' + errors.join('; '));
  await page.screenshot({ path: shot });

  // Markdown: a canned stream (the request intercepted in the browser, so the
  // page's own SSE reader and renderer run) with every construct and HTML
  // that must stay text.
  {
    const md = [
      '# Title', '## Sub *it*',
      'Some **bold** and *em* and `a <b> code` and ~~gone~~, a [link](https://example.com/x) and [bad](javascript:alert(1)).',
      '', '- one', '- two', '  - nested **deep**', '', '1. first', '2. second', '', '> quoted **text**', '',
      '```python', 'print("<b>not bold</b>")', 'x = 1 < 2 and "&amp;"', '```', '',
      '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>', '', '---', 'end',
    ].join('\n');
    const code = 'print("<b>not bold</b>")\nx = 1 < 2 and "&amp;"';
    const pieces = [];
    for (let k = 0; k < md.length; k += 7) pieces.push(md.slice(k, k + 7)); // fences and ** split across chunks
    const sse = pieces.map((t, k) => 'data: ' + JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0, model: 'm',
      choices: [{ index: 0, delta: k ? { content: t } : { role: 'assistant', content: t }, finish_reason: null }] }) + '\n\n').join('') +
      'data: ' + JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
      '\n\ndata: [DONE]\n\n';
    const mdPage = await browser.newPage();
    await mdPage.setViewport({ width: 900, height: 1000 });
    await browser.defaultBrowserContext().overridePermissions(urlA, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
    const mdErrors = [];
    mdPage.on('pageerror', (e) => mdErrors.push(String(e)));
    await mdPage.setRequestInterception(true);
    mdPage.on('request', (req) => {
      if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions'))
        req.respond({ status: 200, contentType: 'text/event-stream', body: sse });
      else req.continue();
    });
    await mdPage.goto(urlA + '/', { waitUntil: 'load', timeout: 20000 });
    const rm = await ask(mdPage, 'Show me markdown');
    check(rm.state === 'done' && rm.text === md, `markdown answer received whole: ${JSON.stringify(rm.text)}`);
    const dom = await mdPage.evaluate(() => {
      const c = [...document.querySelectorAll('.msg.assistant .content')].pop();
      const q = (s) => [...c.querySelectorAll(s)];
      const links = q('a').map((a) => ({ href: a.getAttribute('href'), target: a.target, rel: a.rel, text: a.textContent }));
      return {
        h1: q('h1').map((e) => e.textContent), h2em: q('h2 em').map((e) => e.textContent), strong: q(':scope > p strong').map((e) => e.textContent),
        em: q('p > em').map((e) => e.textContent), code: q('p code').map((e) => e.textContent), s: q('s').map((e) => e.textContent),
        links, ul: q(':scope > ul > li').length, nested: q('ul > li > ul > li strong').map((e) => e.textContent),
        ol: q('ol > li').map((e) => e.textContent), quote: q('blockquote strong').map((e) => e.textContent),
        pre: q('.code pre code').map((e) => e.textContent), lang: q('.code .code-lang').map((e) => e.textContent),
        hr: q('hr').length, img: q('img, script, b').length, onerror: q('[onerror]').length,
        pwned: window.__pwned === undefined ? null : window.__pwned, text: c.textContent,
      };
    });
    check(JSON.stringify(dom.h1) === '["Title"]' && JSON.stringify(dom.h2em) === '["it"]', `markdown: headings ${JSON.stringify(dom)}`);
    check(JSON.stringify(dom.strong) === '["bold"]' && JSON.stringify(dom.em) === '["em"]' && JSON.stringify(dom.s) === '["gone"]',
      `markdown: emphasis ${JSON.stringify([dom.strong, dom.em, dom.s])}`);
    check(JSON.stringify(dom.code) === '["a <b> code"]', `markdown: inline code, its markup as text ${JSON.stringify(dom.code)}`);
    check(dom.links.length === 1 && dom.links[0].href === 'https://example.com/x' && dom.links[0].target === '_blank' &&
      /noopener/.test(dom.links[0].rel) && dom.text.includes('[bad](javascript:alert(1))'),
      `markdown: an http link is a link, javascript: stays text ${JSON.stringify(dom.links)}`);
    check(dom.ul === 2 && JSON.stringify(dom.nested) === '["deep"]' && JSON.stringify(dom.ol) === '["first","second"]',
      `markdown: lists ${JSON.stringify([dom.ul, dom.nested, dom.ol])}`);
    check(JSON.stringify(dom.quote) === '["text"]' && dom.hr === 1, `markdown: quote and rule ${JSON.stringify([dom.quote, dom.hr])}`);
    check(dom.pre.length === 1 && dom.pre[0] === code && JSON.stringify(dom.lang) === '["python"]',
      `markdown: the code block, exact ${JSON.stringify([dom.pre, dom.lang])}`);
    check(dom.img === 0 && dom.onerror === 0 && dom.pwned === null && dom.text.includes('<img src=x onerror=') && dom.text.includes('<script>'),
      `no HTML injection: tags shown as text, none in the DOM ${JSON.stringify([dom.img, dom.onerror, dom.pwned])}`);
    await mdPage.click('.msg.assistant .code .copy');
    await mdPage.waitForFunction(() => /Cop(ied|y failed)/.test(document.querySelector('.msg.assistant .code .copy').textContent), { timeout: 5000 });
    const clip = await mdPage.evaluate(async () => ({ label: document.querySelector('.msg.assistant .code .copy').textContent,
      text: await navigator.clipboard.readText().catch((e) => 'error: ' + e) }));
    check(clip.label === 'Copied' && clip.text === code, `the Copy button copies the code: ${JSON.stringify(clip)}`);
    check(mdErrors.length === 0, 'markdown page: no JavaScript errors: ' + mdErrors.join('; '));
    await mdPage.screenshot({ path: shot.replace(/\.png$/, '') + '-markdown.png' });
    await mdPage.close();
  }

  // A call cut by max tokens (a canned stream, as above: one complete call,
  // then a call whose arguments never closed, finish_reason "tool_calls" as
  // the server sends it): both shown as cards, the cut one marked, no call
  // markup as text; the next request sends back only the complete call.
  {
    const chunk = (delta, finish = null) => 'data: ' + JSON.stringify({ id: 'x', object: 'chat.completion.chunk', created: 0, model: 'm',
      choices: [{ index: 0, delta, finish_reason: finish }] }) + '\n\n';
    const call = (index, id, args) => ({ tool_calls: [id ? { index, id, type: 'function', function: { name: 'get_weather', arguments: '' } }
      : { index, function: { arguments: args } }] });
    const cutSse = chunk({ role: 'assistant', content: null, ...call(0, 'call_a') }) + chunk(call(0, null, '{"city": "Paris"}')) +
      chunk(call(1, 'call_b')) + chunk(call(1, null, '{"city": "Os')) + chunk({}, 'tool_calls') + 'data: [DONE]\n\n';
    const textSse = chunk({ role: 'assistant', content: 'ok' }) + chunk({}, 'stop') + 'data: [DONE]\n\n';
    const bodies = [];
    const cp = await browser.newPage();
    const cpErrors = [];
    cp.on('pageerror', (e) => cpErrors.push(String(e)));
    await cp.setRequestInterception(true);
    cp.on('request', (req) => {
      if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions')) {
        bodies.push(JSON.parse(req.postData()));
        req.respond({ status: 200, contentType: 'text/event-stream', body: bodies.length === 1 ? cutSse : textSse });
      } else req.continue();
    });
    await cp.goto(urlA + '/', { waitUntil: 'load', timeout: 20000 });
    const rc = await ask(cp, 'Weather in Paris and Oslo?');
    const cards = await cp.evaluate(() => [...document.querySelectorAll('.msg.assistant .tool-call')].map((c) =>
      ({ label: c.querySelector('.tc-label').textContent, cut: c.classList.contains('cut'), id: c.querySelector('.tc-id').textContent })));
    check(rc.state === 'done' && cards.length === 2 && !cards[0].cut && cards[0].label === 'tool call' && cards[1].cut &&
      cards[1].label === 'tool call, cut short', `cut call: the complete call a card, the cut one marked ${JSON.stringify([rc, cards])}`);
    check(!rc.text && !/tool_call|"city"/.test(rc.shown), `cut call: no call markup as text ${JSON.stringify(rc.shown)}`);
    await ask(cp, 'And now?');
    const sent = bodies[1] ? bodies[1].messages.find((m) => m.role === 'assistant') : null;
    check(sent && sent.tool_calls && sent.tool_calls.length === 1 && sent.tool_calls[0].id === 'call_a' &&
      sent.tool_calls[0].function.arguments === '{"city": "Paris"}', `the next request sends back the complete call only ${JSON.stringify(sent)}`);
    check(cpErrors.length === 0, 'cut-call page: no JavaScript errors: ' + cpErrors.join('; '));
    await cp.close();
  }

  // CORS, from documents without the page's Content-Security-Policy (which
  // keeps the chat page's own connections to its server): B allows A's
  // origin; A allows no other origin.
  const plainA = await browser.newPage();
  await plainA.goto(urlA + '/health', { waitUntil: 'load', timeout: 10000 });
  const cors = await plainA.evaluate(async (urlB, key) => {
    const r = await fetch(urlB + '/v1/models', { headers: { Authorization: 'Bearer ' + key } });
    return r.status;
  }, urlB, key);
  check(cors === 200, 'a page of an allowed origin calls the API with a key (preflight + request): ' + cors);

  // ---- B: API key ----
  const pb = await browser.newPage();
  await pb.setViewport({ width: 1200, height: 800 });
  const resB = await pb.goto(urlB + '/', { waitUntil: 'load', timeout: 20000 });
  check(resB.status() === 200, 'the page itself needs no key');
  await pb.waitForFunction(() => document.getElementById('key-dialog').open, { timeout: 10000 });
  check(true, 'key dialog');
  await pb.screenshot({ path: shot.replace(/\.png$/, '-key.png') });
  await pb.type('#key-input', 'wrong-key');
  await pb.click('#key-ok');
  await pb.waitForFunction(() => document.getElementById('key-dialog').open && !document.getElementById('key-error').hidden, { timeout: 10000 });
  check(true, 'a wrong key is refused and asked again');
  await pb.$eval('#key-input', (e) => { e.value = ''; });
  await pb.type('#key-input', key);
  await pb.keyboard.press('Enter');
  await pb.waitForFunction(() => document.getElementById('st-model').textContent === 'tiny', { timeout: 10000 });
  check(!(await pb.$eval('#key-dialog', (d) => d.open)), 'dialog closed once the key works');
  const rb = await ask(pb, 'Hello');
  check(rb.state === 'done' && rb.text.length > 0, `answer with the key: ${JSON.stringify(rb)}`);
  check((await pb.evaluate(() => localStorage.getItem('kvloom.apiKey'))) === JSON.stringify(key), 'key kept in localStorage');
  await pb.reload({ waitUntil: 'load' });
  await pb.waitForFunction(() => document.getElementById('st-model').textContent === 'tiny', { timeout: 10000 });
  check(!(await pb.$eval('#key-dialog', (d) => d.open)), 'no key dialog after a reload');
  await pb.goto(urlB + '/health', { waitUntil: 'load', timeout: 10000 });
  const blocked = await pb.evaluate(async (urlA) => {
    try {
      await fetch(urlA + '/v1/models');
      return 'allowed';
    } catch (e) {
      return 'blocked';
    }
  }, urlA);
  check(blocked === 'blocked', 'a server without --cors-origin is not readable from another origin: ' + blocked);
} catch (e) {
  fail++;
  console.log('FAIL: ' + (e && e.stack ? e.stack : e));
} finally {
  await browser.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(watchdog);
}
console.log(`webui: ${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);

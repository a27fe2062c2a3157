// The web chat's Markdown renderer under attack, in Debian's Chromium, for
// host/tests/e2e/webchat.rs (`a_hostile_reply_renders_in_linear_time_…`).
//
//   node render.js <gateway base url> <token> <plan.json>
//
// plan.json (written by the Rust test): {cases: [{input}], attacks: [{name,
// unit, head?, halves?}], sizes: [small, large], stream: {ask, final}}.
// Prints one JSON object of observations on stdout; the Rust test asserts
// on them. Every time is measured inside the page with performance.now().
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const [base, token, planFile] = process.argv.slice(2);
if (!base || !token || !planFile) {
  console.error('usage: node render.js <gateway base url> <token> <plan.json>');
  process.exit(2);
}
const plan = JSON.parse(fs.readFileSync(planFile, 'utf8'));
const CHROMIUM = process.env.CHITIN_CHROMIUM || '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const WAIT = { timeout: 60000 };

const results = {};
let step = 'start';

// The renderer the page had before (host/src/gateway/webchat/app.js up to
// this change), verbatim, installed in the page as
// window.__oldRenderMarkdown: the attack is shown on it first.
function installOldRenderer() {
  function escapeHtml(s) {
    return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }
  function emphasis(raw) {
    let s = escapeHtml(raw);
    s = s.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^*])\*([^*\n]+)\*(?!\*)/g, '$1<em>$2</em>');
    return s.replace(/\n/g, '<br>');
  }
  function inline(text) {
    const token = /(`[^`\n]+`)|\[([^\]\n]+)\]\(([^()\s]+)\)/g;
    let out = '';
    let last = 0;
    let m;
    while ((m = token.exec(text))) {
      out += emphasis(text.slice(last, m.index));
      if (m[1]) {
        out += '<code>' + escapeHtml(m[1].slice(1, -1)) + '</code>';
      } else if (/^https?:\/\//i.test(m[3])) {
        out += '<a href="' + escapeHtml(m[3]) + '" rel="noopener noreferrer" target="_blank">' + emphasis(m[2]) + '</a>';
      } else {
        out += emphasis(m[0]);
      }
      last = token.lastIndex;
    }
    return out + emphasis(text.slice(last));
  }
  function paragraphs(text) {
    return text.split(/\n{2,}/).filter((p) => p.trim() !== '').map((p) => '<p>' + inline(p.replace(/^\n+|\n+$/g, '')) + '</p>').join('');
  }
  function renderMarkdown(text) {
    const fence = /```([^\n`]*)\n([\s\S]*?)(?:```|$)/g;
    let out = '';
    let last = 0;
    let m;
    while ((m = fence.exec(text))) {
      out += paragraphs(text.slice(last, m.index));
      const lang = /^[\w+-]+$/.test(m[1].trim()) ? ' class="language-' + m[1].trim() + '"' : '';
      out += '<pre><code' + lang + '>' + escapeHtml(m[2].replace(/\n$/, '')) + '</code></pre>';
      last = fence.lastIndex;
      if (m[0].length === 0) break;
    }
    return out + paragraphs(text.slice(last));
  }
  window.__oldRenderMarkdown = renderMarkdown;
}

// In the page: the attack inputs and timers. A `batch` is the mean time
// of as many renders as fill 5 ms (at least one). `pair` times two inputs
// in alternating batches (`rounds`, more while under a second) and keeps
// the best of each: the intrinsic cost, and a busy machine or a
// collection slows both sizes alike rather than one of them. `once` is
// one render with its HTML put into a detached element, as the page
// does, the best of three.
function installBench() {
  const batch = (render, input) => {
    let reps = 0;
    const started = performance.now();
    let elapsed = 0;
    do {
      render(input);
      reps++;
      elapsed = performance.now() - started;
    } while (elapsed < 5);
    return elapsed / reps;
  };
  window.__bench = {
    input(attack, size) {
      if (attack.halves) return attack.halves[0].repeat(size / 2) + attack.halves[1].repeat(size / 2);
      const head = attack.head || '';
      return (head + attack.unit.repeat(Math.ceil(size / attack.unit.length))).slice(0, size);
    },
    pair(render, small, large, rounds) {
      render(small);
      render(large);
      let best = [Infinity, Infinity];
      const started = performance.now();
      for (let r = 0; r < rounds || (r < 3 * rounds && performance.now() - started < 1000); r++) {
        best = [Math.min(best[0], batch(render, small)), Math.min(best[1], batch(render, large))];
      }
      return best;
    },
    time(render, input, rounds) {
      render(input);
      let best = Infinity;
      for (let r = 0; r < rounds; r++) best = Math.min(best, batch(render, input));
      return best;
    },
    once(render, input) {
      let best = Infinity;
      for (let k = 0; k < 3; k++) {
        const div = document.createElement('div');
        const started = performance.now();
        div.innerHTML = render(input);
        best = Math.min(best, performance.now() - started);
      }
      return best;
    },
  };
}

async function main() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'chitin-render-'));
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  results.pageErrors = errors;
  try {
    await run(page);
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

async function run(page) {
  step = 'open';
  await page.goto(base + '/chat');
  await page.waitForSelector('#login:not([hidden])', WAIT);
  await page.fill('#token', token);
  await page.click('#login-button');
  await page.waitForSelector('#status.connected', WAIT);
  await page.evaluate(installOldRenderer);
  await page.evaluate(installBench);

  step = 'cases';
  // Each case rendered, then put into the live page: a script or a handler
  // that got through would run there and set window.__pwned.
  results.cases = await page.evaluate(async (cases) => {
    const out = [];
    for (const c of cases) {
      const html = window.chitin.renderMarkdown(c.input);
      const div = document.createElement('div');
      div.className = 'msg assistant';
      div.innerHTML = html;
      document.getElementById('messages').append(div);
      out.push({ html, text: div.textContent });
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    const messages = document.getElementById('messages');
    const found = { scripts: messages.querySelectorAll('script').length, imgs: messages.querySelectorAll('img').length, iframes: messages.querySelectorAll('iframe').length };
    messages.replaceChildren();
    return { outputs: out, found, pwned: window.__pwned !== undefined };
  }, plan.cases);

  step = 'fuzz';
  // Random Markdown-ish text (seeded, so a failure repeats): whatever the
  // renderer makes must hold only its own elements and attributes, and a
  // link only to http, https or mailto.
  results.fuzz = await page.evaluate((count) => {
    let seed = 0x5eed;
    const random = () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const pieces = ['<', '>', '"', "'", '&', '[', ']', '(', ')', '*', '_', '~', '`', '\\', '|', '#', '-', ':', '/', ' ', '\n', '\n\n',
      '1. ', '- ', '> ', '```', '|---|', 'a', 'b c', 'javascript:', 'JaVaScRiPt:', 'data:', 'http://', 'https://x.test', 'mailto:',
      '<script>', '</script>', ' onerror=', '<img src=x ', 'x.test', '%0a', '&#106;', '&amp;', '\u2028', '\t', '<https://', '](', '`` '];
    const allowed = {
      p: [], br: [], strong: [], em: [], del: [], code: ['class'], pre: [], a: ['href', 'rel', 'target'], h1: [], h2: [], h3: [], h4: [], h5: [], h6: [],
      ul: [], ol: ['start'], li: [], blockquote: [], hr: [], div: ['class'], button: ['type', 'class', 'title'], table: [], thead: [], tbody: [], tr: [],
      th: ['class'], td: ['class'],
    };
    const violations = [];
    let worst = 0;
    for (let k = 0; k < count; k++) {
      let input = '';
      const length = 1 + Math.floor(random() * 60);
      for (let j = 0; j < length; j++) input += pieces[Math.floor(random() * pieces.length)];
      const started = performance.now();
      const html = window.chitin.renderMarkdown(input);
      worst = Math.max(worst, performance.now() - started);
      const doc = new DOMParser().parseFromString('<body>' + html + '</body>', 'text/html');
      for (const e of doc.body.querySelectorAll('*')) {
        const tag = e.tagName.toLowerCase();
        const bad = !(tag in allowed) ? 'element ' + tag
          : [...e.attributes].map((x) => x.name).find((name) => !allowed[tag].includes(name))
          || (tag === 'a' && !/^(https?:\/\/|mailto:)/i.test(e.getAttribute('href')) ? 'href ' + e.getAttribute('href') : null);
        if (bad) violations.push({ input, bad: tag + ': ' + bad });
      }
      if (violations.length > 10) break;
    }
    return { count, violations, worst };
  }, 3000);

  step = 'copy button';
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  await page.evaluate(() => {
    const div = document.createElement('div');
    div.className = 'msg assistant';
    div.innerHTML = window.chitin.renderMarkdown('```sh\necho "<copied>"\n```');
    document.getElementById('messages').append(div);
  });
  await page.click('#messages button.copy');
  await page.waitForFunction(() => document.querySelector('#messages button.copy').textContent !== 'Copy', null, WAIT);
  results.copy = await page.evaluate(async () => ({
    label: document.querySelector('#messages button.copy').textContent,
    clipboard: await navigator.clipboard.readText(),
  }));
  await page.evaluate(() => document.getElementById('messages').replaceChildren());

  step = 'attacks';
  const [small, large] = plan.sizes;
  results.attacks = [];
  for (const attack of plan.attacks) {
    step = 'attack ' + attack.name;
    const r = await page.evaluate(({ attack, small, large }) => {
      const b = window.__bench;
      const render = window.chitin.renderMarkdown;
      const old = window.__oldRenderMarkdown;
      const a = b.input(attack, small);
      const z = b.input(attack, large);
      const result = { name: attack.name, smallLen: a.length, largeLen: z.length };
      [result.newSmall, result.newLarge] = b.pair(render, a, z, 12);
      result.newLargeOnce = b.once(render, z);
      // The old renderer: the small size, then the large one if the small
      // was quick, else a size four times the small (quadratic: 16x).
      result.oldSmall = b.time(old, a, 5);
      result.oldBigLen = result.oldSmall < 20 ? large : small * 4;
      const big = b.input(attack, result.oldBigLen);
      const oldBigStart = performance.now();
      old(big);
      result.oldBig = performance.now() - oldBigStart;
      result.newAtOldBig = b.time(render, big, 5);
      return result;
    }, { attack, small, large });
    results.attacks.push(r);
  }

  step = 'stream';
  // A long pathological reply streamed in many deltas. Node checks that the
  // page answers while it streams; the page records its long tasks.
  await page.evaluate(() => {
    window.__longTasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longTasks.push(e.duration);
    }).observe({ type: 'longtask', buffered: false });
  });
  const before = await page.evaluate(() => ({ ...window.chitin.stats }));
  await page.fill('#input', plan.stream.ask);
  await page.press('#input', 'Enter');
  await page.waitForSelector('#messages .msg.assistant.streaming', WAIT);
  const pings = [];
  const deadline = Date.now() + WAIT.timeout;
  let sawPartial = false;
  for (;;) {
    const started = Date.now();
    const state = await page.evaluate((final) => {
      const all = [...document.querySelectorAll('#messages .msg.assistant')];
      const last = all[all.length - 1];
      return { done: !!last && !last.classList.contains('streaming') && last.textContent.includes(final), length: last ? last.dataset.text.length : 0 };
    }, plan.stream.final);
    pings.push(Date.now() - started);
    if (state.length > 0 && !state.done) sawPartial = true;
    if (state.done) break;
    if (Date.now() > deadline) throw new Error('the streamed reply never finished');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  await page.waitForSelector('#stop:disabled', WAIT);
  results.stream = await page.evaluate((before) => {
    const all = [...document.querySelectorAll('#messages .msg.assistant')];
    const div = all[all.length - 1];
    const started = performance.now();
    window.chitin.renderMarkdown(div.dataset.text);
    const finalRender = performance.now() - started;
    return {
      text: div.textContent,
      elements: [...new Set([...div.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()))],
      scripts: document.querySelectorAll('#messages script').length,
      pwned: window.__pwned !== undefined,
      deltas: window.chitin.stats.deltas - before.deltas,
      renders: window.chitin.stats.renders - before.renders,
      longTasks: window.__longTasks,
      finalRender,
    };
  }, before);
  results.stream.pings = pings.length;
  results.stream.maxPing = Math.max(...pings);
  results.stream.sawPartial = sawPartial;
  step = 'done';
}

main()
  .catch((e) => {
    results.error = `${step}: ${e && e.message ? e.message.split('\n')[0] : e}`;
  })
  .finally(() => {
    results.lastStep = step;
    process.stdout.write(JSON.stringify(results) + '\n');
  });

// Drives the gateway's web chat in Debian's Chromium for host/tests/e2e/webchat.rs.
//
//   node drive.js <gateway base url> <token>
//
// Prints one JSON object of observations on stdout; the Rust test asserts
// on them (this script only waits and records, so a failure shows up as a
// named step with what the page held at that moment). playwright-core
// drives the system browser: it never downloads one.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const [base, token] = process.argv.slice(2);
if (!base || !token) {
  console.error('usage: node drive.js <gateway base url> <token>');
  process.exit(2);
}
const CHROMIUM = process.env.CHITIN_CHROMIUM || '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const WAIT = { timeout: 20000 };

const results = {};
let step = 'start';

async function main() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'chitin-webchat-'));
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  results.pageErrors = errors;
  try {
    await run(page, context);
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

// The text of the assistant bubble being streamed, once it holds some text
// but not yet `final`.
async function partialOf(page, final) {
  const handle = await page.waitForFunction((final) => {
    const div = document.querySelector('#messages .msg.assistant.streaming');
    return div && div.textContent.length > 0 && !div.textContent.includes(final) ? div.textContent : null;
  }, final, { polling: 'raf', ...WAIT });
  return handle.jsonValue();
}

async function finalOf(page, final) {
  await page.waitForFunction((final) => {
    const all = [...document.querySelectorAll('#messages .msg.assistant:not(.streaming)')];
    return all.some((d) => d.textContent.includes(final));
  }, final, WAIT);
}

async function send(page, text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
}

async function run(page, context) {
  step = 'open';
  await page.goto(base + '/chat');
  await page.waitForSelector('#login:not([hidden])', WAIT);
  results.loginShown = true;

  step = 'wrong token';
  await page.fill('#token', 'not-the-token');
  await page.click('#login-button');
  await page.waitForSelector('#login-error:not([hidden])', WAIT);
  results.wrongToken = { error: await page.textContent('#login-error'), loginStillShown: await page.isVisible('#login') };

  step = 'token';
  await page.fill('#token', token);
  await page.click('#login-button');
  await page.waitForSelector('#login', { state: 'hidden', ...WAIT });
  await page.waitForSelector('#status.connected', WAIT);
  results.firstSession = await page.evaluate(() => window.chitin.session());

  step = 'streamed reply';
  await send(page, 'hello');
  const hint = await page.waitForSelector('#messages .hint', WAIT);
  results.hint = { text: await hint.textContent(), color: await hint.evaluate((e) => getComputedStyle(e).color) };
  results.stopEnabledWhileBusy = await page.isEnabled('#stop');
  results.partial = await partialOf(page, 'END-OF-REPLY');
  await finalOf(page, 'END-OF-REPLY');
  results.reply = await page.evaluate(() => {
    const div = [...document.querySelectorAll('#messages .msg.assistant')].pop();
    const link = div.querySelector('a');
    return {
      text: div.textContent,
      code: [...div.querySelectorAll('code')].map((c) => c.textContent),
      strong: [...div.querySelectorAll('strong')].map((c) => c.textContent),
      links: [...div.querySelectorAll('a')].map((a) => ({ href: a.getAttribute('href'), rel: a.getAttribute('rel'), text: a.textContent })),
      imgs: document.querySelectorAll('#messages img').length,
      elements: [...div.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
      pwned: window.__pwned === 1,
      userText: document.querySelector('#messages .msg.user').textContent,
      linkHref: link ? link.href : null,
    };
  });
  await page.waitForSelector('#stop:disabled', WAIT);
  results.hintsAfterTurn = await page.locator('#messages .hint').count();

  step = 'session list';
  await page.waitForFunction(() => [...document.querySelectorAll('#sessions li')].some((li) => li.textContent === 'hello'), null, WAIT);
  results.sessionsAfterFirst = await page.evaluate(() => [...document.querySelectorAll('#sessions li')].map((li) => ({ title: li.textContent, active: li.classList.contains('active') })));

  step = 'new session';
  await page.click('#new-session');
  await page.waitForSelector('#status.connected', WAIT);
  results.newSession = await page.evaluate(() => ({ id: window.chitin.session(), messages: document.querySelectorAll('#messages .msg').length }));

  step = 'reconnect';
  await send(page, 'second');
  results.partialBeforeDrop = await partialOf(page, 'SECOND-DONE');
  const before = await page.evaluate(() => ({ ...window.chitin.stats }));
  // The network goes away and the stream with it; the reply finishes on the
  // server meanwhile (it takes ~2 s), then the network comes back.
  await context.setOffline(true);
  await page.evaluate(() => window.chitin.dropStream());
  await page.waitForSelector('#status:not(.connected)', WAIT);
  // Wait (from Node, which is not offline) until the gateway has stored
  // the finished reply, so it can only reach the page through the history.
  const session = await page.evaluate(() => window.chitin.session());
  const deadline = Date.now() + WAIT.timeout;
  for (;;) {
    const res = await fetch(`${base}/chat/history?session=${session}`, { headers: { Authorization: `Bearer ${token}` } });
    const history = await res.json();
    if (history.messages.some((m) => m.text.includes('SECOND-DONE')) && !history.running) break;
    if (Date.now() > deadline) throw new Error('the gateway never stored the second reply: ' + JSON.stringify(history));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  results.shownWhileOffline = await page.evaluate(() => [...document.querySelectorAll('#messages .msg.assistant')].map((d) => d.textContent));
  await context.setOffline(false);
  await page.waitForFunction((n) => window.chitin.stats.connects > n, before.connects, WAIT);
  await finalOf(page, 'SECOND-DONE');
  const after = await page.evaluate(() => ({ ...window.chitin.stats }));
  results.reconnect = {
    before, after,
    assistant: await page.evaluate(() => [...document.querySelectorAll('#messages .msg.assistant')].map((d) => ({ text: d.textContent, streaming: d.classList.contains('streaming') }))),
    stopDisabled: await page.isDisabled('#stop'),
  };

  step = 'switch back';
  await page.click('#sessions li:text-is("hello")');
  await page.waitForSelector('#messages .msg.assistant code', WAIT);
  results.switchedBack = await page.evaluate(() => ({
    id: window.chitin.session(),
    messages: [...document.querySelectorAll('#messages .msg')].map((d) => d.className + ': ' + d.textContent.slice(0, 40)),
    code: document.querySelector('#messages .msg.assistant code').textContent,
  }));

  step = 'stop';
  await send(page, 'hang please');
  await page.waitForSelector('#stop:enabled', WAIT);
  await page.waitForSelector('#messages .hint', WAIT);
  await send(page, '/stop');
  await page.waitForSelector('#messages .msg.notice', WAIT);
  results.stopNotice = await page.textContent('#messages .msg.notice');
  await page.waitForSelector('#stop:disabled', WAIT);
  results.stopped = true;

  step = 'reload';
  await page.reload();
  await page.waitForSelector('#status.connected', WAIT);
  results.afterReload = await page.evaluate(() => ({
    loginHidden: document.querySelector('#login').hidden,
    id: window.chitin.session(),
    messages: [...document.querySelectorAll('#messages .msg')].map((d) => d.textContent.slice(0, 40)),
  }));

  step = 'tool progress';
  await page.click('#new-session');
  await page.waitForSelector('#status.connected', WAIT);
  await send(page, 'tool please');
  // The tool's hint: its plugin's progress text, marked done when it ends;
  // it stays while the answer streams, and goes with the turn.
  const toolHint = await page.waitForSelector('#messages .hint.done', WAIT);
  results.toolHint = {
    text: await toolHint.textContent(),
    call: await toolHint.evaluate((e) => e.dataset.call || null),
    hints: await page.locator('#messages .hint').count(),
  };
  await finalOf(page, 'TOOL-DONE');
  await page.waitForSelector('#stop:disabled', WAIT);
  results.hintsAfterToolTurn = await page.locator('#messages .hint').count();
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

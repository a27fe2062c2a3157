// The web chat of a gateway without a token (`auth_token = ""`), in
// Debian's Chromium, for host/tests/e2e/webchat.rs:
//
//   node authless.js <gateway base url> <foreign base url>
//
// 1. the page works on its own origin: no token asked, a message sent
//    (the browser adds `Origin`), the reply shown;
// 2. a page on a foreign origin (another port of 127.0.0.1, so the browser
//    treats it as another site but lets it reach loopback) sends the cross-
//    site requests an attacker would: a `no-cors` text/plain POST to
//    /chat/send (sent, the answer hidden) and a read of the history.
// Prints one JSON object of observations; the Rust test asserts on them and
// on what the gateway and the model saw.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const [base, foreign] = process.argv.slice(2);
if (!base || !foreign) {
  console.error('usage: node authless.js <gateway base url> <foreign base url>');
  process.exit(2);
}
const CHROMIUM = process.env.CHITIN_CHROMIUM || '/usr/bin/chromium';
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const WAIT = { timeout: 20000 };
const results = {};
let step = 'start';

async function main() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'chitin-authless-'));
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
  const page = context.pages()[0] || (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  results.pageErrors = errors;
  try {
    step = 'open';
    await page.goto(base + '/chat');
    await page.waitForSelector('#status.connected', WAIT);
    results.loginHidden = await page.evaluate(() => document.querySelector('#login').hidden);
    results.session = await page.evaluate(() => window.chitin.session());

    step = 'same-origin turn';
    await page.fill('#input', 'SAME-ORIGIN-SENTINEL');
    await page.press('#input', 'Enter');
    await page.waitForFunction(() => [...document.querySelectorAll('#messages .msg.assistant:not(.streaming)')].some((d) => d.textContent.includes('END-OF-REPLY')), null, WAIT);
    results.replied = true;

    step = 'foreign page';
    const foreignPage = await context.newPage();
    await foreignPage.goto(foreign + '/');
    results.foreign = await foreignPage.evaluate(async ({ base, session }) => {
      const out = {};
      try {
        const res = await fetch(base + '/chat/send', {
          method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
          body: JSON.stringify({ session, text: 'CROSS-SITE-SENTINEL' }),
        });
        out.sendType = res.type;
      } catch (e) {
        out.sendError = String(e);
      }
      try {
        const res = await fetch(base + '/chat/history?session=' + session);
        out.history = await res.text();
      } catch (e) {
        out.historyError = String(e);
      }
      return out;
    }, { base, session: results.session });
    step = 'done';
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main()
  .catch((e) => {
    results.error = `${step}: ${e && e.message ? e.message.split('\n')[0] : e}`;
  })
  .finally(() => {
    results.lastStep = step;
    process.stdout.write(JSON.stringify(results) + '\n');
  });

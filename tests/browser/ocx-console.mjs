// Drives headless Chromium to the OCX console as a person would: signs in
// on Fossil's login form, opens /ext/ocx-cgi/console, reads the question
// waiting there and presses its recommended option, then checks the page
// came back saying what was written. Run by tests/it/questions.rs; it
// exits non-zero on any failure.
import { chromium } from 'playwright-core';

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const question = need('OCX_QUESTION');
const profile = need('OCX_PROFILE');
const before = need('OCX_SHOT_BEFORE');
const after = need('OCX_SHOT_AFTER');

const check = (ok, what) => {
  if (!ok) throw new Error(what);
};

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
  viewport: { width: 1100, height: 900 },
});
try {
  const page = context.pages()[0] ?? (await context.newPage());

  await page.goto(`${base}/login`);
  await page.fill('#u', login);
  await page.fill('#p', password);
  await Promise.all([page.waitForNavigation(), page.click('input[name=in]')]);

  await page.goto(`${base}/ext/ocx-cgi/console`);
  check((await page.title()).endsWith('OCX console'), `the page's title is ${await page.title()}`);
  const card = page.locator(`#question-${question.slice(0, 10)}`);
  check(await card.isVisible(), 'the question is not on the console');
  const words = await card.innerText();
  check(words.includes('Ship 2.0 now?'), `the question's card says: ${words}`);
  check(words.includes('Read first'), `no reference on the card: ${words}`);
  check(await page.locator('#ocx-tools').isVisible(), 'no link to the tools');
  await page.screenshot({ path: before, fullPage: true });

  const press = card.locator('button.ocx-option').first();
  const label = await press.innerText();
  check(label.includes('(recommended)'), `the first button says ${label}`);
  await Promise.all([page.waitForNavigation(), press.click()]);
  const written = await page.locator('#ocx-written').innerText();
  check(written.startsWith('Written: your decision "Ship it" (decided)'), `after the press: ${written}`);
  check(!(await page.locator(`#question-${question.slice(0, 10)}`).count()), 'the question still waits');
  await page.screenshot({ path: after, fullPage: true });
  console.log(`ok: pressed "${label}"; ${written}`);
} finally {
  await context.close();
}

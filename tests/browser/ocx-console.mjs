// Drives headless Chromium to the OCX console as a person would: signs in
// on Fossil's login form, opens /ext/ocx-cgi/console, reads the question
// waiting there and presses its recommended option, then checks the page
// came back saying what was written. Run by tests/it/questions.rs; it
// exits non-zero on any failure.
import { check, need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const question = need('OCX_QUESTION');
const profile = need('OCX_PROFILE');
const before = need('OCX_SHOT_BEFORE');
const after = need('OCX_SHOT_AFTER');

const { context, page } = await signedIn(base, login, password, profile);
try {
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

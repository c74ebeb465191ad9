// Drives headless Chromium to the console's "New run" as an administrator
// would: signs in on Fossil's login form, opens /ext/ocx-cgi/console,
// reads the pattern's card (the record it would write), takes a
// screenshot, and presses its button; the page must come back with the
// record written. Run by tests/it/patterns.rs; it exits non-zero on any
// failure.
import { check, need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const pattern = need('OCX_PATTERN');
const objective = need('OCX_OBJECTIVE');
const profile = need('OCX_PROFILE');
const shot = need('OCX_SHOT');

const { context, page } = await signedIn(base, login, password, profile);
try {
  await page.goto(`${base}/ext/ocx-cgi/console`);
  check(await page.locator('#new-run').isVisible(), 'no "New run" on the console');
  const card = page.locator(`#pattern-${pattern}`);
  check(await card.isVisible(), `no card for the pattern ${pattern}`);
  const words = await card.innerText();
  for (const want of [objective, 'runner', 'echo', 'wakes on', 'check-ins on: dev', 'sandbox', '"network":false', 'budget', '"wall":"2h"', 'restrict', 'Written by admin']) {
    check(words.includes(want), `the card lacks ${want}: ${words}`);
  }
  check(await page.locator('#tool-create').isVisible(), 'no form for a record from scratch');
  await card.scrollIntoViewIfNeeded();
  await page.screenshot({ path: shot, fullPage: true });
  await Promise.all([page.waitForNavigation(), page.locator(`#pattern-${pattern}-create`).click()]);
  const body = await page.locator('body').innerText();
  check(body.includes('create: the answer'), `after the press: ${body.slice(0, 500)}`);
  check(!body.includes('Stopped:'), `the press was refused: ${body.slice(0, 800)}`);
  check(!body.includes('dry run'), `the press was only a dry run: ${body.slice(0, 800)}`);
  console.log('ok: the pattern written from the console');
} finally {
  await context.close();
}

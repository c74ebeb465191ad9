// Drives headless Chromium to the OCX console as a reviewer would: signs
// in on Fossil's login form, opens /ext/ocx-cgi/console, reads a held
// write's question there (what would be written, shown exactly), presses
// the option OCX_OPTION names (1 approves, 2 declines), then checks the
// page came back saying what was written. Run by tests/it/held_writes.rs;
// it exits non-zero on any failure.
import { check, need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const question = need('OCX_QUESTION');
const option = Number(need('OCX_OPTION'));
const shows = need('OCX_SHOWS');
const profile = need('OCX_PROFILE');
const shot = need('OCX_SHOT');

const { context, page } = await signedIn(base, login, password, profile);
try {
  await page.goto(`${base}/ext/ocx-cgi/console`);
  const card = page.locator(`#question-${question.slice(0, 10)}`);
  check(await card.isVisible(), 'the held write is not on the console');
  const held = card.locator('details.ocx-held');
  check(await held.isVisible(), 'the card does not show what would be written');
  const words = await held.innerText();
  check(words.includes(shows), `the card shows: ${words}`);
  await page.screenshot({ path: shot, fullPage: true });

  const press = card.locator('button.ocx-option').nth(option - 1);
  const label = await press.innerText();
  const chosen = option === 1 ? 'Approve' : 'Decline';
  check(label.startsWith(chosen), `option ${option} says ${label}`);
  await Promise.all([page.waitForNavigation(), press.click()]);
  const written = await page.locator('#ocx-written').innerText();
  check(written.startsWith(`Written: your decision "${chosen}" (decided)`), `after the press: ${written}`);
  check(!(await page.locator(`#question-${question.slice(0, 10)}`).count()), 'the question still waits');
  console.log(`ok: pressed "${label}"; ${written}`);
} finally {
  await context.close();
}

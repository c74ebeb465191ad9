// Follows a live run in headless Chromium as a maintainer would: signs in,
// opens the console, sees a record the test writes appear there by itself,
// follows the run's link to its page, and waits there
// (never reloading) for the turn the test's post starts to appear, the
// spend moving with it; once the test stops the run, sees it ended, and
// opens a tool's folded answer, fetched only then, to read it. As a
// reader (OCX_MODE=reader) opens the run's page and finds no transcript; as
// the record's sender (OCX_MODE=sender), finds its long transcript, its
// earlier entries shown when asked for.
// Tells the test where it is by a line on stdout and waits for its word
// on stdin; exits non-zero on any failure. Run by tests/it/run_page.rs.
import { createInterface } from 'node:readline';
import { check, need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const record = need('OCX_RECORD');
const profile = need('OCX_PROFILE');
const mode = process.env.OCX_MODE ?? 'maintainer';
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const said = async (what) => {
  console.log(what);
  const next = await lines.next();
  check(!next.done, `the test ended before it answered ${what}`);
};

const { context, page } = await signedIn(base, login, password, profile);
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
page.on('console', (m) => errors.push(`console: ${m.text()}`));
try {
  if (mode === 'sender') {
    await page.goto(`${base}/ext/ocx-cgi/run/${record}`);
    check((await page.title()).endsWith('OCX run'), `the page's title is ${await page.title()}`);
    check(!(await page.locator('#ocx-withheld').count()), 'the sender is refused the transcript');
    // A long transcript: its last entries sent, the earlier ones shown
    // when asked for, in their order before them.
    const entries = page.locator('#ocx-transcript li');
    const sent = await entries.count();
    const all = await page.evaluate(async () => (await (await fetch(`${location.pathname}?json`)).json()).result.transcript.length);
    check(sent < all && (await page.locator('#ocx-earlier').isVisible()), `${sent} of ${all} entries sent, and no way to the rest`);
    const lastSent = await entries.last().innerText();
    await page.locator('#ocx-earlier button').click();
    await page.waitForFunction((n) => document.querySelectorAll('#ocx-transcript li').length === n, all, { timeout: 30000 });
    check(!(await page.locator('#ocx-earlier').count()), 'the way to the earlier entries stays once they are shown');
    const first = await entries.first().innerText();
    check(first.includes('Delivered'), `the sender's transcript begins: ${first}`);
    check((await entries.last().innerText()) === lastSent, 'the earlier entries were not put before the last ones');
    console.log('ok: the record\'s sender sees its transcript, the earlier entries when asked');
  } else if (mode === 'reader') {
    await page.goto(`${base}/ext/ocx-cgi/run/${record}`);
    check((await page.title()).endsWith('OCX run'), `the page's title is ${await page.title()}`);
    check(await page.locator('table.ocx-record').isVisible(), 'no record table');
    check(await page.locator('#ocx-withheld').isVisible(), 'the reader is not told why there is no transcript');
    check((await page.locator('#ocx-transcript li').count()) === 0, 'the reader sees transcript entries');
    console.log('ok: a reader sees the run, not its transcript');
  } else {
    await page.goto(`${base}/ext/ocx-cgi/console`);
    const card = page.locator(`#run-${record.slice(0, 16)}`);
    check(await card.isVisible(), 'the run is not on the console');
    await page.screenshot({ path: need('OCX_SHOT_CONSOLE'), fullPage: true });
    // A record written while the console is open: the console shows it
    // by itself, never reloaded.
    await page.evaluate(() => { window.ocxStayed = true; });
    await said('on the console');
    await page
      .locator('section.ocx-run', { hasText: 'Arrives while the console is open' })
      .waitFor({ timeout: 60000 });
    check(await page.evaluate(() => window.ocxStayed === true), 'the console was reloaded');
    console.log('ok: the console showed what arrived by itself');
    await Promise.all([page.waitForNavigation(), card.locator('a.ocx-run-page').click()]);
    check((await page.title()).endsWith('OCX run'), `the page's title is ${await page.title()}`);
    const table = await page.locator('table.ocx-record').innerText();
    check(table.includes('Review what you are given'), `the record's table says: ${table}`);
    check((await page.locator('#ocx-transcript li').count()) > 0, 'no transcript on the page');
    const spentBefore = await page.locator('#ocx-spend').innerText();
    await page.evaluate(() => { window.ocxStayed = true; });
    await said('on the page');
    const turn = page.locator('#ocx-transcript li.ocx-words', { hasText: 'It is 4.' });
    await turn.waitFor({ timeout: 90000 });
    check(await page.evaluate(() => window.ocxStayed === true), 'the page was reloaded');
    await page
      .waitForFunction(
        (before) => document.getElementById('ocx-spend').textContent !== before,
        spentBefore,
        { timeout: 30000 },
      )
      .catch(async () => {
        const now = await page.evaluate(async () => (await fetch(location.pathname + '?json')).text());
        throw new Error(`the spend did not move from "${spentBefore}": "${await page.locator('#ocx-spend').innerText()}"; errors ${errors.join(' | ')}; entries ${await page.locator('#ocx-transcript li').count()}`);
      });
    await page.screenshot({ path: need('OCX_SHOT_RUNNING'), fullPage: true });
    await said('seen the turn');
    await page.waitForFunction(
      () => document.getElementById('ocx-state').textContent.startsWith('Ended'),
      null,
      { timeout: 90000 },
    );
    check(await page.evaluate(() => window.ocxStayed === true), 'the page was reloaded');
    await page.reload();
    const last = await page.locator('#ocx-transcript li').last().innerText();
    check(last.includes('The run ended stopped'), `the last entry says: ${last}`);
    // A tool's answer comes folded, its output not sent until opened;
    // opened, it shows the output the transcript holds.
    const answered = page.locator('#ocx-transcript li.ocx-tool_result').first();
    check(await answered.count(), 'no tool result in the transcript');
    check(!(await answered.locator('pre').count()), 'a folded output was sent with the page');
    const seq = Number(await answered.locator('details').getAttribute('data-fetch'));
    check(seq > 0, 'the fold does not say which entry to fetch');
    await answered.locator('summary').click();
    const shown = answered.locator('pre');
    await page.waitForFunction(
      (li) => { const p = li.querySelector('pre'); return p && !p.textContent.startsWith('Fetching'); },
      await answered.elementHandle(),
      { timeout: 30000 },
    );
    const held = await page.evaluate(async (n) => {
      const a = await (await fetch(`${location.pathname}?json`)).json();
      return a.result.transcript.find((e) => e.seq === n).output;
    }, seq);
    const text = await shown.innerText();
    check(held.includes('2+2') && text.trim() === held.trim(), `the opened output shows "${text}", the transcript holds "${held}"`);
    check(await shown.isVisible(), 'the opened output is not shown');
    console.log('ok: a folded output opened shows its text');
    await page.screenshot({ path: need('OCX_SHOT_ENDED'), fullPage: true });
    const body = await page.content();
    check(!body.includes(need('OCX_SECRET')), 'a secret is on the page');
    console.log('ok: followed the run to its end');
  }
} finally {
  await context.close();
}
process.exit(0);

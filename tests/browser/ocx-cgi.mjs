// Drives headless Chromium against OCX's web page, as a person would: signs
// in on Fossil's login form, opens the OCX page, posts a reply through the
// post card's form, and sends a POST built on another page of the site,
// which must write nothing. Run by tests/it/cgi.rs; it exits non-zero on
// any failure.
import { check, need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const thread = need('OCX_THREAD');
const profile = need('OCX_PROFILE');
const shot = need('OCX_SHOT');

const { context, page } = await signedIn(base, login, password, profile);
try {
  await page.goto(`${base}/ext/ocx-cgi`);
  check((await page.title()).endsWith('OCX console'), `a signed-in person lands on ${await page.title()}`);
  await Promise.all([page.waitForNavigation(), page.click('#ocx-tools')]);
  check((await page.title()).endsWith('OCX'), `the page's title is ${await page.title()}`);
  const cards = await page.locator('section.ocx-card').count();
  const tools = Number(need('OCX_TOOLS'));
  check(cards === tools, `${cards} cards, not ${tools}`);
  check(await page.locator('#tool-post form').isVisible(), 'no form on the post card');
  const who = await page.locator('.ocx-who').innerText();
  check(who.includes(`Signed in as ${login}`), `the page says: ${who}`);
  await page.screenshot({ path: shot, fullPage: false });

  await page.fill('#post-to', thread);
  await page.fill('#post-text', 'Replied from Chromium');
  await Promise.all([page.waitForNavigation(), page.click('#post-submit')]);
  const answer = await page.locator('.ocx-answer').innerText();
  check(answer.includes(`stored 1 artifact as ${login}`), `the reply's answer: ${answer}`);
  check(!answer.includes('Dry run'), `the reply was a dry run: ${answer}`);

  await page.goto(`${base}/doc/trunk/forged.html`);
  await Promise.all([
    page.waitForNavigation(),
    page.evaluate(([to]) => {
      const form = document.createElement('form');
      form.method = 'POST';
      form.action = '/ext/ocx-cgi/post';
      for (const [name, value] of [['to', to], ['text', 'Forged from another page']]) {
        const input = document.createElement('input');
        input.type = 'hidden';
        input.name = name;
        input.value = value;
        form.appendChild(input);
      }
      document.body.appendChild(form);
      form.submit();
    }, [thread]),
  ]);
  const forged = await page.locator('body').innerText();
  check(forged.includes("did not come from OCX's own page"), `the forged POST's page: ${forged}`);
  check(forged.includes('Dry run: nothing was written'), `the forged POST wrote: ${forged}`);
  console.log('ok: signed in, replied through the form, the forged POST wrote nothing');
} finally {
  await context.close();
}

// What the browser tests share: their settings read from the environment,
// a check that throws, and headless Chromium started with a profile of its
// own and signed in on Fossil's login form as a person would.
import { chromium } from 'playwright-core';

export const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};

export const check = (ok, what) => {
  if (!ok) throw new Error(what);
};

// Starts Chromium and signs LOGIN in at BASE; the context (to close) and
// its page.
export async function signedIn(base, login, password, profile) {
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
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(`${base}/login`);
  await page.fill('#u', login);
  await page.fill('#p', password);
  await Promise.all([page.waitForNavigation(), page.click('input[name=in]')]);
  return { context, page };
}

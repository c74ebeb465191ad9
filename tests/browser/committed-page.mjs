// Opens pages a committer wrote, as a signed-in person would, in headless
// Chromium: each path of OCX_PATHS (one a line) is visited and left a
// moment, and what its scripts did is read from the console (a script
// that runs says `ocx-script-ran`, each script the policy refuses is
// said by a listener put in every document first). Prints
// one JSON line a path; run by tests/it/attack_pages.rs.
import { need, signedIn } from './person.mjs';

const base = need('OCX_BASE');
const login = need('OCX_LOGIN');
const password = need('OCX_PASSWORD');
const profile = need('OCX_PROFILE');
const paths = need('OCX_PATHS').split('\n').filter((p) => p);

const { context, page } = await signedIn(base, login, password, profile);
try {
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) =>
      console.log(`ocx-refused ${e.effectiveDirective} ${e.blockedURI}`));
  });
  for (const path of paths) {
    const said = [];
    const hear = (m) => said.push(m.text());
    page.on('console', hear);
    await page.goto(`${base}${path}`);
    await page.waitForTimeout(1500);
    page.off('console', hear);
    const ran = said.filter((t) => t.includes('ocx-script-ran')).length;
    const refused = said.filter((t) => t.startsWith('ocx-refused')).length;
    console.log(JSON.stringify({ path, ran, refused, said }));
  }
} finally {
  await context.close();
}

// Drives the console page in Debian's Chromium (headless, through playwright-core) as a user
// does, for tests/console.rs: node run.mjs <base url> <token> <ids JSON> <screenshot dir>.
// Prints one JSON object: what each step saw, and the pixel census of each screenshot.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [url, token, idsJson, shots] = process.argv.slice(2);
const ids = JSON.parse(idsJson);
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const out = { steps: {}, shots: {}, console: [] };
out.failed = [];
/** A page (a tab of its own: its own session storage) whose errors and refusals are recorded. */
async function tab() {
  const p = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // Failed loads are reported by URL below, not as console noise.
  p.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) out.console.push(m.text());
  });
  p.on("response", (r) => { if (r.status() >= 400) out.failed.push(`${r.status()} ${new URL(r.url()).pathname}`); });
  p.on("pageerror", (e) => out.console.push(`pageerror: ${e.message}`));
  return p;
}
let page = await tab();

/** What of the app a user could see: its elements the browser would render (computed styles). */
const appVisible = () => page.evaluate(() => ({
  display: getComputedStyle(document.getElementById("app")).display,
  visible: [...document.querySelectorAll("#app, #app *")].filter((e) => e.checkVisibility({ visibilityProperty: true })).length,
  box: document.getElementById("app").getBoundingClientRect().height,
}));
const timeout = 20000;

async function shot(name) {
  const file = join(shots, `${name}.png`);
  const png = await page.screenshot({ path: file, fullPage: false });
  out.shots[name] = { file, base64: png.toString("base64") };
}

async function openExecution(id) {
  await page.click("#refresh");
  await page.locator(`#executions li[data-id="${id}"]`).click({ timeout });
  await page.locator("#exec-id", { hasText: id }).waitFor({ timeout });
}

try {
  // Signing in: the page asks for a token, and nothing of the app shows until then; a
  // wrong one is refused.
  await page.goto(`${url}/console`);
  await page.locator("#sign-in").waitFor({ state: "visible", timeout });
  out.steps.appBeforeSignIn = await appVisible();
  await shot("sign-in");
  await page.fill("#token", "not-the-token-0123456789");
  await page.click("#sign-in-form button");
  await page.locator("#sign-in-error", { hasText: "refused" }).waitFor({ timeout });
  out.steps.appAfterRefusal = await appVisible();
  out.steps.wrongTokenRefused = true;

  // The link `harness serve` prints: a one-time code, gone from the address bar and the
  // tab's history at once, exchanged for the token.
  await page.goto("about:blank");
  await page.goto(`${url}/console#code=${ids.code}`);
  await page.locator("#app").waitFor({ state: "visible", timeout });
  await page.locator("#start-adapter option").first().waitFor({ state: "attached", timeout });
  out.steps.appAfterSignIn = await appVisible();
  const seen = [page.url(), await page.evaluate(() => location.href)];
  out.steps.historyLength = await page.evaluate(() => history.length);
  // Every entry of the tab's history, walked back and forth.
  await page.goBack();
  seen.push(page.url());
  await page.goForward();
  seen.push(page.url(), await page.evaluate(() => location.href));
  await page.locator("#app").waitFor({ state: "visible", timeout });
  out.steps.addresses = seen;
  // The code works once: another tab given the same link is asked for the token.
  const second = await tab();
  const first = page;
  page = second;
  await page.goto(`${url}/console#code=${ids.code}`);
  await page.locator("#sign-in-error", { hasText: "used or expired" }).waitFor({ timeout });
  out.steps.codeAgain = await page.textContent("#sign-in-error");
  out.steps.codeAgainAddress = page.url();
  // A token typed into the form signs in too.
  await page.fill("#token", token);
  await page.click("#sign-in-form button");
  await page.locator("#app").waitFor({ state: "visible", timeout });
  out.steps.typedTokenSignsIn = true;
  await page.close();
  page = first;
  await page.locator("#start-adapter option").first().waitFor({ state: "attached", timeout });

  // Start the quickstart from the page, watch it to its approval, edit the arguments.
  await page.fill("#start-message", "Summarize my notes");
  await page.click("#start-form button[type=submit]");
  const approval = page.locator(".action");
  await approval.waitFor({ timeout });
  out.steps.streamedText = await page.locator("#transcript .message").first().textContent();
  out.steps.stateAtApproval = await page.textContent("#exec-state");
  await page.locator("#tools .status.awaiting").first().waitFor({ timeout });
  out.steps.toolStatusAtApproval = await page.locator("#tools .status").allTextContents();
  await shot("approval");
  const call = approval.locator(".call").first();
  out.steps.tool = await call.locator(".tool").textContent();
  await call.locator('input[value="edit"]').check();
  // Arguments the tool's schema refuses: the page says so before anything is sent.
  await call.locator('[data-role="arguments"]').fill('{"path": ""}');
  await approval.locator('[data-role="submit"]').click();
  out.steps.editRefused = await approval.locator(".error").textContent();
  await call.locator('[data-role="arguments"]').fill(
    JSON.stringify({ path: "notes/edited.md", content: "# Edited in the console\n" }),
  );
  await approval.locator('[data-role="submit"]').click();
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  out.steps.outcome = await page.textContent("#outcome");
  out.steps.toolStatus = await page.textContent("#tools .status");
  out.steps.artifacts = await page.locator("#artifacts li").allTextContents();
  out.steps.startedId = await page.textContent("#exec-id");
  await shot("succeeded");

  // A form: fill it in and submit.
  await openExecution(ids.form);
  const form = page.locator(".action");
  await form.waitFor({ timeout });
  await shot("form");
  await form.locator('[data-role="submit"]').click();
  out.steps.formRequired = await form.locator(".error").textContent();
  await form.locator('[data-field="name"]').fill("Ada");
  await form.locator('[data-field="color"]').selectOption("green");
  await form.locator('[data-field="count"]').fill("3");
  await form.locator('[data-role="submit"]').click();
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  out.steps.formOutcome = await page.textContent("#outcome");

  // An approval whose arguments hold a right-to-left override and a zero-width space: each
  // shown marked, and said so beside the decision buttons; a failed tool call in colour.
  await openExecution(ids.bidi);
  const bidi = page.locator(".action");
  await bidi.waitFor({ timeout });
  await page.locator('#tools li[data-call="call_read"] .status.failure').waitFor({ timeout });
  out.steps.bidiShown = await bidi.locator('[data-role="shown-arguments"]').textContent();
  out.steps.bidiMarks = await bidi.locator("mark.hidden-char").allTextContents();
  out.steps.bidiNote = await bidi.locator('.buttons [data-role="hidden-note"]').textContent();
  out.steps.bidiToolList = await page.locator('#tools li[data-call="call_bidi"] pre').textContent();
  await bidi.locator('input[value="edit"]').check();
  out.steps.bidiEditBox = await bidi.locator('[data-role="arguments"]').inputValue();
  out.steps.failedTool = await page.locator('#tools li[data-call="call_read"] .status').evaluate((n) => ({
    text: n.textContent, background: getComputedStyle(n).backgroundColor,
  }));
  await shot("bidi");
  // The page's rule for hidden characters, over every code point, as ranges.
  out.steps.hiddenRanges = await page.evaluate(() => {
    const ranges = [];
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      if (!window.harnessVisible.isHidden(cp)) continue;
      const last = ranges[ranges.length - 1];
      if (last && last[1] === cp - 1) last[1] = cp;
      else ranges.push([cp, cp]);
    }
    return ranges;
  });
  // The edit box's escaped arguments are the same arguments: approve the edit unchanged.
  await bidi.locator('[data-role="submit"]').click();
  await page.locator("#outcome.succeeded").waitFor({ timeout });

  // Hostile text stays text.
  await openExecution(ids.hostile);
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  out.steps.hostileText = await page.textContent("#transcript");
  out.steps.hostileElements = await page.locator("#transcript img, #transcript b, #transcript script").count();
  out.steps.pwned = await page.evaluate(() => window.__pwned === 1);

  // Cancel a running one.
  await openExecution(ids.hanging);
  await page.locator("#transcript .message").first().waitFor({ timeout });
  await page.click("#cancel");
  await page.locator("#outcome.cancelled").waitFor({ timeout });
  out.steps.cancelOutcome = await page.textContent("#outcome");
  out.steps.cancelState = await page.textContent("#exec-state");
  await shot("cancelled");
  out.steps.listed = await page.locator("#executions li").count();

  // The list's columns: adapter, the message's first words, started, duration, outcome.
  await page.click("#refresh");
  const row = page.locator(`#executions li[data-id="${out.steps.startedId}"]`);
  await row.locator(".outcome.succeeded").waitFor({ timeout });
  out.steps.row = {
    adapter: await row.locator(".adapter").textContent(),
    message: await row.locator(".message").textContent(),
    started: await row.locator(".started").getAttribute("datetime"),
    startedText: await row.locator(".started").textContent(),
    duration: await row.locator(".duration").textContent(),
    outcome: await row.locator(".outcome").textContent(),
    state: await row.locator(".state").textContent(),
  };
  const running = page.locator(`#executions li[data-id="${ids.form}"]`);
  out.steps.formRow = await running.locator(".outcome").textContent();
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e);
  await shot("failure").catch(() => {});
}

// The pixel census of each screenshot, decoded by the browser itself on a blank page.
const census = await browser.newPage();
for (const [name, s] of Object.entries(out.shots)) {
  s.census = await census.evaluate(async (b64) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const canvas = document.createElement("canvas");
    canvas.width = img.width;
    canvas.height = img.height;
    const ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const { data } = ctx.getImageData(0, 0, img.width, img.height);
    const colours = new Set();
    const near = { ok: [0x2e, 0x7d, 0x32], wait: [0xb2, 0x6a, 0x00], stop: [0x6a, 0x1b, 0x9a], accent: [0x1f, 0x5f, 0xbf] };
    const counts = Object.fromEntries(Object.keys(near).map((k) => [k, 0]));
    for (let i = 0; i < data.length; i += 4) {
      colours.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
      for (const [k, [r, g, b]] of Object.entries(near)) {
        if (Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) < 24) counts[k]++;
      }
    }
    return { width: img.width, height: img.height, colours: colours.size, ...counts };
  }, s.base64);
  delete s.base64;
}
await browser.close();
console.log(JSON.stringify(out));

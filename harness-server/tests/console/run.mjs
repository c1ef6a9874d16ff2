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
  const p = await browser.newPage({ viewport: { width: 1280, height: 800 } });
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

async function shot(name, keys = []) {
  const file = join(shots, `${name}.png`);
  const png = await page.screenshot({ path: file, fullPage: false });
  // What the screenshot shows: the page no wider than the viewport, and where each key element is.
  const layout = await page.evaluate((selectors) => ({
    innerWidth,
    innerHeight,
    scrollWidth: document.documentElement.scrollWidth,
    keys: Object.fromEntries(selectors.map((sel) => {
      const node = document.querySelector(sel);
      if (!node) return [sel, null];
      const r = node.getBoundingClientRect();
      return [sel, { visible: node.checkVisibility({ visibilityProperty: true }), left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height }];
    })),
  }), keys);
  out.shots[name] = { file, base64: png.toString("base64"), layout };
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
  // Both of the page's first calls are refused (waited for: a navigation would cancel one).
  const refusals = Promise.all(["/v1/adapters", "/v1/executions"].map((path) =>
    page.waitForResponse((r) => new URL(r.url()).pathname === path, { timeout })));
  await page.click("#sign-in-form button");
  await refusals;
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
  // Answered no sooner than 1.2 s after it was asked: the timeline's awaited time is at least that.
  await page.waitForTimeout(1200);
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

  // The timeline of the quickstart started above: each event with its time after the start,
  // the approval's wait, the tool call's duration; the steps; the timing summary.
  await openExecution(out.steps.startedId);
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  await page.locator('#steps li[data-step="end"]').waitFor({ timeout });
  out.steps.timeline = await page.locator("#timeline li").evaluateAll((lis) => lis.map((li) => ({
    seq: Number(li.dataset.seq), last: Number(li.dataset.last), kind: li.querySelector(".kind").textContent,
    at: li.querySelector("time").textContent, iso: li.querySelector("time").getAttribute("datetime"),
    took: li.querySelector(".took").textContent, link: li.querySelector("a.seq").getAttribute("href"),
  })));
  out.steps.steps = await page.locator("#steps li").evaluateAll((lis) => lis.map((li) => ({
    step: li.dataset.step, type: li.querySelector(".step-type").textContent, took: li.querySelector(".took").textContent,
    what: li.querySelector(".what").textContent,
  })));
  out.steps.timing = await page.locator("#timing dd").evaluateAll((dds) => Object.fromEntries(dds.map((d) => [d.dataset.timing, d.textContent])));
  await page.evaluate(() => document.getElementById("timing").scrollIntoView());
  await shot("timeline", ["#timing", "#steps", "#timeline"]);

  // A deep link to one event (the approval's answer) survives a reload, and lands there.
  const resolved = out.steps.timeline.find((r) => r.kind === "action.resolved");
  const deep = `${url}/console${resolved.link}`;
  await page.goto(deep);
  await page.reload();
  await page.locator("#timeline li.target").waitFor({ timeout });
  // Landed: the event's row has the focus (it is scrolled to once the events so far are in).
  const landed = async () => {
    await page.waitForFunction(
      () => document.activeElement && document.activeElement.classList.contains("target"), null, { timeout },
    ).catch(() => null);
    const targeted = page.locator("#timeline li.target");
    return {
      seq: Number(await targeted.getAttribute("data-seq")),
      focused: await page.evaluate(() => document.activeElement && document.activeElement.classList.contains("target")),
      inView: await targeted.evaluate((li) => { const r = li.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }),
      exec: await page.textContent("#exec-id"),
      address: page.url(),
    };
  };
  out.steps.deepLink = { wanted: resolved.seq, link: resolved.link, afterReload: await landed() };
  // A link to an event the execution does not have: said so.
  await page.goto(`${url}/console#/executions/${encodeURIComponent(out.steps.startedId)}/events/9999`);
  await page.reload();
  await page.locator("#exec-error", { hasText: "9999" }).waitFor({ timeout });
  out.steps.deepLink.missing = await page.textContent("#exec-error");
  // In a tab without a token: signed in first, then shown the event; no token in any address.
  {
    const fresh = await tab();
    const before = page;
    page = fresh;
    await page.goto(deep);
    await page.locator("#sign-in").waitFor({ state: "visible", timeout });
    out.steps.deepLink.beforeSignIn = { address: page.url(), app: await appVisible() };
    await page.fill("#token", token);
    await page.click("#sign-in-form button");
    await page.locator("#timeline li.target").waitFor({ timeout });
    out.steps.deepLink.afterSignIn = await landed();
    out.steps.deepLink.history = await page.evaluate(() => history.length);
    await page.close();
    page = before;
  }

  // Filters: search text, state, adapter and time range narrow the list in the page.
  await page.goto(`${url}/console#/`);
  await page.locator(`#executions li[data-id="${ids.hanging}"]`).waitFor({ timeout });
  const shown = () => page.locator("#executions li:not([hidden])").evaluateAll((lis) => lis.map((li) => li.dataset.id));
  const filters = { all: await shown() };
  await page.fill("#filter-text", "summarize");
  filters.text = await shown();
  filters.textCount = await page.textContent("#list-count");
  await page.fill("#filter-text", "");
  await page.selectOption("#filter-state", "cancelled");
  filters.cancelled = await shown();
  await page.selectOption("#filter-state", "active");
  filters.active = await shown();
  await page.selectOption("#filter-state", "");
  await page.selectOption("#filter-adapter", "scripted");
  filters.adapter = await shown();
  await page.selectOption("#filter-since", "15m");
  filters.recent = await shown();
  await page.selectOption("#filter-adapter", "");
  await page.selectOption("#filter-since", "");
  filters.reset = await shown();
  out.steps.filters = filters;

  // Live: an execution started elsewhere appears without a reload, badged as awaiting an
  // answer; the `a` key on its focused approval approves it.
  const started = await fetch(`${url}/v1/executions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ adapter: "scripted", message: "Arrives on its own", conversationId: "conv-live-1" }),
  }).then((r) => r.json());
  const live = page.locator(`#executions li[data-id="${started.id}"]`);
  await live.locator(".badge:not([hidden])").waitFor({ timeout });
  out.steps.live = {
    id: started.id,
    isNew: await live.evaluate((li) => li.classList.contains("new")),
    badge: await live.locator(".badge").textContent(),
    count: await page.textContent("#awaiting-count"),
    title: await page.title(),
    first: await page.locator("#executions li").first().getAttribute("data-id"),
  };
  await shot("live", ["#executions", "#awaiting-count"]);
  await live.locator("a").click();
  await page.locator(".action").waitFor({ timeout });
  await page.keyboard.press("?");
  out.steps.help = { open: await page.evaluate(() => document.getElementById("help").open), text: await page.textContent("#help") };
  await page.keyboard.press("Escape");
  out.steps.help.closed = await page.evaluate(() => !document.getElementById("help").open);
  await page.keyboard.press("p");
  out.steps.live.focused = await page.evaluate(() => document.activeElement.classList.contains("action"));
  await page.keyboard.press("a");
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  out.steps.live.outcome = await page.textContent("#outcome");
  await live.locator(".badge[hidden]").waitFor({ state: "attached", timeout });
  out.steps.live.countAfter = await page.evaluate(() => document.getElementById("awaiting-count").hidden);

  // A follow-up turn: same adapter, same conversation; its approval rejected with `r`.
  await page.locator("#follow-up-message:not([disabled])").waitFor({ timeout });
  out.steps.conversation = await page.textContent('[data-role="conversation"]');
  await page.fill("#follow-up-message", "Now the other notes");
  await page.click("#follow-up-form button[type=submit]");
  await page.waitForFunction((before) => {
    const now = document.getElementById("exec-id").textContent;
    return now && now !== before;
  }, started.id, { timeout });
  const followed = page.locator(".action");
  await followed.waitFor({ timeout });
  out.steps.followUp = {
    id: await page.textContent("#exec-id"),
    conversation: await page.textContent('[data-role="conversation"]'),
    adapter: await page.textContent("#exec-adapter"),
    address: page.url(),
  };
  await followed.focus();
  await page.keyboard.press("r");
  await page.locator("#outcome:not(:empty)").waitFor({ timeout });
  out.steps.followUp.outcome = await page.textContent("#outcome");
  out.steps.followUp.tool = await page.textContent("#tools .status");

  // The artifact viewer: text, JSON indented, an image, a diff (bytes on this server, read
  // without the token), and an address elsewhere shown, not fetched.
  const files = {
    "/files/report.txt": ["text/plain", "The report, in plain text.\nSecond line."],
    "/files/data.json": ["application/json", '{"b":[1,2],"a":{"c":"d"}}'],
    "/files/change.diff": ["text/x-diff", "--- a/notes.md\n+++ b/notes.md\n@@ -1,2 +1,2 @@\n context\n-old line\n+new line\n"],
  };
  // An image: the sign-in screenshot taken above.
  const pictureBase64 = out.shots["sign-in"].base64;
  const fetched = [];
  await page.route(`${url}/files/**`, async (r) => {
    const path = new URL(r.request().url()).pathname;
    fetched.push({ path, auth: r.request().headers().authorization !== undefined });
    const [type, body] = path === "/files/picture.png"
      ? ["image/png", Buffer.from(pictureBase64, "base64")]
      : path === "/files/huge.txt" ? ["text/plain", "x".repeat(2 * 1024 * 1024)] : files[path];
    await r.fulfill({ status: 200, contentType: type, body });
  });
  await openExecution(ids.artifacts);
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  const viewer = page.locator("#artifact-view");
  const view = async (name) => {
    await page.locator(`#artifacts li:has-text("${name}") [data-role="view-artifact"]`).click();
    await viewer.locator("#artifact-title", { hasText: name }).waitFor({ timeout });
    await viewer.locator('[data-role="artifact-content"] > *').first().waitFor({ timeout });
  };
  const artifacts = {};
  await view("report.txt");
  artifacts.text = await viewer.locator('[data-role="artifact-text"]').textContent();
  await view("data.json");
  artifacts.json = await viewer.locator('[data-role="artifact-json"]').textContent();
  artifacts.metadata = await viewer.locator('[data-role="artifact-metadata"]').textContent();
  await view("change.diff");
  artifacts.diff = await viewer.locator('[data-role="artifact-diff"] span').evaluateAll((spans) => spans.map((s) => [s.className, s.textContent.replace(/\n$/, "")]));
  artifacts.diffColours = await viewer.locator('[data-role="artifact-diff"] span.add').evaluate((n) => getComputedStyle(n).backgroundColor);
  await view("picture.png");
  await page.waitForFunction(() => { const i = document.querySelector('[data-role="artifact-image"]'); return i && i.complete && i.naturalWidth > 0; }, null, { timeout });
  artifacts.image = await viewer.locator('[data-role="artifact-image"]').evaluate((i) => ({ width: i.naturalWidth, height: i.naturalHeight, src: i.src.slice(0, 5) }));
  await shot("artifact", ["#artifact-view"]);
  await view("elsewhere.txt");
  artifacts.elsewhere = await viewer.locator('[data-role="artifact-content"]').textContent();
  await view("api.json");
  artifacts.api = await viewer.locator('[data-role="artifact-content"]').textContent();
  await view("huge.txt");
  artifacts.huge = await viewer.locator('[data-role="artifact-content"]').textContent();
  artifacts.fetched = fetched;
  out.steps.artifactViewer = artifacts;

  // The adapters: capabilities, health, and what of certification the manifest says.
  await page.click("#nav-adapters");
  const card = page.locator('.adapter-card[data-adapter="scripted"]');
  await card.waitFor({ timeout });
  out.steps.adapters = {
    address: page.url(),
    health: await card.locator('[data-role="health"]').textContent(),
    capabilities: await card.locator("tr[data-capability]").evaluateAll((trs) => Object.fromEntries(trs.map((tr) => [tr.dataset.capability, tr.querySelector(".level").textContent]))),
    facts: await card.locator("dl").textContent(),
    detailHidden: await page.evaluate(() => document.getElementById("detail").hidden),
    current: await page.getAttribute("#nav-adapters", "aria-current"),
  };
  await shot("adapters", [".adapter-card", "#executions"]);

  // Accessibility: every field has a label; the keyboard's focus is visible and goes in the
  // page's order; text contrast is at least 4.5:1.
  await page.goto(`${url}/console#/executions/${encodeURIComponent(out.steps.startedId)}`);
  await page.reload();
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  out.steps.a11y = await page.evaluate(() => {
    const visible = (n) => n.checkVisibility({ visibilityProperty: true });
    const unlabelled = [...document.querySelectorAll("input, select, textarea")]
      .filter(visible)
      .filter((n) => !(n.labels && n.labels.length) && !n.getAttribute("aria-label"))
      .map((n) => n.id || n.outerHTML.slice(0, 60));
    const lum = (rgb) => {
      const [r, g, b] = rgb.match(/[\d.]+/g).slice(0, 3).map((v) => Number(v) / 255)
        .map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const background = (n) => {
      for (let x = n; x; x = x.parentElement) {
        const c = getComputedStyle(x).backgroundColor;
        if (c && !/rgba\(.*, 0\)$/.test(c) && c !== "transparent") return c;
      }
      return "rgb(255, 255, 255)";
    };
    const lows = [];
    let checked = 0;
    for (const n of document.querySelectorAll("body *")) {
      if (!visible(n) || ![...n.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim())) continue;
      const a = lum(getComputedStyle(n).color);
      const b = lum(background(n));
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      checked++;
      if (ratio < 4.5) lows.push(`${n.tagName}.${n.className}: ${ratio.toFixed(2)}`);
    }
    return { unlabelled, lows, checked };
  });
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  const order = [];
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press("Tab");
    order.push(await page.evaluate(() => {
      const n = document.activeElement;
      const s = getComputedStyle(n);
      return { id: n.id || n.getAttribute("href") || n.tagName, outline: `${s.outlineStyle} ${s.outlineWidth}` };
    }));
  }
  out.steps.a11y.order = order;

  // Phone width: nothing wider than the screen, the list and the execution in reach.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${url}/console#/`);
  await page.locator("#executions li").first().waitFor({ timeout });
  await shot("phone-list", ["#executions", "#start-form", "#filters", "header"]);
  await page.goto(`${url}/console#/executions/${encodeURIComponent(out.steps.startedId)}`);
  await page.locator("#outcome.succeeded").waitFor({ timeout });
  await page.evaluate(() => document.getElementById("execution").scrollIntoView());
  await shot("phone-execution", ["#exec-state", "#exec-id", "#cancel", "#transcript"]);
  await page.evaluate(() => document.getElementById("timing").scrollIntoView());
  await shot("phone-timeline", ["#timing", "#steps"]);
  await page.click("#nav-adapters");
  await page.locator(".adapter-card").first().waitFor({ timeout });
  await page.evaluate(() => document.querySelector(".adapter-card").scrollIntoView());
  await shot("phone-adapters", [".adapter-card", ".adapter-card .scroll"]);
  out.steps.phoneTableBox = await page.locator(".adapter-card .scroll").first().evaluate((n) => ({
    overflowX: getComputedStyle(n).overflowX, width: n.getBoundingClientRect().width,
    scrolls: n.scrollWidth > n.clientWidth,
  }));
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
    const near = { ok: [0x2e, 0x7d, 0x32], wait: [0x9a, 0x5b, 0x00], stop: [0x6a, 0x1b, 0x9a], accent: [0x1f, 0x5f, 0xbf] };
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

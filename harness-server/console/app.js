// The harness console: plain JavaScript over the Runtime API, no build step.
//
// Everything an execution says (agent text, tool names, arguments, errors) is hostile input:
// it reaches the page only as text nodes (`el` and `textContent`), never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "harness.token";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

/** An element with attributes (`on*` as listeners) and children (strings become text). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ---- invisible characters ----------------------------------------------------------------
//
// What an operator approves must be what it reads: bidirectional controls, zero-width and
// other invisible characters in tool names and arguments are shown as marked badges. The
// ranges are those of `harness_server::visible::is_hidden` (tests/console.rs checks that the
// two agree on every code point).

const HIDDEN = [
  [0x0, 0x8], [0xb, 0x1f], [0x7f, 0x9f],
  [0xad, 0xad], // soft hyphen
  [0x34f, 0x34f], // combining grapheme joiner
  [0x61c, 0x61c], // Arabic letter mark
  [0x115f, 0x1160], [0x3164, 0x3164], [0xffa0, 0xffa0], // Hangul fillers
  [0x17b4, 0x17b5],
  [0x180b, 0x180f], // Mongolian selectors and vowel separator
  [0x200b, 0x200f], // zero-width space, joiners, LRM, RLM
  [0x2028, 0x2029], // line and paragraph separators
  [0x202a, 0x202e], // embeddings and overrides
  [0x2060, 0x206f], // word joiner, invisible operators, isolates, deprecated
  [0xfe00, 0xfe0f], // variation selectors
  [0xfeff, 0xfeff], // zero-width no-break space
  [0xfff9, 0xfffb], // interlinear annotation
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff], // tags and variation selectors supplement
];

/** Whether code point `cp` is invisible or changes how the text around it displays. */
function isHidden(cp) {
  return HIDDEN.some(([lo, hi]) => cp >= lo && cp <= hi);
}

/** `U+202E` for a code point. */
function codePoint(cp) {
  return `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
}

/**
 * `text` as nodes, each hidden character a marked badge (`[U+202E]`); `found` collects the
 * code points marked.
 */
function marked(text, found) {
  const nodes = [];
  let run = "";
  for (const ch of String(text)) {
    const cp = ch.codePointAt(0);
    if (!isHidden(cp)) {
      run += ch;
      continue;
    }
    if (run) nodes.push(document.createTextNode(run));
    run = "";
    found.add(cp);
    nodes.push(el("mark", { className: "hidden-char", title: `an invisible or direction-changing character, ${codePoint(cp)}` },
      `[${codePoint(cp)}]`));
  }
  if (run) nodes.push(document.createTextNode(run));
  return nodes;
}

/** `value` as indented JSON, each hidden character written as its `\u` escape (still JSON). */
function escapedJson(value) {
  let out = "";
  for (const ch of JSON.stringify(value, null, 2) ?? "null") {
    const cp = ch.codePointAt(0);
    if (!isHidden(cp)) out += ch;
    else for (let i = 0; i < ch.length; i++) out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, "0")}`;
  }
  return out;
}

/** The note beside the decision buttons when `found` is not empty. */
function hiddenNote(found) {
  if (!found.size) return null;
  const list = [...found].sort((a, b) => a - b).map(codePoint).join(", ");
  return el("p", { className: "warning", role: "note", "data-role": "hidden-note" },
    `Careful: the tool names or arguments above hold invisible or direction-changing characters (${list}). `
      + "Each is shown as a marked [U+…] badge, where a plain view would hide it or reorder the text around it.");
}

// For tests/console.rs: the page's rule, checked against the server's.
window.harnessVisible = { isHidden, escapedJson };

class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
  }
}

let token = null;

async function api(path, { method = "GET", body, headers = {}, signal } = {}) {
  const response = await fetch(path, {
    method,
    signal,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = response.headers.get("content-type") || "";
  const payload = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    if (response.status === 401) signOut("The token was refused: sign in again.");
    throw new ApiError(response.status, payload && payload.error);
  }
  return payload;
}

// ---- signing in -------------------------------------------------------------------------

function signIn(value) {
  token = value;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = false;
  $("nav").hidden = false;
  $("help-open").hidden = false;
  loadAdapters();
  loadExecutions();
  startPolling();
  route();
}

function signOut(message = "") {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stopWatching();
  stopPolling();
  rows.clear();
  loadedOnce = false;
  $("executions").replaceChildren();
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("nav").hidden = true;
  $("help-open").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message;
}

// ---- where the page is: the address's fragment ------------------------------------------
//
// `#/executions/<id>`, `#/executions/<id>/events/<seq>` and `#/adapters`: links that can be
// shared, bookmarked and reloaded. They hold no credential: a tab without a token signs in
// first, then lands where the link points.

/** The execution link of `id`, with `seq` for one of its events. */
function link(id, seq) {
  return `#/executions/${encodeURIComponent(id)}${seq ? `/events/${seq}` : ""}`;
}

function route() {
  if (!token) return;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return "";
    }
  });
  const adapters = parts[0] === "adapters";
  $("adapters-view").hidden = !adapters;
  $("detail").hidden = adapters;
  for (const [id, on] of [["nav-adapters", adapters], ["nav-executions", !adapters]]) {
    if (on) $(id).setAttribute("aria-current", "page");
    else $(id).removeAttribute("aria-current");
  }
  if (adapters) {
    scrollTo(0, 0);
    loadAdapterView();
    return;
  }
  if (parts[0] === "executions" && parts[1]) {
    const seq = parts[2] === "events" && /^\d+$/.test(parts[3] || "") ? Number(parts[3]) : null;
    if (watching && watching.id === parts[1]) target(watching, seq);
    else {
      // Another execution: from its top (a link to one event scrolls to it once it is in).
      if (!seq) scrollTo(0, 0);
      watch(parts[1], seq);
    }
    return;
  }
  stopWatching();
  selected = null;
  markSelected();
  $("execution").hidden = true;
  $("empty").hidden = false;
}

// ---- the adapters -----------------------------------------------------------------------

let adapterList = [];

async function loadAdapters() {
  try {
    const { adapters } = await api("/v1/adapters");
    adapterList = adapters;
    $("start-adapter").replaceChildren(...adapters.map((a) => el("option", { value: a.id }, a.id)));
    $("filter-adapter").replaceChildren(el("option", { value: "" }, "any"),
      ...adapters.map((a) => el("option", { value: a.id }, a.id)));
  } catch (e) {
    $("start-error").textContent = e.message;
  }
}

/** Whether adapter `id` declares it can continue a conversation (`session.multi_turn`). */
function multiTurn(id) {
  const adapter = adapterList.find((a) => a.id === id);
  const level = adapter && adapter.capabilities && adapter.capabilities["session.multi_turn"];
  return Boolean(level && ["native", "emulated", "degraded"].includes(level.level));
}

/**
 * Each adapter's manifest (capabilities, version, trust boundary) and health, from
 * `GET /v1/adapters`. The server serves no certification report: the manifest names the
 * version of the conformance evidence that certified the adapter, and that is what is shown.
 */
async function loadAdapterView() {
  const list = $("adapter-list");
  try {
    const { adapters, health = {} } = await api("/v1/adapters");
    list.replaceChildren(...adapters.map((a) => adapterCard(a, health[a.id])));
  } catch (e) {
    list.replaceChildren(el("p", { className: "error", role: "alert" }, e.message));
  }
}

function adapterCard(a, health) {
  const ready = health && health.ready;
  const caps = Object.entries(a.capabilities || {}).sort(([x], [y]) => x.localeCompare(y));
  const mode = a.executionMode || {};
  const facts = [
    ["Version", a.implementationVersion],
    ["Contract versions", (a.contractVersions || []).join(", ")],
    ["Runs", [mode.mode, mode.compatibilityOnly ? "(compatibility only)" : ""].join(" ").trim()],
    ["Trust boundary", a.trustBoundary],
    ["Dependencies", (a.dependencies || []).map((d) => (typeof d === "string" ? d : d.name || JSON.stringify(d))).join(", ") || "none"],
    ["Certified by evidence", a.certificationEvidenceVersion || "none declared"],
    ["Health checked", health ? when(health.checkedAt) : "unknown"],
  ];
  return el("section", { className: "adapter-card", "data-adapter": a.id },
    el("div", { className: "bar" },
      el("h3", {}, a.name || a.id, " ", el("code", {}, a.id)),
      el("span", { className: `state ${ready ? "succeeded" : "failed"}`, "data-role": "health" },
        health ? (ready ? "ready" : `not ready${health.reason ? `: ${health.reason}` : ""}`) : "health unknown")),
    el("dl", { className: "facts" }, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v ?? "")])),
    el("p", { className: "muted" },
      "This server serves no certification report; the manifest names the evidence version that certified this adapter version."),
    el("h4", {}, `Capabilities (${caps.length})`),
    el("div", { className: "scroll" },
      el("table", { className: "capabilities" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Capability"), el("th", { scope: "col" }, "Level"),
          el("th", { scope: "col" }, "Notes"))),
        el("tbody", {}, caps.map(([key, c]) => {
          const { level, ...rest } = c || {};
          const notes = rest.explanation || (Object.keys(rest).length ? JSON.stringify(rest) : "");
          return el("tr", { "data-capability": key }, el("td", {}, el("code", {}, key)),
            el("td", {}, el("span", { className: `level ${level}` }, level || "")), el("td", {}, notes));
        })))));
}

// ---- the list ---------------------------------------------------------------------------

let next = null;
let selected = null;
// Every execution loaded: id → { summary, li }.
const rows = new Map();
let loadedOnce = false;

async function loadExecutions(more = false) {
  const query = new URLSearchParams({ limit: "25" });
  if (more && next) query.set("before", next);
  try {
    const page = await api(`/v1/executions?${query}`);
    if (more || !loadedOnce) {
      next = page.next;
      $("more").hidden = !next;
    }
    for (const e of page.executions) upsert(e, { append: more, fresh: loadedOnce && !more });
    loadedOnce = true;
    counts();
  } catch (e) {
    $("start-error").textContent = e.message;
  }
}

// New executions and state changes appear without a reload: the first page is read again
// every few seconds while the tab is visible (the API has no list stream to subscribe to).
let poller = null;
const POLL_MS = 2000;

function startPolling() {
  stopPolling();
  poller = setInterval(() => {
    if (!document.hidden && token) loadExecutions();
  }, POLL_MS);
}

function stopPolling() {
  if (poller) clearInterval(poller);
  poller = null;
}

const AWAITING = new Set(["awaiting_approval", "awaiting_input"]);

/** Adds execution `e` to the list, or brings its row up to date. */
function upsert(e, { append = false, fresh = false } = {}) {
  const known = rows.get(e.id);
  if (known) {
    known.summary = e;
    rowState(known.li, e.state);
  } else {
    const li = listItem(e);
    rows.set(e.id, { summary: e, li });
    const list = $("executions");
    const after = append ? null : [...list.children].find((x) => Date.parse(x.dataset.created) < Date.parse(e.createdAt));
    list.insertBefore(li, after || null);
    if (fresh) li.classList.add("new");
  }
  const row = rows.get(e.id);
  if (TERMINAL.has(e.state)) fillEnded(e.id);
  else row.li.querySelector(".duration").textContent = `${duration(Date.now() - Date.parse(e.createdAt))} so far`;
  row.li.hidden = !matches(e);
}

/** A row's state pill and its "needs an answer" badge. */
function rowState(li, state) {
  const pill = li.querySelector(".state");
  pill.textContent = state.replace("_", " ");
  pill.className = `state ${state}`;
  li.querySelector(".badge").hidden = !AWAITING.has(state);
  li.dataset.state = state;
  const entry = rows.get(li.dataset.id);
  if (entry) entry.summary = { ...entry.summary, state };
}

/** The awaiting count in the header and the tab's title, and how many rows the filters show. */
function counts() {
  const all = [...rows.values()];
  const awaiting = all.filter((r) => AWAITING.has(r.summary.state)).length;
  const badge = $("awaiting-count");
  badge.hidden = awaiting === 0;
  badge.textContent = String(awaiting);
  badge.title = `${awaiting} awaiting an answer`;
  document.title = awaiting ? `(${awaiting}) harness console` : "harness console";
  const shown = all.filter((r) => !r.li.hidden).length;
  $("list-count").textContent = shown === all.length ? `${all.length} loaded` : `${shown} of ${all.length} loaded shown`;
}

const SINCE = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 24 * 3600e3, "7d": 7 * 24 * 3600e3 };

// `GET /v1/executions` takes only `limit` and `before`: the filters below apply in the page,
// to the executions loaded so far (`More` loads older ones).
function matches(e) {
  const state = $("filter-state").value;
  if (state === "active" && TERMINAL.has(e.state)) return false;
  if (state === "awaiting" && !AWAITING.has(e.state)) return false;
  if (state && state !== "active" && state !== "awaiting" && e.state !== state) return false;
  const adapter = $("filter-adapter").value;
  if (adapter && e.adapter !== adapter) return false;
  const since = SINCE[$("filter-since").value];
  if (since && Date.now() - Date.parse(e.createdAt) > since) return false;
  const text = $("filter-text").value.trim().toLowerCase();
  if (text && ![e.message, e.id, e.adapter].some((s) => String(s || "").toLowerCase().includes(text))) return false;
  return true;
}

function filter() {
  for (const { summary, li } of rows.values()) li.hidden = !matches(summary);
  counts();
}

/** `ms` as `850 ms`, `12.3 s`, `4 min 5 s` or `2 h 3 min`. */
function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** When, in the operator's own time zone: the time today, else the date and time. */
function when(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

/** One execution of the list: adapter, state, the first words of its message, started, duration, outcome. */
function listItem(e) {
  const started = el("time", { className: "started", datetime: e.createdAt }, when(e.createdAt));
  const live = !TERMINAL.has(e.state);
  const li = el(
    "li",
    { "data-id": e.id, "data-created": e.createdAt, "data-state": e.state, className: e.id === selected ? "selected" : "" },
    el("a", { href: link(e.id), title: e.id },
      el("div", { className: "row" },
        el("span", { className: `state ${e.state}` }, e.state.replace("_", " ")),
        el("span", { className: "badge", hidden: !AWAITING.has(e.state), title: "awaiting an answer" }, "needs answer"),
        el("span", { className: "adapter" }, e.adapter),
        el("span", { className: "message", title: e.message || "" }, e.message || "(no message)")),
      el("div", { className: "row muted" },
        started,
        el("span", { className: "duration", title: "how long it ran" },
          live ? `${duration(Date.now() - Date.parse(e.createdAt))} so far` : "…"),
        el("span", { className: "outcome" }, live ? "" : e.state))),
  );
  return li;
}

function markSelected() {
  for (const li of $("executions").children) {
    const on = li.dataset.id === selected;
    li.classList.toggle("selected", on);
    const a = li.querySelector("a");
    if (on) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

// An ended execution's end never changes: read once, kept.
const ended = new Map();

/** The duration and outcome of an ended execution's row, from its terminal event. */
async function fillEnded(id) {
  let end = ended.get(id);
  if (!end) {
    try {
      const view = await api(`/v1/executions/${encodeURIComponent(id)}`);
      if (!view.outcome) return;
      const data = view.outcome.data || {};
      const why = view.state === "failed" ? (data.error && data.error.message) : view.state === "cancelled" ? data.reason : data.summary;
      end = { at: view.outcome.time, state: view.state, why: why || "" };
      ended.set(id, end);
    } catch {
      return;
    }
  }
  const row = rows.get(id);
  if (!row) return;
  const li = row.li;
  const ms = Date.parse(end.at) - Date.parse(li.dataset.created);
  li.querySelector(".duration").textContent = Number.isNaN(ms) ? "" : duration(ms);
  const outcome = li.querySelector(".outcome");
  outcome.textContent = end.why ? `${end.state}: ${end.why}` : end.state;
  outcome.title = outcome.textContent;
  outcome.className = `outcome ${end.state}`;
}

/** A conversation id of the console's own making: `console-` and 32 hex digits. */
function newConversation() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function start(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const adapter = $("start-adapter").value;
  const body = { adapter, message: $("start-message").value };
  // A new conversation when the adapter can continue one, so the page can offer follow-ups.
  if (multiTurn(adapter)) body.conversationId = newConversation();
  const options = $("start-options").value.trim();
  if (options) {
    try {
      body.options = JSON.parse(options);
    } catch (e) {
      $("start-error").textContent = `The options are not JSON: ${e.message}`;
      return;
    }
  }
  try {
    const view = await api("/v1/executions", { method: "POST", body });
    $("start-message").value = "";
    upsert({ ...view, message: body.message });
    counts();
    location.hash = link(view.id);
  } catch (e) {
    $("start-error").textContent = e.message;
  }
}

/** Continues the watched execution's conversation: a new execution, same adapter and conversation. */
async function followUp(event) {
  event.preventDefault();
  const w = watching;
  const error = $("follow-up-error");
  error.textContent = "";
  if (!w || !w.conversationId) return;
  const message = $("follow-up-message").value;
  try {
    const view = await api("/v1/executions", {
      method: "POST",
      body: { adapter: w.adapter, message, conversationId: w.conversationId },
    });
    $("follow-up-message").value = "";
    upsert({ ...view, message });
    counts();
    location.hash = link(view.id);
  } catch (e) {
    error.textContent = e.message;
  }
}

// ---- one execution, live ----------------------------------------------------------------

let watching = null;

function stopWatching() {
  if (watching) watching.abort.abort();
  watching = null;
}

async function watch(id, seq = null) {
  stopWatching();
  selected = id;
  markSelected();
  const w = {
    id, abort: new AbortController(), lastSeq: 0, message: null, reasoning: null, tools: new Map(), awaiting: new Set(),
    target: seq, created: NaN, firstEvent: null, firstOutput: null, toolStart: new Map(), toolTotal: 0, toolCount: 0,
    actionStart: new Map(), awaited: 0, endAt: null, rows: [], lastRow: null, turn: null, lastTurn: null, toolSteps: new Map(),
    actionSteps: new Map(), artifacts: [],
  };
  watching = w;
  $("empty").hidden = true;
  $("execution").hidden = false;
  $("exec-id").textContent = id;
  $("exec-link").href = link(id);
  $("exec-error").textContent = "";
  for (const part of ["transcript", "actions", "tools", "artifacts", "timeline", "steps", "timing", "artifact-view", "exec-meta"]) {
    $(part).replaceChildren();
  }
  $("artifact-view").hidden = true;
  $("outcome").textContent = "";
  $("outcome").className = "";
  $("usage").textContent = "";
  $("follow-up").hidden = true;
  try {
    const view = await api(`/v1/executions/${encodeURIComponent(id)}`, { signal: w.abort.signal });
    if (watching !== w) return;
    w.adapter = view.adapter;
    w.conversationId = view.conversationId || null;
    w.created = Date.parse(view.createdAt);
    $("exec-adapter").textContent = view.adapter;
    $("exec-meta").append(
      "started ", el("time", { datetime: view.createdAt }, when(view.createdAt)),
      w.conversationId ? " · conversation " : " · no conversation",
      w.conversationId ? el("code", { "data-role": "conversation" }, w.conversationId) : "",
    );
    setState(view.state);
    followUpState(w, view.state);
    timing(w);
  } catch (e) {
    if (e.name !== "AbortError") $("exec-error").textContent = e.message;
    return;
  }
  stream(w);
}

/** Reads the execution's events, reconnecting with Last-Event-ID until the terminal one. */
async function stream(w) {
  let wait = 250;
  while (watching === w) {
    try {
      const response = await fetch(`/v1/executions/${encodeURIComponent(w.id)}/events`, {
        signal: w.abort.signal,
        headers: {
          Authorization: `Bearer ${token}`,
          Accept: "text/event-stream",
          ...(w.lastSeq ? { "Last-Event-ID": String(w.lastSeq) } : {}),
        },
      });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new ApiError(response.status, body.error);
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame
            .split("\n")
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).replace(/^ /, ""))
            .join("\n");
          if (data) apply(w, JSON.parse(data));
        }
      }
      if (w.ended) {
        // A link to an event this execution does not have: said, not waited for.
        if (w.target) $("exec-error").textContent = `This execution has no event ${w.target}: it ended at event ${w.lastSeq}.`;
        return;
      }
      wait = 250;
    } catch (e) {
      if (e.name === "AbortError" || watching !== w) return;
      if (e instanceof ApiError && e.status < 500) {
        $("exec-error").textContent = e.message;
        return;
      }
    }
    // Dropped before the end: resume after the last event seen.
    await new Promise((resolve) => setTimeout(resolve, wait));
    wait = Math.min(wait * 2, 5000);
  }
}

function setState(state) {
  const badge = $("exec-state");
  badge.textContent = state;
  badge.className = `state ${state}`;
  $("cancel").disabled = TERMINAL.has(state) || state === "cancelling";
  const row = rows.get(selected);
  if (row) {
    rowState(row.li, state);
    counts();
    if (TERMINAL.has(state)) setTimeout(() => fillEnded(selected), 0);
  }
}

/** The follow-up form: offered once the execution has ended, when it has a conversation. */
function followUpState(w, state) {
  $("follow-up").hidden = false;
  const can = Boolean(w.conversationId) && TERMINAL.has(state);
  $("follow-up-message").disabled = !can;
  $("follow-up-form").querySelector("button").disabled = !can;
  $("follow-up-note").textContent = !w.conversationId
    ? "This execution was started without a conversation, so a follow-up cannot continue it."
    : can ? `Continues conversation ${w.conversationId} on ${w.adapter}.` : "A follow-up can be sent once this execution has ended.";
}

const STATE_OF_KIND = {
  "run.queued": "queued",
  "run.starting": "starting",
  "run.running": "running",
  "run.awaiting_input": "awaiting_input",
  "run.awaiting_approval": "awaiting_approval",
  "run.cancelling": "cancelling",
  "run.succeeded": "succeeded",
  "run.failed": "failed",
  "run.cancelled": "cancelled",
};

/** One event into the page (each at most once: streams may repeat the one at the cursor). */
function apply(w, event) {
  if (watching !== w || event.seq <= w.lastSeq) return;
  w.lastSeq = event.seq;
  const data = event.data || {};
  if (event.kind !== "message.delta") w.message = null;
  if (event.kind !== "reasoning.delta") w.reasoning = null;
  const state = STATE_OF_KIND[event.kind];
  if (state) setState(state);
  switch (event.kind) {
    case "message.delta":
      if (!w.message) {
        w.message = el("span", { className: "message" });
        $("transcript").append(w.message);
      }
      w.message.append(data.text);
      break;
    case "reasoning.delta":
      if (!w.reasoning) {
        w.reasoning = el("span", { className: "reasoning" });
        $("transcript").append(w.reasoning);
      }
      w.reasoning.append(data.text);
      break;
    case "tool.call.started":
      toolRow(w, data);
      toolStatus(w, data.callId, w.awaiting.has(data.callId) ? "awaiting" : "running");
      break;
    case "tool.call.completed": {
      const outcome = data.outcome || {};
      w.awaiting.delete(data.callId);
      toolStatus(w, data.callId, outcome.status || "completed",
        outcome.status === "failure" ? outcome.message : outcome.status === "rejected" ? outcome.reason : undefined);
      break;
    }
    case "action.requested":
      if (data.kind && data.kind.type === "tool_approval") {
        for (const call of data.kind.calls) {
          w.awaiting.add(call.callId);
          toolRow(w, call);
          toolStatus(w, call.callId, "awaiting");
        }
      }
      showAction(w, data);
      break;
    case "action.resolved": {
      const panel = $("actions").querySelector(`[data-action="${CSS.escape(data.actionId)}"]`);
      if (panel) {
        for (const call of panel.querySelectorAll(".call")) {
          w.awaiting.delete(call.dataset.call);
          toolStatus(w, call.dataset.call, "running");
        }
        panel.remove();
      }
      break;
    }
    case "artifact.created":
      artifactRow(w, data);
      break;
    case "usage":
      $("usage").textContent = `tokens: ${data.inputTokens ?? 0} in, ${data.outputTokens ?? 0} out`;
      break;
    case "run.succeeded":
      end(w, "succeeded", data.summary ? `Succeeded: ${data.summary}` : "Succeeded");
      break;
    case "run.failed":
      end(w, "failed", `Failed: ${(data.error && data.error.message) || "unknown error"}`);
      break;
    case "run.cancelled":
      end(w, "cancelled", `Cancelled${data.reason ? `: ${data.reason}` : ""}`);
      break;
    default:
      break;
  }
  const at = Date.parse(event.time);
  measure(w, event, at);
  timelineRow(w, event, at);
  step(w, event, at);
  timing(w);
  if (w.target) target(w, w.target);
  else if (w.pinned) pin(w);
}

// ---- time: the timeline, the steps and what they add up to ------------------------------

const OUTPUT = new Set(["message.delta", "reasoning.delta", "tool.call.started", "action.requested", "artifact.created"]);

/** The running totals of the timing summary. */
function measure(w, event, at) {
  const data = event.data || {};
  if (w.firstEvent === null) w.firstEvent = at;
  if (w.firstOutput === null && OUTPUT.has(event.kind)) w.firstOutput = at;
  if (event.kind === "tool.call.started") w.toolStart.set(data.callId, at);
  if (event.kind === "tool.call.completed") {
    w.toolCount += 1;
    const from = w.toolStart.get(data.callId);
    if (from !== undefined) w.toolTotal += at - from;
  }
  if (event.kind === "action.requested") w.actionStart.set(data.id, at);
  if (event.kind === "action.resolved") {
    const from = w.actionStart.get(data.actionId);
    if (from !== undefined) w.awaited += at - from;
    w.actionStart.delete(data.actionId);
  }
  if (TERMINAL.has(STATE_OF_KIND[event.kind])) {
    w.endAt = at;
    w.actionStart.clear();
  }
}

/** `+1.2 s`: how long after the execution was created `at` is. */
function offset(w, at) {
  return Number.isNaN(w.created) ? "" : `+${duration(at - w.created)}`;
}

function timing(w) {
  const since = (at) => (at === null || Number.isNaN(w.created) ? "—" : duration(at - w.created));
  const open = [...w.actionStart.values()].reduce((sum, from) => sum + (Date.now() - from), 0);
  const facts = [
    ["first-event", "First event after", since(w.firstEvent)],
    ["first-output", "First output after", since(w.firstOutput)],
    ["awaiting", "Awaiting an answer", duration(w.awaited + open) + (open ? " so far" : "")],
    ["tools", "Tool calls", w.toolCount ? `${w.toolCount}, ${duration(w.toolTotal)} in all` : "none"],
    ["ran", "Ran for", w.endAt === null ? (Number.isNaN(w.created) ? "—" : `${duration(Date.now() - w.created)} so far`) : since(w.endAt)],
  ];
  $("timing").replaceChildren(...facts.flatMap(([role, k, v]) => [el("dt", {}, k), el("dd", { "data-timing": role }, v)]));
}

/** What one event says, in a few words. */
function gist(event) {
  const d = event.data || {};
  const found = new Set();
  switch (event.kind) {
    case "message.delta":
    case "reasoning.delta":
      return String(d.text || "");
    case "tool.call.started":
      return [el("code", {}, marked(d.tool || "", found)), ` ${d.callId || ""}`];
    case "tool.call.completed":
      return `${d.callId || ""} ${(d.outcome && d.outcome.status) || ""}`;
    case "action.requested":
      return (d.kind && d.kind.type) || "";
    case "action.resolved":
      return (d.outcome && d.outcome.type) || "";
    case "artifact.created":
      return `${d.name || d.id || ""} (${d.mediaType || ""})`;
    case "usage":
      return `${d.inputTokens ?? 0} in, ${d.outputTokens ?? 0} out`;
    case "run.failed":
      return (d.error && d.error.message) || "";
    case "run.cancelled":
      return d.reason || "";
    case "run.succeeded":
      return d.summary || "";
    default:
      return "";
  }
}

/**
 * One row of the timeline: when (after the start), what, and how long it took where that
 * means something (a tool call's completion, an action's resolution). A run of text deltas is
 * one row (`message ×12`), so a long answer stays a short timeline.
 */
function timelineRow(w, event, at) {
  const data = event.data || {};
  const last = w.lastRow;
  const delta = event.kind === "message.delta" || event.kind === "reasoning.delta";
  if (delta && last && last.kind === event.kind) {
    last.last = event.seq;
    last.count += 1;
    last.li.dataset.last = String(event.seq);
    last.li.querySelector(".kind").textContent = `${event.kind} ×${last.count}`;
    if (last.text.length < 80) {
      last.text += String(data.text || "");
      last.li.querySelector(".what").textContent = last.text.slice(0, 80);
    }
    last.li.querySelector(".took").textContent = duration(at - last.at);
    return;
  }
  let took = "";
  if (event.kind === "tool.call.completed" && w.toolStart.has(data.callId)) took = duration(at - w.toolStart.get(data.callId));
  if (event.kind === "action.resolved") {
    const asked = w.rows.find((r) => r.kind === "action.requested" && r.action === data.actionId);
    if (asked) took = `awaited ${duration(at - asked.at)}`;
  }
  const li = el("li", { id: `event-${event.seq}`, "data-seq": event.seq, "data-last": event.seq, "data-kind": event.kind, tabindex: "-1" },
    el("a", { className: "seq", href: link(w.id, event.seq), title: "a link to this event" }, `#${event.seq}`),
    el("time", { datetime: event.time, title: event.time }, offset(w, at)),
    el("span", { className: "kind" }, event.kind),
    el("span", { className: "what" }, delta ? String(data.text || "").slice(0, 80) : gist(event)),
    el("span", { className: "took" }, took));
  const row = { kind: event.kind, first: event.seq, last: event.seq, count: 1, text: delta ? String(data.text || "") : "", at, li,
    action: event.kind === "action.requested" ? data.id : undefined };
  w.rows.push(row);
  w.lastRow = row;
  $("timeline").append(li);
}

/** Shows event `seq` of a deep link: its timeline row (a run of deltas holds several) in view. */
function target(w, seq) {
  w.target = seq;
  if (!seq) return;
  const row = w.rows.find((r) => r.first <= seq && seq <= r.last);
  if (!row) return;
  w.target = null;
  for (const li of $("timeline").querySelectorAll(".target")) {
    li.classList.remove("target");
    li.removeAttribute("aria-current");
  }
  row.li.classList.add("target");
  row.li.setAttribute("aria-current", "true");
  // Brought into view once the events read so far are in (those after it grow the page above
  // it: the transcript, the steps): each event meanwhile puts the scroll off a little.
  w.pinned = row.li;
  pin(w);
}

function pin(w) {
  clearTimeout(w.pinTimer);
  w.pinTimer = setTimeout(() => {
    if (watching !== w || !w.pinned) return;
    w.pinned.scrollIntoView({ block: "center" });
    w.pinned.focus({ preventScroll: true });
    w.pinned = null;
  }, 80);
}

/**
 * The step view: the events grouped into model turns (a run of text, reasoning and usage),
 * tool calls (started to completed), and actions (asked to answered).
 */
function step(w, event, at) {
  const data = event.data || {};
  const kind = event.kind;
  const add = (type, title) => {
    const s = { at, type, li: el("li", { className: `step step-${type}`, "data-step": type, "data-seq": event.seq },
      el("span", { className: "step-type" }, title), " ",
      el("a", { className: "seq", href: link(w.id, event.seq) }, offset(w, at)), " ",
      el("span", { className: "took" }, ""), " ",
      el("span", { className: "what muted" }, "")) };
    $("steps").append(s.li);
    return s;
  };
  const set = (s, took, what) => {
    if (took !== undefined) s.li.querySelector(".took").textContent = took;
    if (what !== undefined) s.li.querySelector(".what").textContent = what;
  };
  if (kind === "message.delta" || kind === "reasoning.delta") {
    if (!w.turn) {
      w.turn = add("turn", "Model turn");
      w.turn.text = "";
      w.lastTurn = w.turn;
    }
    if (kind === "message.delta" && w.turn.text.length < 80) w.turn.text += String(data.text || "");
    set(w.turn, duration(at - w.turn.at), w.turn.text.slice(0, 80));
    return;
  }
  if (kind === "usage") {
    const turn = w.turn || w.lastTurn;
    if (turn) turn.li.querySelector(".step-type").textContent = `Model turn (${data.inputTokens ?? 0} in, ${data.outputTokens ?? 0} out tokens)`;
    return;
  }
  w.turn = null;
  if (kind === "tool.call.started") {
    const s = add("tool", "Tool call");
    s.li.querySelector(".step-type").append(" ", el("code", {}, marked(data.tool || "", new Set())));
    set(s, "running");
    w.toolSteps.set(data.callId, s);
  } else if (kind === "tool.call.completed") {
    const s = w.toolSteps.get(data.callId);
    if (s) set(s, duration(at - s.at), (data.outcome && data.outcome.status) || "");
  } else if (kind === "action.requested") {
    const type = data.kind && data.kind.type;
    const s = add("action", type === "tool_approval" ? "Approval" : "Input");
    set(s, "awaiting");
    w.actionSteps.set(data.id, s);
  } else if (kind === "action.resolved") {
    const s = w.actionSteps.get(data.actionId);
    if (s) set(s, `awaited ${duration(at - s.at)}`, (data.outcome && data.outcome.type) || "");
  } else if (TERMINAL.has(STATE_OF_KIND[kind])) {
    const s = add("end", `Ended: ${STATE_OF_KIND[kind]}`);
    set(s, Number.isNaN(w.created) ? "" : `after ${duration(at - w.created)}`);
  }
}

// ---- artifacts --------------------------------------------------------------------------

function artifactRow(w, data) {
  w.artifacts.push(data);
  $("artifacts").append(
    el("li", { "data-artifact": data.id }, el("strong", {}, data.name || data.id), " ", el("span", { className: "muted" }, data.mediaType), " ",
      el("code", {}, data.uri || ""), " ",
      el("button", { type: "button", "data-role": "view-artifact", onclick: () => showArtifact(data) }, "View")),
  );
}

// What the viewer reads at most of an artifact's bytes.
const ARTIFACT_MAX = 1 << 20;

/**
 * The address of an artifact's bytes when this page may read them: this server's own, but
 * never its API or the console (the address is the agent's to choose). The request carries
 * no token.
 */
function readable(uri) {
  try {
    const url = new URL(uri, location.href);
    if (url.origin !== location.origin || /^\/(v1|console)(\/|$)/.test(url.pathname)) return null;
    return url;
  } catch {
    return null;
  }
}

/** The body of `response`, refused past `max` bytes without reading on. */
async function capped(response, max) {
  const reader = response.body.getReader();
  const parts = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      reader.cancel();
      throw new Error(`it is more than the ${max} bytes the viewer shows`);
    }
    parts.push(value);
  }
  return new Blob(parts);
}

function isDiff(a) {
  return /(x-diff|x-patch|\/diff|\/patch)$/.test(a.mediaType || "") || /\.(diff|patch)$/.test(a.name || "");
}

/**
 * The artifact viewer: the descriptor (a descriptor never holds the bytes), and the bytes
 * when its URI is on this server: text as text, JSON indented, images as images, diffs as
 * diffs. Any other address is shown, not fetched (the page's policy allows only this origin).
 */
async function showArtifact(a) {
  const view = $("artifact-view");
  view.hidden = false;
  const found = new Set();
  const facts = [["Name", a.name || ""], ["Media type", a.mediaType], ["Size", a.sizeBytes === undefined ? "unknown" : `${a.sizeBytes} bytes`],
    ["Created", a.createdAt ? when(a.createdAt) : ""], ["Address", a.uri || "none"]];
  const content = el("div", { className: "artifact-content", "data-role": "artifact-content" });
  view.replaceChildren(
    el("div", { className: "bar" }, el("h4", { id: "artifact-title" }, a.name || a.id),
      el("button", { type: "button", onclick: () => { view.hidden = true; } }, "Close")),
    el("dl", { className: "facts" }, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    ...(Object.keys(a.metadata || {}).length
      ? [el("h5", {}, "Metadata"), el("pre", { "data-role": "artifact-metadata" }, marked(JSON.stringify(a.metadata, null, 2), found))]
      : []),
    content);
  view.focus();
  const url = a.uri && readable(a.uri);
  if (!url) {
    content.append(el("p", { className: "muted" }, a.uri
      ? "The bytes are at the address above, not an artifact address of this server: the console does not fetch them."
      : "This artifact names no address for its bytes."));
    return;
  }
  try {
    // Without the token: the address is the agent's to choose, and a path of this origin
    // may be another application's behind the same proxy.
    const response = await fetch(url, { credentials: "omit", signal: AbortSignal.timeout(15000) });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const blob = await capped(response, ARTIFACT_MAX);
    const type = (a.mediaType || blob.type || "").toLowerCase();
    if (type.startsWith("image/")) {
      const src = URL.createObjectURL(blob.slice(0, blob.size, type));
      const img = el("img", { src, alt: a.name || "the artifact", "data-role": "artifact-image" });
      img.addEventListener("load", () => URL.revokeObjectURL(src), { once: true });
      content.append(img);
      return;
    }
    const text = await blob.text();
    if (isDiff(a)) {
      content.append(el("pre", { className: "diff", "data-role": "artifact-diff" }, text.split("\n").map((line) => {
        const cls = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("@@") ? "hunk"
          : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "same";
        return el("span", { className: cls }, marked(line, found), "\n");
      })));
    } else if (type.includes("json")) {
      let pretty;
      try {
        pretty = JSON.stringify(JSON.parse(text), null, 2);
      } catch (e) {
        content.append(el("p", { className: "error" }, `Not valid JSON (${e.message}): shown as text.`));
        pretty = text;
      }
      content.append(el("pre", { "data-role": "artifact-json" }, marked(pretty, found)));
    } else {
      content.append(el("pre", { "data-role": "artifact-text" }, marked(text, found)));
    }
  } catch (e) {
    content.append(el("p", { className: "error", role: "alert" }, `The bytes could not be read: ${e.message}`));
  }
}

// ---- tool calls, the end, cancelling ----------------------------------------------------

/** The row of a tool call in the list (made once: a call may be proposed, then started). */
function toolRow(w, call) {
  if (w.tools.has(call.callId)) return;
  const status = el("span", { className: "status" });
  const found = new Set();
  const row = el("li", { "data-call": call.callId }, el("span", { className: "tool" }, marked(call.tool, found)), " ", status,
    el("pre", {}, marked(JSON.stringify(call.arguments, null, 2), found)));
  w.tools.set(call.callId, status);
  $("tools").append(row);
}

const TOOL_LABELS = { awaiting: "awaiting approval", running: "running", success: "success", failure: "failed", rejected: "rejected" };

/** A tool call's status label (a call not started yet has none to set). */
function toolStatus(w, callId, status, why) {
  const node = w.tools.get(callId);
  if (!node) return;
  // A completed call stays completed (a late resolution does not relabel it).
  if (node.dataset.final && (status === "running" || status === "awaiting")) return;
  node.textContent = (TOOL_LABELS[status] || status) + (why ? `: ${why}` : "");
  node.className = `status ${status}`;
  node.dataset.status = status;
  if (status !== "running" && status !== "awaiting") node.dataset.final = "1";
}

function end(w, state, text) {
  w.ended = true;
  $("actions").replaceChildren();
  $("outcome").textContent = text;
  $("outcome").className = state;
  followUpState(w, state);
}

async function cancel() {
  if (!watching) return;
  $("cancel").disabled = true;
  try {
    await api(`/v1/executions/${encodeURIComponent(watching.id)}/cancel`, {
      method: "POST",
      body: { reason: "cancelled from the console" },
    });
  } catch (e) {
    $("exec-error").textContent = e.message;
    $("cancel").disabled = false;
  }
}

// ---- answering actions ------------------------------------------------------------------

async function answer(w, request, type, reply, panel) {
  const error = panel.querySelector(".error");
  error.textContent = "";
  for (const b of panel.querySelectorAll("button")) b.disabled = true;
  try {
    await api(`/v1/executions/${encodeURIComponent(w.id)}/actions/${encodeURIComponent(request.id)}`, {
      method: "POST",
      body: { type, revision: request.revision, answer: reply },
    });
  } catch (e) {
    error.textContent = e.message;
    for (const b of panel.querySelectorAll("button")) b.disabled = false;
  }
}

// The approve-all and reject-all of each approval panel, for the keyboard.
const quick = new WeakMap();

function showAction(w, request) {
  const kind = request.kind || {};
  // Focusable, so its keyboard shortcuts (`a`, `r`) act on the action that has the focus.
  const panel = el("div", { className: "action", "data-action": request.id, "data-kind": kind.type, tabindex: "0",
    role: "group", "aria-label": kind.type === "tool_approval" ? "a tool call awaiting approval: a approves, r rejects" : "input awaiting an answer" });
  const error = el("p", { className: "error", role: "alert" });
  if (kind.type === "tool_approval") {
    const found = new Set();
    const rows = kind.calls.map((call) => approvalRow(call, found));
    // The shortcuts: every call of the request approved, or rejected, at once.
    quick.set(panel, (decision) => {
      const refused = kind.calls.find((call) => !(call.allowed || ["approve", "reject"]).includes(decision));
      if (refused) {
        error.textContent = `${refused.tool} cannot be ${decision === "approve" ? "approved" : "rejected"} here: choose per call below.`;
        return;
      }
      const decisions = kind.calls.map((call) => ({ callId: call.callId, decision: { type: decision } }));
      answer(w, request, "tool_approval", { type: "decide", decisions }, panel);
    });
    const submit = el("button", { type: "button", className: "primary", "data-role": "submit" }, "Submit decisions");
    submit.addEventListener("click", () => {
      const decisions = [];
      for (const row of rows) {
        const decision = row.decide();
        if (typeof decision === "string") {
          error.textContent = decision;
          return;
        }
        decisions.push({ callId: row.call.callId, decision });
      }
      answer(w, request, "tool_approval", { type: "decide", decisions }, panel);
    });
    panel.append(el("h3", {}, kind.calls.length === 1 ? "Approve this tool call?" : "Approve these tool calls?"),
      ...rows.map((r) => r.node));
    panel.append(el("div", { className: "buttons" }, submit,
      request.dismissible === false ? null : el("button", {
        type: "button", "data-role": "dismiss",
        onclick: () => answer(w, request, "tool_approval", { type: "dismiss" }, panel),
      }, "Dismiss"), hiddenNote(found)), error,
      el("p", { className: "muted keys" }, "Keys, with this box focused: ", el("kbd", {}, "a"), " approves every call, ",
        el("kbd", {}, "r"), " rejects every call."));
  } else if (kind.type === "form_input") {
    const inputs = kind.fields.map((field) => formField(field));
    const submit = el("button", { type: "button", className: "primary", "data-role": "submit" }, "Submit");
    submit.addEventListener("click", () => {
      const values = {};
      for (const input of inputs) {
        const value = input.read();
        if (value instanceof Error) {
          error.textContent = value.message;
          return;
        }
        if (value !== undefined) values[input.field.name] = value;
      }
      answer(w, request, "form_input", { type: "submit", values }, panel);
    });
    panel.append(el("h3", {}, kind.title || "Input needed"), ...inputs.map((i) => i.node),
      el("div", { className: "buttons" }, submit,
        request.dismissible === false ? null : el("button", {
          type: "button", "data-role": "dismiss",
          onclick: () => answer(w, request, "form_input", { type: "dismiss" }, panel),
        }, "Dismiss")), error);
  } else {
    panel.append(el("p", {}, `An action of a kind this console does not know: ${kind.type}`));
  }
  $("actions").append(panel);
}

/** One call of an approval: its decision (approve, reject with a reason, edit its arguments). */
function approvalRow(call, found) {
  const allowed = call.allowed || ["approve", "reject"];
  const name = `decision-${call.callId}`;
  // What is approved, as read: hidden characters marked. Edited as JSON with each hidden
  // character a `\u` escape, so the edit box hides nothing either.
  const shown = el("pre", { className: "arguments", "data-role": "shown-arguments" },
    marked(JSON.stringify(call.arguments, null, 2), found));
  const args = el("textarea", { rows: 6, hidden: true, "aria-label": `arguments of ${call.tool}`, "data-role": "arguments" },
    escapedJson(call.arguments));
  const reason = el("input", { type: "text", placeholder: "why (optional)", hidden: true, "data-role": "reason" });
  const radios = allowed.map((decision) => {
    const radio = el("input", { type: "radio", name, value: decision, checked: decision === allowed[0] });
    radio.addEventListener("change", () => {
      args.hidden = radio.value !== "edit";
      reason.hidden = radio.value !== "reject";
    });
    return el("label", { className: "inline" }, radio, decision);
  });
  const node = el("div", { className: "call", "data-call": call.callId },
    el("div", {}, el("span", { className: "tool" }, marked(call.tool, found))),
    el("div", { className: "decisions" }, radios), shown, args, reason);
  return {
    call,
    node,
    decide() {
      const choice = node.querySelector(`input[name="${CSS.escape(name)}"]:checked`).value;
      if (choice === "approve") return { type: "approve" };
      if (choice === "reject") return reason.value ? { type: "reject", reason: reason.value } : { type: "reject" };
      let edited;
      try {
        edited = JSON.parse(args.value);
      } catch (e) {
        return `The arguments of ${call.tool} are not JSON: ${e.message}`;
      }
      const violations = validate(call.inputSchema || {}, edited, "");
      if (violations.length) return `The arguments of ${call.tool} do not fit its schema: ${violations.join("; ")}`;
      return { type: "edit", arguments: edited };
    },
  };
}

/** One form field's input, and how its value is read. */
function formField(field) {
  const kind = field.kind || {};
  let input;
  let read;
  if (kind.type === "boolean") {
    input = el("input", { type: "checkbox" });
    read = () => input.checked;
  } else if (kind.type === "number") {
    input = el("input", { type: "number", step: kind.integer ? "1" : "any", min: kind.minimum, max: kind.maximum });
    read = () => {
      if (input.value === "") return field.required ? new Error(`${field.label} is required`) : undefined;
      const n = Number(input.value);
      if (kind.integer && !Number.isInteger(n)) return new Error(`${field.label} must be a whole number`);
      return n;
    };
  } else if (kind.type === "choice") {
    input = el("select", { multiple: kind.multiple },
      kind.multiple ? null : el("option", { value: "" }, "—"),
      kind.options.map((o) => el("option", { value: o }, o)));
    read = () => {
      if (kind.multiple) return [...input.selectedOptions].map((o) => o.value);
      if (input.value === "") return field.required ? new Error(`${field.label} is required`) : undefined;
      return input.value;
    };
  } else {
    input = el("input", { type: "text", minlength: kind.minLength, maxlength: kind.maxLength });
    read = () => {
      if (input.value === "") return field.required ? new Error(`${field.label} is required`) : undefined;
      return input.value;
    };
  }
  input.setAttribute("data-field", field.name);
  const node = el("label", {}, field.label, field.required ? " *" : "", input,
    field.description ? el("span", { className: "muted" }, field.description) : null);
  return { field, node, read };
}

/**
 * The violations of `value` against the common JSON Schema keywords, for a message before
 * the answer is sent; the server revalidates an edit against the full schema either way.
 */
function validate(schema, value, at) {
  if (schema === true || typeof schema !== "object" || schema === null) return [];
  const out = [];
  const where = at || "/";
  const type = Array.isArray(value) ? "array" : value === null ? "null" : typeof value;
  const types = schema.type === undefined ? null : [].concat(schema.type);
  const fits = (t) => t === type || (t === "integer" && Number.isInteger(value)) || (t === "number" && type === "number");
  if (types && !types.some(fits)) return [`${where} must be ${types.join(" or ")}`];
  if (schema.enum && !schema.enum.some((x) => JSON.stringify(x) === JSON.stringify(value))) out.push(`${where} is not one of the allowed values`);
  if (type === "string") {
    if (schema.minLength !== undefined && [...value].length < schema.minLength) out.push(`${where} is shorter than ${schema.minLength}`);
    if (schema.maxLength !== undefined && [...value].length > schema.maxLength) out.push(`${where} is longer than ${schema.maxLength}`);
  }
  if (type === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${where} is below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.push(`${where} is above ${schema.maximum}`);
  }
  if (type === "object") {
    for (const name of schema.required || []) if (!(name in value)) out.push(`${at}/${name} is required`);
    const props = schema.properties || {};
    for (const [name, v] of Object.entries(value)) {
      if (name in props) out.push(...validate(props[name], v, `${at}/${name}`));
      else if (schema.additionalProperties === false) out.push(`${at}/${name} is not allowed`);
    }
  }
  if (type === "array" && schema.items) value.forEach((v, i) => out.push(...validate(schema.items, v, `${at}/${i}`)));
  return out;
}

// ---- the keyboard ----------------------------------------------------------------------

/** Whether a key typed at `node` is text being written (no shortcut then). */
function typing(node) {
  return node instanceof HTMLElement
    && (node.isContentEditable || node.matches("textarea, select, input:not([type=radio]):not([type=checkbox]):not([type=button]):not([type=submit])"));
}

function keys(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || !token) return;
  if (typing(event.target) || $("help").open) return;
  const panel = event.target instanceof Element ? event.target.closest(".action") : null;
  switch (event.key) {
    case "?":
      $("help").showModal();
      break;
    case "/":
      $("filter-text").focus();
      break;
    case "p": {
      const first = $("actions").querySelector(".action");
      if (first) first.focus();
      else return;
      break;
    }
    case "a":
    case "r": {
      const act = panel && quick.get(panel);
      if (!act) return;
      act(event.key === "a" ? "approve" : "reject");
      break;
    }
    default:
      return;
  }
  event.preventDefault();
}

// ---- start ------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", (e) => {
    e.preventDefault();
    signIn($("token").value.trim());
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("start-form").addEventListener("submit", start);
  $("refresh").addEventListener("click", () => loadExecutions());
  $("more").addEventListener("click", () => loadExecutions(true));
  $("cancel").addEventListener("click", cancel);
  $("follow-up-form").addEventListener("submit", followUp);
  for (const id of ["filter-state", "filter-adapter", "filter-since", "filter-text"]) $(id).addEventListener("input", filter);
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("help-open").addEventListener("click", () => $("help").showModal());
  $("help-close").addEventListener("click", () => $("help").close());
  document.addEventListener("keydown", keys);
  window.addEventListener("hashchange", route);
  // `#code=...` (the link `harness serve` prints): a one-time code, out of the address bar
  // and the tab's history at once, then exchanged for the token. A `#token=...` of an older
  // link is dropped unread: no URL is to hold a credential. Any other fragment is a place in
  // the console (`#/executions/...`), kept to be shown once signed in.
  const fragment = new URLSearchParams(location.hash.slice(1));
  const code = fragment.get("code");
  if (fragment.has("code") || fragment.has("token")) history.replaceState(null, "", location.pathname + location.search);
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (code) exchange(code, saved);
  else if (saved) signIn(saved);
  else signOut();
});

/** Signs in with a one-time code (else with `fallback`, a token kept from before). */
async function exchange(code, fallback) {
  try {
    const response = await fetch("/console/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code }),
    });
    const payload = await response.json().catch(() => ({}));
    if (response.ok && payload.token) return signIn(payload.token);
    if (fallback) return signIn(fallback);
    signOut((payload.error && payload.error.message) || `The sign-in link was refused (HTTP ${response.status}).`);
  } catch (e) {
    if (fallback) signIn(fallback);
    else signOut(`The sign-in link could not be used: ${e.message}`);
  }
}

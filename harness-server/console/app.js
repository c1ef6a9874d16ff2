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
  loadAdapters();
  loadExecutions();
}

function signOut(message = "") {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stopWatching();
  $("app").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in").hidden = false;
  $("sign-in-error").textContent = message;
}

// ---- the list ---------------------------------------------------------------------------

let next = null;
let selected = null;

async function loadAdapters() {
  try {
    const { adapters } = await api("/v1/adapters");
    const select = $("start-adapter");
    select.replaceChildren(...adapters.map((a) => el("option", { value: a.id }, a.id)));
  } catch (e) {
    $("start-error").textContent = e.message;
  }
}

async function loadExecutions(more = false) {
  const query = new URLSearchParams({ limit: "25" });
  if (more && next) query.set("before", next);
  try {
    const page = await api(`/v1/executions?${query}`);
    next = page.next;
    $("more").hidden = !next;
    const items = page.executions.map((e) => listItem(e));
    if (more) $("executions").append(...items);
    else $("executions").replaceChildren(...items);
    for (const e of page.executions) if (TERMINAL.has(e.state)) fillEnded(e.id);
  } catch (e) {
    $("start-error").textContent = e.message;
  }
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
  return el(
    "li",
    {
      "data-id": e.id,
      "data-created": e.createdAt,
      title: e.id,
      className: e.id === selected ? "selected" : "",
      onclick: () => watch(e.id),
    },
    el("div", { className: "row" },
      el("span", { className: `state ${e.state}` }, e.state.replace("_", " ")),
      el("span", { className: "adapter" }, e.adapter),
      el("span", { className: "message", title: e.message || "" }, e.message || "(no message)")),
    el("div", { className: "row muted" },
      started,
      el("span", { className: "duration", title: "how long it ran" },
        live ? `${duration(Date.now() - Date.parse(e.createdAt))} so far` : "…"),
      el("span", { className: "outcome" }, live ? "" : e.state)),
  );
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
  const li = [...$("executions").children].find((x) => x.dataset.id === id);
  if (!li) return;
  const ms = Date.parse(end.at) - Date.parse(li.dataset.created);
  li.querySelector(".duration").textContent = Number.isNaN(ms) ? "" : duration(ms);
  const outcome = li.querySelector(".outcome");
  outcome.textContent = end.why ? `${end.state}: ${end.why}` : end.state;
  outcome.title = outcome.textContent;
  outcome.className = `outcome ${end.state}`;
}

async function start(event) {
  event.preventDefault();
  $("start-error").textContent = "";
  const body = { adapter: $("start-adapter").value, message: $("start-message").value };
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
    await loadExecutions();
    watch(view.id);
  } catch (e) {
    $("start-error").textContent = e.message;
  }
}

// ---- one execution, live ----------------------------------------------------------------

let watching = null; // { id, abort, lastSeq, message, reasoning, tools }

function stopWatching() {
  if (watching) watching.abort.abort();
  watching = null;
}

async function watch(id) {
  stopWatching();
  selected = id;
  for (const li of $("executions").children) {
    li.classList.toggle("selected", li.dataset.id === id);
  }
  const w = { id, abort: new AbortController(), lastSeq: 0, message: null, reasoning: null, tools: new Map(), awaiting: new Set() };
  watching = w;
  $("empty").hidden = true;
  $("execution").hidden = false;
  $("exec-id").textContent = id;
  $("exec-error").textContent = "";
  $("transcript").replaceChildren();
  $("actions").replaceChildren();
  $("tools").replaceChildren();
  $("artifacts").replaceChildren();
  $("outcome").textContent = "";
  $("outcome").className = "";
  $("usage").textContent = "";
  try {
    const view = await api(`/v1/executions/${encodeURIComponent(id)}`, { signal: w.abort.signal });
    $("exec-adapter").textContent = view.adapter;
    setState(view.state);
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
      if (w.ended) return;
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
  const li = [...$("executions").children].find((x) => x.dataset.id === selected);
  if (li) {
    const pill = li.querySelector(".state");
    pill.textContent = state.replace("_", " ");
    pill.className = `state ${state}`;
    if (TERMINAL.has(state)) setTimeout(() => fillEnded(selected), 0);
  }
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
      $("artifacts").append(
        el("li", {}, el("strong", {}, data.name || data.id), " ", el("span", { className: "muted" }, data.mediaType), " ",
          el("code", {}, data.uri || "")),
      );
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
}

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

function showAction(w, request) {
  const kind = request.kind || {};
  const panel = el("div", { className: "action", "data-action": request.id });
  const error = el("p", { className: "error", role: "alert" });
  if (kind.type === "tool_approval") {
    const found = new Set();
    const rows = kind.calls.map((call) => approvalRow(call, found));
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
      }, "Dismiss"), hiddenNote(found)), error);
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
  // `#code=...` (the link `harness serve` prints): a one-time code, out of the address bar
  // and the tab's history at once, then exchanged for the token. A `#token=...` of an older
  // link is dropped unread: no URL is to hold a credential.
  const fragment = new URLSearchParams(location.hash.slice(1));
  const code = fragment.get("code");
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
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

//! The Sandbox Worker Protocol v1: an adapter's runtime hosted inside the sandbox, served
//! scoped facades by the control plane.
//!
//! A sandboxed agent process keeps the agent in; a sandboxed *worker* keeps the whole
//! adapter runtime in as well: the code that parses the agent's (hostile) output, and the
//! agent with it. The worker never holds a store handle, a credential or another
//! binding's state; it asks the control plane, which answers within the worker's
//! execution, binding and grants.
//!
//! - Control plane: [`WorkerRuntime`], a [`HarnessRuntime`](harness_core::adapter::HarnessRuntime)
//!   like any other, started on a [`WorkerLink`] (a sandbox's stdin and stdout, or any pair
//!   of streams).
//! - Worker: [`serve`], which builds the adapter's runtime from what the control plane sent
//!   and serves it until `cleanup`.
//!
//! # Specification (version 1)
//!
//! **Framing.** One stream each way, owned by the control plane (the worker's stdin and
//! stdout). A frame is the length of its body as 4 bytes, big-endian, then the body: one
//! JSON object, a message, with a `type` field. A body is 1 to [`MAX_FRAME_BYTES`] bytes;
//! the length is checked before the body is read. Unknown message types and unknown fields
//! are errors (a message that names a binding, an execution or a credential it has no field
//! for is refused by its shape).
//!
//! **Handshake.** The control plane's first frame is `start` `{protocol: 1, context}`; the
//! worker answers `ready` `{protocol: 1, result: {ok: null} | {err: <error>}}`. The
//! `context` is the runtime's narrowed construction context: adapter id, execution id, the
//! validated options and model, the conversation's id, the session binding (if any), the prompt, the granted
//! tools (each a descriptor and whether its calls need approval), the run limits, the
//! delivery the caller asked for, whether
//! it gets thread state, the heartbeat interval, and the adapter's own `settings` (the
//! operator's configuration of the instance). A worker that speaks another version answers
//! `ready` with an error and ends.
//!
//! **The runtime's operations** (control plane → worker, each with an `id` the control
//! plane chose) mirror [`HarnessRuntime`](harness_core::adapter::HarnessRuntime):
//!
//! | asks | answered by |
//! | --- | --- |
//! | `initialize` | `initialized` `{result: {ok: <provider session id or null>} \| {err}}` |
//! | `stream` `{turn}` | `event`s `{id, event}`, then `segmentEnd` `{id}` |
//! | `resume` `{response}` | `event`s, then `segmentEnd` |
//! | `pendingAction` | `pendingAction` `{action or null}` |
//! | `restore` `{restored: {turn, pending, log, answers}}` | `restored` `{result}` |
//! | `cancel` `{reason}` | `cancelled` `{requested}` |
//! | `restart` | `restarted` `{result}` |
//! | `cleanup` | `cleanedUp`; then the worker exits |
//!
//! A segment's `event`s are `content` (an event payload of a content kind:
//! `message.delta`, `reasoning.delta`, `usage`, `tool.call.*`, `tool.unavailable`,
//! `native`), `artifact` (a descriptor naming the worker's own execution), and at most one
//! terminal: `action` (the run pauses on an action request), `completed` or `failed` (a
//! public error: category, code, safe message, retry advice). `segmentEnd` ends it. The
//! contract's rules for a segment (exactly one terminal, nothing after it) are the
//! service's to enforce, as for any runtime: the protocol carries the runtime's stream as
//! it was.
//!
//! `resume` carries the caller's answer as the control plane validated it; the worker
//! validates it again against the action its runtime paused on, under that action's own
//! revision (the control plane owns the revision the caller saw).
//!
//! **The facades** (worker → control plane, each with an `id` the worker chose, answered
//! with the same `id`):
//!
//! | asks | answered by | scope |
//! | --- | --- | --- |
//! | `stateGet` `{key}` | `stateReply` `{result: {ok: {kind: "entry", value, version}} \| {err}}` | the runtime's own binding: the request names a key, never a binding |
//! | `statePut` `{key, value (base64), expected}` | `stateReply` `{ok: {kind: "written", version}}` | as above, compare-and-set |
//! | `stateDelete` `{key, expected}` | `stateReply` `{ok: {kind: "deleted"}}` | as above |
//! | `stateListKeys` | `stateReply` `{ok: {kind: "keys", keys}}` | as above |
//! | `fileRead` `{index, offset, len}` | `fileReply` `{result: {ok: <base64>} \| {err}}` | the input files of the turns the runtime was given (`stream` and `restore` carry each file's name, media type, kind and size; its bytes are read on demand, by its place among them from 0), at most [`FILE_CHUNK_BYTES`] a read, within the file |
//! | `toolCall` `{tool, callId, arguments, deadlineMs?}` | `toolReply` `{outcome}` | a granted tool, run by the control plane through its handle (validation, deadline, retries, output cap; credentials stay outside); a tool that needs approval runs only as the caller's last answer decided, with the arguments the caller approved or edited, never the worker's |
//! | `heartbeat` | nothing | the lease: the worker sends one every `heartbeatMs`; after three intervals of silence it is lost |
//!
//! Asking an action and awaiting its answer is a segment's `action` terminal and the
//! `resume` that follows.
//!
//! **Errors.** On the control plane's side, a malformed or oversized frame, an unknown
//! message, a message out of order (a second `ready`, an event for a segment not open or
//! already ended, an answer to no request or of another kind), a content event of a
//! lifecycle kind, an artifact of another execution, a state request from a runtime given
//! no thread state, a bad key, a file it was not given or a read past its end or over the
//! chunk size, a tool not granted, an approval-gated call the caller did not
//! approve, or more than [`MAX_WORKER_REQUESTS`] requests open at once, ends the worker:
//! `protocol` `WORKER_PROTOCOL`, logged with what it was, never the server. A worker that
//! exits, closes its output or misses its lease is `unavailable` `WORKER_LOST` (a sandbox
//! limit it reached is that limit's error, `SANDBOX_LIMIT` or `SANDBOX_WALL_TIME`; what a
//! sandboxed worker writes, its frames and its stderr, counts against the profile's
//! `outputBytes`). Either
//! way every open segment ends with that error as its last item (so the execution gets
//! exactly one terminal event), the worker is killed with its sandbox, and
//! [`lost`](harness_core::adapter::HarnessRuntime::lost) resolves for an execution awaiting
//! an action.
//!
//! On the worker's side, a control plane that breaks the protocol or closes the link ends
//! the worker, after its runtime's cleanup.
//!
//! # Decisions where the spec is silent
//!
//! - JSON, not a binary encoding: the messages are the contract's own wire types (event
//!   payloads, action requests and responses, public errors, tool outcomes), already
//!   specified and schema'd as JSON; a frame costs one serialization each way.
//! - A worker hosts one runtime (one execution): its process, and its sandbox, are the
//!   execution's. It sees the conversation's id but not its caller (its
//!   `config.conversation` is the id in the anonymous scope): within one runtime the id
//!   is key enough, what lasts across turns is in the thread state of the caller's
//!   binding, and the caller stays in the control plane.
//! - The worker's thread state handle cannot clear its session (`session.clear` is the
//!   control plane's).
//! - Backpressure: each segment buffers 256 items for its reader; beyond that the control
//!   plane stops reading the worker, whose writes then block. A reader that went away takes
//!   nothing more.
//! - `restore` is carried: a fresh worker takes over a pause (another replica's, or one the
//!   service's pool evicted) from what the store kept, sent whole in one frame (the log up
//!   to the pause and the earlier answers); a log past the frame limit cannot be, and the
//!   worker is then `WORKER_LOST`. `HarnessRuntime::restorable` is not carried: a hosted
//!   runtime reports the default, `true`.

mod control;
mod in_process;
mod serve;
mod wire;

pub use control::{MAX_WORKER_REQUESTS, WorkerLink, WorkerOptions, WorkerRuntime};
pub use in_process::InProcessWorker;
pub use serve::{MakeAdapter, serve};
pub use wire::{FILE_CHUNK_BYTES, MAX_FRAME_BYTES, PROTOCOL_VERSION};

//! Fixtures over several steps of one run: cancellation while the runtime initializes and
//! while a resumed segment streams, sequential interrupts, and submitted forms.

use std::pin::pin;

use futures_util::{FutureExt, StreamExt};
use harness_core::action::{
    ActionKind, ActionRequest, ApprovalResponse, FieldKind, FormRequest, FormResponse, FormValues,
    ToolDecision,
};
use harness_core::adapter::{AdapterEvent, ResumeDecision};
use harness_core::error::ErrorCode;
use harness_core::event::{CancelReason, EventPayload, ToolCallOutcome};
use harness_core::id::{ActionId, Cursor};
use harness_core::service::{ExecutionHandle, ExecutionRequest, Outcome};
use serde_json::Value;

use crate::observe::{Spy, until};
use crate::probe::{self, Observed};
use crate::{Bounds, Knobs};

type Verdict = Result<String, String>;

/// Lets a started hook get under way (it is pending on its own work, not on the suite).
async fn settle_in() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// Exactly one `run.cancelled`, the outcome cancelled, and the runtime cleaned up exactly
/// once.
async fn ended_cancelled_once(obs: &Observed, spy: &Spy, b: Bounds, when: &str) -> Verdict {
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Cancelled(_)) {
        return Err(format!("cancelled {when}, the run ended {}", obs.ended()));
    }
    let cancelled = obs.count(|p| matches!(p, EventPayload::RunCancelled(_)));
    if cancelled != 1 {
        return Err(format!(
            "cancelled {when}: {cancelled} run.cancelled events (exactly one expected)"
        ));
    }
    until(b.grace, || spy.count("cleanup") >= 1).await;
    settle_in().await;
    let cleanups = spy.count("cleanup");
    if cleanups != 1 {
        return Err(format!(
            "cancelled {when}: the runtime was cleaned up {cleanups} time(s) (exactly once \
             expected)"
        ));
    }
    Ok(format!("cancelled {when}: one run.cancelled, one cleanup"))
}

/// Starts `request` through a service on an adapter of `knobs` that the returned spy sees.
/// The execution keeps the service alive.
async fn start_spied<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
    b: Bounds,
) -> Result<(Spy, probe::Started), String> {
    let spy = Spy::default();
    let service = probe::service(spy.wrap(knobs.adapter()), b);
    let handle = probe::start(&service, request).await?;
    Ok((spy, handle))
}

/// Waits (bounded by `run`) until the service called the runtime's `hook`, lets the call get
/// under way, then cancels the run and waits for its end. Fails (cancelling the run) when
/// the service never `called` it.
async fn cancel_once_called(
    handle: &ExecutionHandle,
    spy: &Spy,
    hook: &str,
    called: &str,
    b: Bounds,
) -> Result<Observed, String> {
    if !until(b.run, || spy.count(hook) >= 1).await {
        handle.cancel(CancelReason::new("conformance"));
        return Err(format!(
            "the service never {called} the runtime within {:?}",
            b.run
        ));
    }
    settle_in().await;
    handle.cancel(CancelReason::new("conformance"));
    probe::finish(handle, b).await
}

/// `cancel.during_initialize`: at the runtime boundary, a slow `initialize` returns within
/// grace after the cancel hook; through the service, a cancel while it runs ends the run
/// with exactly one `run.cancelled` and one cleanup.
pub(crate) async fn cancel_during_initialize<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &request, b).await?;
    let direct = async {
        let mut init = pin!(probe::caught(async { d.runtime.initialize().await }));
        for _ in 0..16 {
            if (&mut init).now_or_never().is_some() {
                return Err(
                    "initialize returned before any cancel: the knob's initialize is not slow"
                        .to_owned(),
                );
            }
            tokio::task::yield_now().await;
        }
        probe::hook("cancel", b.grace, || {
            d.runtime.cancel(CancelReason::new("conformance"))
        })
        .await?;
        match tokio::time::timeout(b.grace, &mut init).await {
            Err(_) => Err(format!(
                "cancel ignored: initialize did not return within grace ({:?}) after the \
                 cancel hook",
                b.grace
            )),
            Ok(Err(panic)) => Err(format!("initialize panicked: {panic}")),
            Ok(Ok(_)) => Ok(()),
        }
    }
    .await;
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    direct?;

    let (spy, handle) = start_spied(knobs, request, b).await?;
    let obs = cancel_once_called(&handle, &spy, "initialize", "initialized", b).await?;
    let evidence = ended_cancelled_once(&obs, &spy, b, "while initializing").await?;
    Ok(format!(
        "initialize returned after the cancel hook; {evidence}"
    ))
}

/// The answer approving every call of `action`, and the calls.
fn approve_all(action: &ActionRequest) -> Result<(ApprovalResponse, Vec<String>), String> {
    let ActionKind::ToolApproval(approval) = &action.kind else {
        return Err(format!("action {} is not a tool approval", action.id));
    };
    let calls: Vec<String> = approval
        .calls()
        .iter()
        .map(|c| c.call_id().to_string())
        .collect();
    let response = ApprovalResponse::decide(
        action.id.clone(),
        action.revision,
        approval
            .calls()
            .iter()
            .map(|c| ToolDecision::approve(c.call_id().clone())),
    );
    Ok((response, calls))
}

/// Waits (bounded) for an action whose id is not in `seen`; returns it. When none comes, the
/// execution is cancelled (see [`probe::wait_action`]).
async fn next_action(
    handle: &ExecutionHandle,
    b: Bounds,
    seen: &[ActionId],
) -> Result<ActionRequest, String> {
    let mut events = handle.events(Cursor::START);
    let wait = async {
        let mut requested: Vec<&ActionId> = Vec::new();
        while let Some(e) = events.next().await {
            match e.payload() {
                EventPayload::ActionRequested(a) if !seen.contains(&a.id) => {
                    return Ok((**a).clone());
                }
                EventPayload::ActionRequested(a) => {
                    if requested.contains(&&a.id) {
                        return Err(format!(
                            "action reused: the interrupt raised after an answer re-opened \
                             answered action {} instead of opening a new one",
                            a.id
                        ));
                    }
                    if let Some(id) = seen.iter().find(|id| **id == a.id) {
                        requested.push(id);
                    }
                }
                p if p.is_terminal() => {
                    return Err(format!(
                        "the run ended ({}) after {} action(s) without opening another",
                        e.kind().as_str(),
                        seen.len()
                    ));
                }
                _ => {}
            }
        }
        Err("the event stream ended without an action".to_owned())
    };
    probe::cancel_unless(handle, b.run, "no new action was opened", wait).await
}

/// `cancel.during_resume`: at the runtime boundary, a resumed segment that works until
/// cancelled ends within grace after the cancel hook, without completing; through the
/// service, a cancel after the answer, while the resumed segment streams, ends the run with
/// exactly one `run.cancelled`, one `action.resolved` and one cleanup.
pub(crate) async fn cancel_during_resume<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let adapter = knobs.adapter();
    let d = probe::direct(&adapter, &request, b).await?;
    let direct = async {
        let seg = d.first_segment(b).await?;
        let Some(Ok(AdapterEvent::Action(interrupt))) = seg.terminal() else {
            return Err("the first segment did not end on an interrupt".to_owned());
        };
        let ActionKind::ToolApproval(approval) = &interrupt.kind else {
            return Err("the interrupt is not a tool approval".to_owned());
        };
        let action = ActionRequest::new(ActionKind::ToolApproval(approval.clone()))
            .with_id(interrupt.id.clone());
        let (response, _) = approve_all(&action)?;
        let validated = action
            .validate(response.into())
            .map_err(|e| format!("the suite's answer did not validate: {e}"))?;
        let decision = ResumeDecision::new(validated);
        let cancel = async {
            settle_in().await;
            probe::hook("cancel", b.grace, || {
                d.runtime.cancel(CancelReason::new("conformance"))
            })
            .await
        };
        let (seg, cancelled) = futures_util::future::join(
            probe::drain(|| d.runtime.resume(decision), b.grace),
            cancel,
        )
        .await;
        cancelled?;
        if let Some(p) = &seg.panicked {
            return Err(format!("the resumed segment panicked: {p}"));
        }
        if !seg.ended {
            return Err(format!(
                "cancel ignored: the resumed segment did not end within grace ({:?}) after \
                 the cancel hook",
                b.grace
            ));
        }
        if seg.count(|e| matches!(e, AdapterEvent::Completed(_))) > 0 {
            return Err(
                "cancel ignored: the resumed segment completed after the cancel hook".to_owned(),
            );
        }
        Ok(())
    }
    .await;
    let _ = probe::hook("cleanup", b.grace, || d.runtime.cleanup()).await;
    direct?;

    let (spy, handle) = start_spied(knobs, request, b).await?;
    let action = probe::wait_action(&handle, b).await?;
    let (response, _) = approve_all(&action)?;
    handle
        .respond(response.into())
        .await
        .map_err(|e| format!("the answer was refused: {}", e.message()))?;
    let obs = cancel_once_called(&handle, &spy, "resume", "resumed", b).await?;
    let resolved = obs.count(|p| matches!(p, EventPayload::ActionResolved(_)));
    if resolved != 1 {
        return Err(format!(
            "{resolved} action.resolved events for one answered action"
        ));
    }
    let evidence =
        ended_cancelled_once(&obs, &spy, b, "while the resumed segment streamed").await?;
    Ok(format!(
        "the resumed segment ended after the cancel hook; {evidence}"
    ))
}

/// `action.sequential_interrupts`: an interrupt raised by the resumed segment is a new action;
/// each of the two is answered once (a repeated answer is refused), each call completes once,
/// and the log stays contiguous.
pub(crate) async fn sequential_interrupts<Kn: Knobs>(
    knobs: &Kn,
    request: ExecutionRequest,
) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    let first = probe::wait_action(&handle, b).await?;
    let (answer, mut calls) = approve_all(&first)?;
    handle
        .respond(answer.clone().into())
        .await
        .map_err(|e| format!("the first answer was refused: {}", e.message()))?;
    let second = next_action(&handle, b, std::slice::from_ref(&first.id)).await?;
    if handle.respond(answer.into()).await.is_ok() {
        handle.cancel(CancelReason::new("conformance"));
        return Err("action accepted twice: the first action was answered again".to_owned());
    }
    let (answer, more) = approve_all(&second)?;
    calls.extend(more);
    handle
        .respond(answer.clone().into())
        .await
        .map_err(|e| format!("the second answer was refused: {}", e.message()))?;
    if handle.respond(answer.into()).await.is_ok() {
        return Err("action accepted twice: the second action was answered again".to_owned());
    }
    let obs = probe::finish(&handle, b).await?;
    obs.check_log()?;
    if !matches!(obs.outcome, Outcome::Succeeded(_)) {
        return Err(format!(
            "the run did not succeed after both answers: {}",
            obs.ended()
        ));
    }
    for id in [&first.id, &second.id] {
        let resolved =
            obs.count(|p| matches!(p, EventPayload::ActionResolved(r) if &r.action_id == id));
        if resolved != 1 {
            return Err(format!(
                "action {id} resolved {resolved} time(s) (exactly once expected)"
            ));
        }
    }
    let requested = obs.count(|p| matches!(p, EventPayload::ActionRequested(_)));
    if requested != 2 {
        return Err(format!(
            "{requested} action.requested events for two sequential interrupts"
        ));
    }
    for call in &calls {
        let done = obs.count(|p| {
            matches!(p, EventPayload::ToolCallCompleted(c)
                if c.call_id.to_string() == *call && matches!(c.outcome, ToolCallOutcome::Success { .. }))
        });
        if done != 1 {
            return Err(format!(
                "approved call {call} completed {done} time(s) (exactly once expected)"
            ));
        }
    }
    Ok(format!(
        "two sequential actions, each answered once, repeats refused; {} calls completed; \
         1..{} contiguous",
        calls.len(),
        obs.events.len()
    ))
}

/// A valid value for `kind`, if the suite can make one.
fn valid_value(kind: &FieldKind) -> Option<Value> {
    Some(match kind {
        FieldKind::Text {
            min_length,
            max_length,
            pattern: None,
        } => {
            let n = min_length.unwrap_or(1).max(1);
            if max_length.is_some_and(|m| m < n) {
                return None;
            }
            Value::String("c".repeat(n as usize))
        }
        FieldKind::Text { .. } => return None,
        FieldKind::Number {
            minimum, maximum, ..
        } => {
            let v = minimum.or(*maximum).unwrap_or(1.0).ceil();
            if maximum.is_some_and(|m| v > m) {
                return None;
            }
            serde_json::Number::from_f64(v).map(Value::Number)?
        }
        FieldKind::Boolean => Value::Bool(true),
        FieldKind::Choice { options, multiple } => {
            let first = Value::String(options.first()?.clone());
            if *multiple {
                Value::Array(vec![first])
            } else {
                first
            }
        }
    })
}

/// A value of the wrong type for `kind`.
fn invalid_value(kind: &FieldKind) -> Value {
    match kind {
        FieldKind::Text { .. } => Value::Bool(true),
        FieldKind::Number { .. } | FieldKind::Boolean => Value::String("conformance".to_owned()),
        FieldKind::Choice { .. } => Value::Object(serde_json::Map::new()),
    }
}

/// Valid values for every field of `form` the suite can fill (required or not), checked
/// against the form itself.
fn valid_values(form: &FormRequest) -> Result<FormValues, String> {
    let mut values = FormValues::new();
    for field in form.fields() {
        match valid_value(&field.kind) {
            Some(v) => {
                values.insert(field.name.to_string(), v);
            }
            None if field.required => {
                return Err(format!(
                    "the suite cannot make a valid value for required field {}",
                    field.name
                ));
            }
            None => {}
        }
    }
    form.validate(&values)
        .map_err(|v| format!("the suite's values do not validate: {v:?}"))?;
    Ok(values)
}

/// `action.form_submit`: an invalid submission is refused with a validation error naming the
/// field and the action stays pending, unchanged; a valid one is then accepted once, and the
/// run continues to success.
pub(crate) async fn form_submit<Kn: Knobs>(knobs: &Kn, request: ExecutionRequest) -> Verdict {
    let b = knobs.bounds();
    let service = probe::service(knobs.adapter(), b);
    let handle = probe::start(&service, request).await?;
    let verdict = async {
        let action = probe::wait_action(&handle, b).await?;
        let ActionKind::FormInput(form) = &action.kind else {
            return Err("the action is not a form".to_owned());
        };
        let Some(field) = form.fields().first() else {
            return Err("the form has no field to submit".to_owned());
        };
        let valid = valid_values(form)?;
        let mut invalid = valid.clone();
        invalid.insert(field.name.to_string(), invalid_value(&field.kind));
        let before = handle.log().len();
        match handle
            .respond(FormResponse::submit(action.id.clone(), action.revision, invalid).into())
            .await
        {
            Err(e) if e.code() == &ErrorCode::ACTION_RESPONSE_INVALID => {
                if !e.message().contains(field.name.as_str()) {
                    return Err(format!(
                        "the refusal of an invalid submission does not name field {}: {}",
                        field.name,
                        e.message()
                    ));
                }
            }
            Err(e) => {
                return Err(format!(
                    "an invalid submission was refused with {} instead of \
                     ACTION_RESPONSE_INVALID: {}",
                    e.code(),
                    e.message()
                ));
            }
            Ok(()) => {
                return Err(format!(
                    "an invalid submission (field {}) was accepted",
                    field.name
                ));
            }
        }
        let pending = handle.pending_actions();
        if pending.first().map(|a| (&a.id, a.revision)) != Some((&action.id, action.revision)) {
            return Err("the action did not stay pending after an invalid submission".to_owned());
        }
        let after: Vec<&'static str> = handle
            .log()
            .snapshot(Cursor::START)
            .iter()
            .skip(before)
            .map(|e| e.kind().as_str())
            .collect();
        if after.contains(&"action.resolved") {
            return Err(format!(
                "an invalid submission was half-applied: the log gained {after:?}"
            ));
        }
        let submit = FormResponse::submit(action.id.clone(), action.revision, valid);
        handle
            .respond(submit.clone().into())
            .await
            .map_err(|e| format!("a valid submission was refused: {}", e.message()))?;
        if handle.respond(submit.into()).await.is_ok() {
            return Err(
                "action accepted twice: the valid submission was accepted again".to_owned(),
            );
        }
        let obs = probe::finish(&handle, b).await?;
        obs.check_log()?;
        let resolved = obs.count(|p| matches!(p, EventPayload::ActionResolved(_)));
        if resolved != 1 {
            return Err(format!("{resolved} action.resolved events for one form"));
        }
        if !matches!(obs.outcome, Outcome::Succeeded(_)) {
            return Err(format!(
                "the run did not succeed after the submission: {}",
                obs.ended()
            ));
        }
        Ok(format!(
            "invalid value for {} refused naming it, action kept; valid submission accepted \
             once; run.succeeded",
            field.name
        ))
    }
    .await;
    if verdict.is_err() {
        handle.cancel(CancelReason::new("conformance"));
    }
    verdict
}

//! Broken adapters that leak a file descriptor or a child process: the
//! `observability.leaks.fds_children` fixture must fail each, naming the rule, and pass the
//! same adapter without its leak.
//!
//! Open descriptors and child processes are counted for the whole process, so this binary
//! holds one test that runs its cases one after another (the other broken adapters, in
//! `broken.rs`, run in parallel and would blur the counts).

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use harness_conformance::{Behaviour, Bounds, FixtureOutcome, Knobs, run_fixture};
use harness_core::adapter::{
    AdapterEvent, BoxStream, EventResult, RunContext, Simple, SimpleAdapter,
};
use harness_core::event::{Content, RunSucceeded, TextDelta};
use harness_core::manifest::{ContractVersion, Describe, ExecutionMode, HarnessDescriptor};
use harness_core::service::ExecutionRequest;

const FIXTURE: &str = "observability.leaks.fds_children";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leak {
    None,
    /// Every run opens a file and never closes it.
    Fd,
    /// Every run spawns `sleep 30` and never kills nor reaps it.
    Child,
}

/// What the leaking runs hold on to, so the test can release it afterwards.
#[derive(Debug, Default)]
struct Leaked {
    files: Vec<File>,
    children: Vec<Child>,
}

#[derive(Debug)]
struct Leaky {
    leak: Leak,
    descriptor: HarnessDescriptor,
    leaked: Arc<Mutex<Leaked>>,
}

impl Describe for Leaky {
    fn descriptor(&self) -> &HarnessDescriptor {
        &self.descriptor
    }
}

impl SimpleAdapter for Leaky {
    fn stream(&self, _run: RunContext) -> BoxStream<'static, EventResult> {
        let mut leaked = self.leaked.lock().unwrap_or_else(PoisonError::into_inner);
        match self.leak {
            Leak::None => {}
            Leak::Fd => leaked
                .files
                .push(File::open("/dev/null").expect("open /dev/null")),
            Leak::Child => leaked.children.push(
                Command::new("sleep")
                    .arg("30")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn sleep"),
            ),
        }
        Box::pin(futures_util::stream::iter([
            Ok(AdapterEvent::Content(Content::MessageDelta(
                TextDelta::new("hello"),
            ))),
            Ok(AdapterEvent::Completed(RunSucceeded::default())),
        ]))
    }
}

#[derive(Debug)]
struct LeakyKnobs {
    leak: Leak,
    leaked: Arc<Mutex<Leaked>>,
}

impl LeakyKnobs {
    fn new(leak: Leak) -> Self {
        Self {
            leak,
            leaked: Arc::default(),
        }
    }

    /// Kills and reaps every leaked child, closes every leaked file; returns how many
    /// children there were.
    fn release(&self) -> usize {
        let mut leaked = self.leaked.lock().unwrap_or_else(PoisonError::into_inner);
        leaked.files.clear();
        let n = leaked.children.len();
        for mut child in leaked.children.drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
        n
    }
}

impl Drop for LeakyKnobs {
    fn drop(&mut self) {
        // Even when an assertion failed: leave no `sleep` behind.
        self.release();
    }
}

impl Knobs for LeakyKnobs {
    type Adapter = Simple<Leaky>;

    fn adapter(&self) -> Simple<Leaky> {
        let descriptor = HarnessDescriptor::builder("leaky".parse().unwrap(), "0.0.1")
            .contract_version(ContractVersion::V1)
            .execution_mode(ExecutionMode::in_process())
            .build()
            .unwrap();
        Simple::new(Leaky {
            leak: self.leak,
            descriptor,
            leaked: Arc::clone(&self.leaked),
        })
    }

    fn request_for(&self, behaviour: &Behaviour) -> Option<ExecutionRequest> {
        matches!(behaviour, Behaviour::StreamText).then(|| ExecutionRequest::new("text"))
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            run: Duration::from_secs(5),
            grace: Duration::from_millis(500),
        }
    }

    fn process_isolated(&self) -> bool {
        // This binary runs one test, and its cases one at a time.
        true
    }
}

async fn outcome(knobs: &LeakyKnobs) -> FixtureOutcome {
    run_fixture(knobs, FIXTURE)
        .await
        .expect("the fixture exists")
        .outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaked_file_descriptors_and_child_processes_are_caught() {
    // The control: the same adapter without a leak passes, so each failure is the leak's.
    let control = LeakyKnobs::new(Leak::None);
    let got = outcome(&control).await;
    assert!(matches!(got, FixtureOutcome::Passed { .. }), "{got:?}");

    let fd = LeakyKnobs::new(Leak::Fd);
    let got = outcome(&fd).await;
    match &got {
        FixtureOutcome::Failed { reason } => assert!(
            reason.contains("resource leak: 2 file descriptor(s) still open after 2 executions"),
            "{FIXTURE} failed for another reason: {reason}"
        ),
        other => panic!("{FIXTURE} did not fail for a leaked fd: {other:?}"),
    }
    fd.release();

    let child = LeakyKnobs::new(Leak::Child);
    let got = outcome(&child).await;
    match &got {
        FixtureOutcome::Failed { reason } => assert!(
            reason.contains("resource leak: child process(es)")
                && reason.contains("outlive 2 executions"),
            "{FIXTURE} failed for another reason: {reason}"
        ),
        other => panic!("{FIXTURE} did not fail for a leaked child: {other:?}"),
    }
    assert_eq!(child.release(), 2, "each run spawned one child");

    // Released, the process is back where it was: the control passes again.
    let got = outcome(&control).await;
    assert!(matches!(got, FixtureOutcome::Passed { .. }), "{got:?}");
}

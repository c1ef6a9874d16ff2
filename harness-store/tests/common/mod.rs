//! The model-based test of the lease, fencing and append rules, shared by the backends'
//! tests.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;

use harness_core::id::Cursor;
use harness_core::store::{ExecutionStore, Lease, ReplicaId, StoreError};
use harness_store::suite;
use proptest::prelude::*;

/// One step of the model-based test.
#[derive(Debug, Clone)]
pub enum Op {
    /// Replica `r` takes (or renews) the lease.
    Acquire(usize),
    /// Replica `r` gives its last lease up.
    Release(usize),
    /// Replica `r` appends `n` events after the log (or, `gap`, one too far).
    Append { r: usize, n: u64, gap: bool },
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize).prop_map(Op::Acquire),
        (0..3usize).prop_map(Op::Release),
        (0..3usize, 1..4u64, proptest::bool::weighted(0.2)).prop_map(|(r, n, gap)| Op::Append {
            r,
            n,
            gap
        }),
    ]
}

/// What the contract says each step does, on an execution with three replicas.
#[derive(Default)]
struct Model {
    holder: Option<usize>,
    token: u64,
    /// The token each replica last received.
    tokens: [Option<u64>; 3],
    last: u64,
}

pub async fn run_model<S: ExecutionStore>(store: &S, ops: &[Op]) -> Result<(), TestCaseError> {
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let replicas: Vec<ReplicaId> = (0..3).map(|r| ReplicaId::new(format!("r{r}"))).collect();
    let mut leases: [Option<Lease>; 3] = Default::default();
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Acquire(r) => {
                let got = store
                    .acquire(&id, &replicas[r], Duration::from_secs(60))
                    .await;
                match model.holder {
                    Some(h) if h != r => {
                        prop_assert!(matches!(got, Err(StoreError::Leased { .. })), "{got:?}");
                    }
                    Some(_) => {
                        let lease = got.expect("a renewal");
                        prop_assert_eq!(lease.token.get(), model.token);
                        leases[r] = Some(lease);
                    }
                    None => {
                        model.token += 1;
                        model.holder = Some(r);
                        model.tokens[r] = Some(model.token);
                        let lease = got.expect("a free lease");
                        prop_assert_eq!(lease.token.get(), model.token);
                        leases[r] = Some(lease);
                    }
                }
            }
            Op::Release(r) => {
                let Some(lease) = &leases[r] else { continue };
                let got = store.release(lease).await;
                if model.holder == Some(r) && model.tokens[r] == Some(model.token) {
                    prop_assert_eq!(got, Ok(()));
                    model.holder = None;
                } else {
                    prop_assert!(matches!(got, Err(StoreError::Fenced { .. })), "{got:?}");
                }
            }
            Op::Append { r, n, gap } => {
                let Some(lease) = &leases[r] else { continue };
                let from = model.last + 1 + u64::from(gap);
                let batch = suite::events(&id, from, from + n - 1);
                let got = store.append(lease, &batch).await;
                let current = model.holder == Some(r) && model.tokens[r] == Some(model.token);
                if !current {
                    prop_assert!(matches!(got, Err(StoreError::Fenced { .. })), "{got:?}");
                } else if gap {
                    prop_assert!(matches!(got, Err(StoreError::Sequence { .. })), "{got:?}");
                } else {
                    prop_assert_eq!(got, Ok(()));
                    model.last += n;
                }
            }
        }
        let stored = store.read(&id, Cursor::START, 10_000).await.expect("read");
        prop_assert_eq!(stored.len() as u64, model.last);
        prop_assert!(
            stored
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq().get() == i as u64 + 1)
        );
    }
    Ok(())
}

/// `<temp>/harness-store-tests/<pid>-<name>`, fresh. The first call of a process removes the
/// directories of test processes no longer running: what a run leaves lasts until the next.
pub fn scratch(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = std::env::temp_dir().join("harness-store-tests");
    SWEPT.call_once(|| {
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let dead = name
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            if dead {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    let dir = root.join(format!("{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

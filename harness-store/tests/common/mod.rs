//! The model-based test of the lease, fencing and append rules, shared by the backends'
//! tests.
#![allow(dead_code, unreachable_pub, unused_imports)]

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
/// Writes, as code from before conversations were scoped by principal did, executions and
/// thread state of three conversations of adapter `openai`, each binding in the unscoped
/// form (`adapter:conversation`): `shared`, started by alice and then named by bob (so,
/// then, alice's state), cleared once; `local`, started in-process and then named by carol;
/// `orphan`, whose executions are gone.
pub async fn seed_unscoped_conversations<S>(store: &S)
where
    S: ExecutionStore + harness_core::session::ThreadStateStore,
{
    use harness_core::id::ExecutionId;
    use harness_core::store::ExecutionRecord;

    for (principal, conversation) in [
        ("alice", "shared"),
        ("bob", "shared"),
        ("", "local"),
        ("carol", "local"),
    ] {
        let request = serde_json::json!({"message": "hi", "conversationId": conversation});
        let record = ExecutionRecord::new(ExecutionId::generate(), "openai", "fp", request)
            .with_principal(principal);
        store.create(record).await.expect("create");
    }
    let key = history();
    for (conversation, value) in [("shared", "alice's"), ("local", "local"), ("orphan", "?")] {
        let binding = unscoped(conversation);
        store
            .put(&binding, &key, value.as_bytes().to_vec(), None)
            .await
            .expect("write");
    }
    let cleared = store.clear(&unscoped("shared")).await.expect("clear");
    store
        .put(&cleared, &key, b"alice's, cleared".to_vec(), None)
        .await
        .expect("write");
}

/// After the migration: `shared` is alice's (its state and epoch with it), bob's and the
/// anonymous `shared` are fresh; `local` stays anonymous, carol's is fresh; `orphan` stays.
pub async fn check_scoped_conversations<S>(store: &S)
where
    S: harness_core::session::ThreadStateStore,
{
    use harness_core::session::Conversation;

    let of =
        |caller: &str, id: &str| Conversation::new(caller.parse().unwrap(), id.parse().unwrap());
    let anonymous = |id: &str| Conversation::anonymous(id.parse().unwrap());
    for (conversation, expected) in [
        (of("alice", "shared"), (1, Some("alice's, cleared"))),
        (of("bob", "shared"), (0, None)),
        (anonymous("shared"), (0, None)),
        (anonymous("local"), (0, Some("local"))),
        (of("carol", "local"), (0, None)),
        (anonymous("orphan"), (0, Some("?"))),
    ] {
        let binding = harness_core::session::BindingId::for_conversation(
            &"openai".parse().unwrap(),
            &conversation,
        );
        let current = store
            .current(&binding, conversation.id())
            .await
            .expect("current");
        let value = store.get(&current, &history()).await.expect("read");
        let value = value.map(|e| String::from_utf8(e.value).unwrap());
        assert_eq!(
            (current.epoch(), value.as_deref()),
            expected,
            "{:?}",
            conversation
        );
    }
}

fn history() -> harness_core::session::StateKey {
    "history".parse().expect("a key")
}

/// The binding of anonymous `conversation` of `openai`: every binding's form before scoping.
fn unscoped(conversation: &str) -> harness_core::session::SessionBinding {
    use harness_core::session::{BindingId, Conversation, SessionBinding};
    let id: harness_core::id::ConversationId = conversation.parse().unwrap();
    let binding = BindingId::for_conversation(
        &"openai".parse().unwrap(),
        &Conversation::anonymous(id.clone()),
    );
    SessionBinding::new(binding, id)
}

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

#[cfg(feature = "postgres")]
pub use postgres::*;

/// A throwaway PostgreSQL cluster.
#[cfg(feature = "postgres")]
mod postgres {
    use std::net::TcpListener;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use harness_store::PostgresStore;

    use super::scratch;

    /// The server's programs: on `PATH`, else Debian's versioned directory.
    pub fn program(name: &str) -> PathBuf {
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        });
        if let Some(found) = on_path {
            return found;
        }
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("bin").join(name))
            .filter(|p| p.is_file())
            .collect();
        versions.sort();
        versions.pop().unwrap_or_else(|| {
            panic!("PostgreSQL's `{name}` is not installed: run .ci/install-postgres.sh (Debian's postgresql package)")
        })
    }

    pub fn is_root() -> bool {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    }

    /// `program args...`, as the `postgres` user when this process is root.
    pub fn command(program: &Path, args: &[&str]) -> Command {
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program).args(args);
            c
        } else {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    }

    pub struct Cluster {
        server: Child,
        /// The connection string.
        pub url: String,
        dir: PathBuf,
    }

    impl Cluster {
        /// Starts a throwaway cluster.
        pub fn start() -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = scratch(&format!("postgres{n}"));
            if is_root() {
                let owned = Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&dir)
                    .status()
                    .expect("chown");
                assert!(owned.success(), "chown the cluster's directory to postgres");
            }
            let data = dir.join("data");
            let data_arg = data.to_str().expect("a UTF-8 path");
            let init = command(
                &program("initdb"),
                &["-D", data_arg, "-A", "trust", "-U", "postgres", "--no-sync"],
            )
            .stdout(Stdio::null())
            .status()
            .expect("initdb runs");
            assert!(init.success(), "initdb");
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
                .to_string();
            let sockets = dir.to_str().expect("a UTF-8 path");
            let server = command(
                &program("postgres"),
                &[
                    "-D",
                    data_arg,
                    "-p",
                    &port,
                    "-k",
                    sockets,
                    "-c",
                    "listen_addresses=127.0.0.1",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
            let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
            Self { server, url, dir }
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            // A fast shutdown, so that no server process outlives the test binary.
            let data = self.dir.join("data");
            let _ = command(
                &program("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap_or_default(),
                    "stop",
                    "-m",
                    "immediate",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
            let _ = self.server.kill();
            let _ = self.server.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A store on `cluster`'s database, once the server accepts connections.
    pub async fn connect(cluster: &Cluster) -> PostgresStore {
        let begun = Instant::now();
        loop {
            match PostgresStore::connect(&cluster.url).await {
                Ok(store) => return store,
                Err(e) if begun.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("PostgreSQL did not come up: {e}"),
            }
        }
    }
}

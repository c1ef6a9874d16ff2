//! The store suite, the model-based property test and a durable service on `PostgresStore`,
//! against a real PostgreSQL: a throwaway cluster the test starts in a temporary directory
//! on a free loopback port (Debian's `postgresql` package, `.ci/install-postgres.sh`), run
//! as the `postgres` user when the tests run as root (the server refuses root).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness_core::id::Cursor;
use harness_core::store::{ExecutionStore, ReplicaId};
use harness_store::{PostgresStore, suite};

/// The server's programs: on `PATH`, else Debian's versioned directory.
fn program(name: &str) -> PathBuf {
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

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program args...`, as the `postgres` user when this process is root.
fn command(program: &Path, args: &[&str]) -> Command {
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

struct Cluster {
    server: Child,
    url: String,
    dir: PathBuf,
}

impl Cluster {
    fn start() -> Self {
        let dir = common::scratch("postgres");
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
async fn connect(cluster: &Cluster) -> PostgresStore {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_passes_the_suite_tails_across_replicas_and_follows_the_model() {
    // One test holds the cluster: it is stopped (Drop) when the test ends, pass or fail.
    let cluster = Cluster::start();
    let store = connect(&cluster).await;
    suite::check(store.clone()).await;
    suite::durable_service(Arc::new(store.clone())).await;

    // A second store on the same database (another replica) follows an execution this one
    // writes, woken by NOTIFY: the live tail across connections.
    let other = connect(&cluster).await;
    let record = suite::record();
    let id = record.id.clone();
    store.create(record).await.expect("create");
    let lease = store
        .acquire(&id, &ReplicaId::new("writer"), Duration::from_secs(30))
        .await
        .expect("lease");
    let mut tail = other.tail(&id).await.expect("a tail on the other replica");
    let waiter = tokio::spawn(async move { tail.after(Cursor::after_seq(2)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    store
        .append(&lease, &suite::events(&id, 1, 3))
        .await
        .expect("append");
    assert!(
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the other replica's tail wakes")
            .expect("the waiter")
    );
    assert_eq!(
        other
            .read(&id, Cursor::START, 10)
            .await
            .expect("read")
            .len(),
        3
    );

    // Migrations are applied once, whoever connects: a third connection finds them done.
    drop(connect(&cluster).await);

    // The model-based property test, a few dozen sequences.
    let runtime = tokio::runtime::Handle::current();
    let result = tokio::task::spawn_blocking(move || model(&runtime, &other)).await;
    result.expect("the model test");
}

fn model(runtime: &tokio::runtime::Handle, store: &PostgresStore) {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(common::op(), 1..30), |ops| {
            runtime.block_on(common::run_model(store, &ops))
        })
        .expect("PostgresStore follows the model");
}

mod common;

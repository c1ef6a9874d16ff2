//! Real sandboxes (bubblewrap, installed by `.ci/install-bubblewrap.sh`), tried from inside by
//! a hostile shell: what it may not see, write, reach or exhaust.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness_sandbox::{Breach, Launch, Sandbox, SandboxLimits, SandboxProfile, Sandboxed};
use tokio::io::AsyncReadExt as _;

/// A directory of its own under the system's temporary directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "harness-sandbox-test-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sh(workspace: &Path, script: &str) -> Launch {
    Launch::new("/bin/sh", workspace)
        .arg("-c")
        .arg(script)
        .env("PATH", "/usr/bin:/bin")
}

/// Runs to the end; stdout and stderr, and whether it succeeded.
async fn run(sandbox: &Sandbox, launch: Launch) -> (String, String, bool) {
    let Sandboxed { mut child, guard } = sandbox.spawn(launch).await.expect("the sandbox is made");
    let mut out = String::new();
    let mut err = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (a, b, status) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err),
        child.wait()
    );
    a.unwrap();
    b.unwrap();
    drop(guard);
    (out, err, status.unwrap().success())
}

fn strict() -> Sandbox {
    Sandbox::new(SandboxProfile::default()).expect("bwrap is installed (.ci/install-bubblewrap.sh)")
}

#[tokio::test]
async fn the_host_is_out_of_sight_and_out_of_reach() {
    let workspace = Dir::new("ws");
    let other = Dir::new("other");
    std::fs::write(other.0.join("secret.txt"), "another caller's work").unwrap();
    std::fs::write(workspace.0.join("mine.txt"), "my work").unwrap();
    let server_db = Dir::new("db");
    std::fs::write(server_db.0.join("harness.db"), "the server's database").unwrap();
    let script = format!(
        "for f in /root /etc/shadow /home {other}/secret.txt {db}/harness.db; do \
            if cat $f >/dev/null 2>&1 || ls $f >/dev/null 2>&1; then echo \"read $f\"; else echo \"no $f\"; fi; \
         done; \
         for f in /usr/evil /etc/evil /evil /tmp/../usr/evil {other}/evil; do \
            if touch $f 2>/dev/null; then echo \"wrote $f\"; else echo \"no-write $f\"; fi; \
         done; \
         cat mine.txt; echo; echo new > made.txt; \
         echo \"uid $(id -u) gid $(id -g)\"; \
         echo \"procs $(ls /proc | grep -c '^[0-9]')\"; \
         for p in /proc/[0-9]*; do echo \"comm $(cat $p/comm)\"; done; \
         echo \"host $(cat /proc/sys/kernel/hostname)\"; \
         echo \"env $(env | sort | tr '\\n' ' ')\"; \
         echo \"nofile $(ulimit -n)\"; \
         if unshare -U true 2>/dev/null; then echo userns; else echo no-userns; fi",
        other = other.0.display(),
        db = server_db.0.display(),
    );
    let mut limits = SandboxLimits::default();
    limits.open_files = 333;
    let sandbox = Sandbox::new(SandboxProfile::default().limits(limits)).unwrap();
    let (out, err, ok) = run(&sandbox, sh(&workspace.0, &script)).await;
    assert!(ok, "{out}\n{err}");
    for denied in ["/root", "/etc/shadow", "/home", "secret.txt", "harness.db"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("no ") && l.contains(denied)),
            "{denied} was readable:\n{out}"
        );
    }
    assert!(
        !out.lines().any(|l| l.starts_with("wrote ")),
        "wrote outside the workspace:\n{out}"
    );
    assert!(out.contains("my work"), "{out}");
    assert_eq!(
        std::fs::read_to_string(workspace.0.join("made.txt")).unwrap(),
        "new\n"
    );
    assert!(out.contains("uid 1000 gid 1000"), "{out}");
    // The sandbox's init, the shell and its pipeline: none of the host's processes (this
    // test's own among them).
    let procs: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("procs "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(procs <= 8, "{procs} processes visible:\n{out}");
    let comms: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("comm "))
        .collect();
    assert!(
        comms.contains(&"bwrap"),
        "the sandbox's init is seen: {comms:?}"
    );
    assert!(!comms.iter().any(|c| c.starts_with("escape")), "{comms:?}");
    assert!(out.contains("host sandbox"), "{out}");
    assert!(out.contains("env PATH=/usr/bin:/bin PWD="), "{out}");
    assert!(out.contains("nofile 333"), "{out}");
    assert!(out.contains("no-userns"), "{out}");
}

/// A perl one-liner that connects to `port` on 127.0.0.1 and prints what it read, or `refused`.
fn connect(workspace: &Path, port: u16) -> Launch {
    Launch::new("/usr/bin/perl", workspace)
        .arg("-MIO::Socket::INET")
        .arg("-e")
        .arg(format!(
            "my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => {port}, Timeout => 2) \
             or do {{ print \"refused\\n\"; exit 0 }}; my $l = <$s>; print \"got $l\";"
        ))
}

fn greeter() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let thread = std::thread::spawn(move || {
        use std::io::Write as _;
        listener.set_nonblocking(false).unwrap();
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.write_all(b"hello from the host\n");
        }
    });
    (port, thread)
}

#[tokio::test]
async fn only_the_allowed_endpoint_is_reachable() {
    let workspace = Dir::new("net");
    let (allowed, _a) = greeter();
    let (other, _b) = greeter();
    let profile = SandboxProfile::default().allow(format!("127.0.0.1:{allowed}").parse().unwrap());
    let sandbox = Sandbox::new(profile).unwrap();
    let (out, err, _) = run(&sandbox, connect(&workspace.0, allowed)).await;
    assert_eq!(out, "got hello from the host\n", "{err}");
    let (out, err, _) = run(&sandbox, connect(&workspace.0, other)).await;
    assert_eq!(out, "refused\n", "{err}");
    // No network at all in the strict profile.
    let (out, err, _) = run(&strict(), connect(&workspace.0, allowed)).await;
    assert_eq!(out, "refused\n", "{err}");
}

/// A launch's own relay reaches the control plane's endpoint from that sandbox only: the
/// profile is not widened, so another launch of it does not reach it.
#[tokio::test]
async fn a_launchs_own_relay_is_reachable_from_its_sandbox_only() {
    let workspace = Dir::new("relay");
    let (port, _g) = greeter();
    let endpoint = format!("127.0.0.1:{port}").parse().unwrap();
    let sandbox = Sandbox::new(SandboxProfile::default()).unwrap();
    let (out, err, _) = run(&sandbox, connect(&workspace.0, port).relay(endpoint)).await;
    assert_eq!(out, "got hello from the host\n", "{err}");
    let (out, err, _) = run(&sandbox, connect(&workspace.0, port)).await;
    assert_eq!(out, "refused\n", "{err}");
}

/// Runs until the sandbox is torn down; the breach.
async fn breach(limits: SandboxLimits, launch: Launch, read_output: bool) -> Breach {
    let sandbox = Sandbox::new(SandboxProfile::default().limits(limits)).unwrap();
    let Sandboxed { mut child, guard } = sandbox.spawn(launch).await.unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let counter = guard.clone();
    let reader = tokio::spawn(async move {
        let mut chunk = vec![0_u8; 65536];
        while let Ok(n) = stdout.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            if read_output {
                counter.count_output(n);
            }
        }
    });
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the sandbox was torn down")
        .unwrap();
    assert!(!status.success());
    let _ = reader.await;
    guard.breach().expect("a breach was recorded")
}

fn limits() -> SandboxLimits {
    let mut limits = SandboxLimits::default();
    limits.processes = 32;
    limits.memory_bytes = 64 << 20;
    limits.output_bytes = 1 << 20;
    limits.wall_time_ms = 30_000;
    limits
}

#[tokio::test]
async fn a_fork_bomb_is_stopped() {
    let workspace = Dir::new("bomb");
    let got = breach(
        limits(),
        sh(&workspace.0, "bomb() { bomb | bomb & }; bomb; sleep 100"),
        false,
    )
    .await;
    assert_eq!(got, Breach::Processes(32));
    assert_eq!(got.error().code().as_str(), "SANDBOX_LIMIT");
}

#[tokio::test]
async fn a_memory_hog_is_stopped() {
    let workspace = Dir::new("hog");
    let hog = Launch::new("/usr/bin/perl", &workspace.0)
        .arg("-e")
        .arg("my @a; push @a, 'x' x (1 << 20) for 1 .. 4096; sleep 100");
    let got = breach(limits(), hog, false).await;
    assert_eq!(got, Breach::Memory(64 << 20));
}

#[tokio::test]
async fn a_program_that_never_exits_is_stopped_at_the_wall_time() {
    let workspace = Dir::new("forever");
    let mut limits = limits();
    limits.wall_time_ms = 300;
    let got = breach(
        limits,
        sh(&workspace.0, "trap '' TERM; while :; do sleep 1; done"),
        false,
    )
    .await;
    assert_eq!(got, Breach::WallTime(300));
    assert_eq!(got.error().code().as_str(), "SANDBOX_WALL_TIME");
}

#[tokio::test]
async fn a_flood_of_output_is_stopped() {
    let workspace = Dir::new("flood");
    let got = breach(limits(), sh(&workspace.0, "yes flood"), true).await;
    assert_eq!(got, Breach::Output(1 << 20));
}

/// The processes whose command line carries `tag`.
fn tagged(tag: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut cmdline = Vec::new();
        if std::fs::File::open(entry.path().join("cmdline"))
            .and_then(|mut f| f.read_to_end(&mut cmdline))
            .is_ok()
            && String::from_utf8_lossy(&cmdline).contains(tag)
        {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn dropping_the_sandbox_leaves_no_process_behind() {
    let workspace = Dir::new("orphans");
    let tag = format!("orphan-tag-{}", std::process::id());
    // Children that leave the shell's group and ignore SIGTERM.
    let script = format!(
        "trap '' TERM; (setsid sh -c 'sleep 300; : {tag}' &); (sh -c 'sleep 300; : {tag}' &); \
         echo started; sleep 300"
    );
    let sandbox = strict();
    let Sandboxed { mut child, guard } = sandbox.spawn(sh(&workspace.0, &script)).await.unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut line = [0_u8; 8];
    stdout.read_exact(&mut line).await.unwrap();
    assert_eq!(&line, b"started\n");
    assert!(tagged(&tag).len() >= 2, "the children run");
    drop(guard);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !tagged(&tag).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(tagged(&tag).is_empty(), "left behind: {:?}", tagged(&tag));
}

#[tokio::test]
async fn a_launch_the_profile_does_not_allow_is_refused_before_anything_runs() {
    let workspace = Dir::new("refused");
    let err = strict()
        .spawn(sh(&workspace.0, "true").env("AWS_SECRET_ACCESS_KEY", "x"))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("AWS_SECRET_ACCESS_KEY"),
        "{}",
        err.message()
    );
    let err = Sandbox::new(SandboxProfile::default().read_only("/root"))
        .unwrap()
        .spawn(sh(&workspace.0, "true"))
        .await
        .unwrap_err();
    assert!(err.message().contains("/root"), "{}", err.message());
    let parent = workspace.0.parent().unwrap().to_owned();
    let err = Sandbox::new(SandboxProfile::default().read_only(parent))
        .unwrap()
        .spawn(sh(&workspace.0, "true"))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("holds the workspace"),
        "{}",
        err.message()
    );
}

/// An HTTP server on the host's loopback that answers every request `200 hello <path>`.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{BufRead as _, Write as _};
        for stream in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(stream);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split(' ').nth(1).unwrap_or("?").to_owned();
            loop {
                let mut field = String::new();
                if reader.read_line(&mut field).unwrap_or(0) <= 2 {
                    break;
                }
            }
            let body = format!("hello {path}");
            let _ = write!(
                reader.get_mut(),
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[tokio::test]
async fn the_proxy_lets_through_exactly_its_targets() {
    let workspace = Dir::new("proxy");
    let allowed = http_server();
    let other = http_server();
    let profile = SandboxProfile::default().proxy(format!("localhost:{allowed}").parse().unwrap());
    let sandbox = Sandbox::new(profile).unwrap();
    // curl (installed by .ci/install-curl.sh) through the proxy the sandbox names in
    // HTTP_PROXY: plain HTTP in absolute form, then a CONNECT tunnel (-p); then a target the
    // profile does not list, both ways; then straight to the host's port, without the proxy.
    let script = format!(
        "curl -sS --noproxy '' -x \"$HTTP_PROXY\" http://localhost:{allowed}/plain; echo; \
         curl -sS -p --noproxy '' -x \"$HTTP_PROXY\" http://LOCALHOST:{allowed}/tunnel; echo; \
         echo \"refused $(curl -s -o /dev/null -w '%{{http_code}}' --noproxy '' -x \"$HTTP_PROXY\" http://localhost:{other}/)\"; \
         echo \"tunnel-refused $(curl -s -p -o /dev/null -w '%{{http_connect}}' --noproxy '' -x \"$HTTP_PROXY\" http://localhost:{other}/)\"; \
         echo \"direct $(curl -s -o /dev/null -w '%{{http_code}}' --noproxy '*' --max-time 3 http://127.0.0.1:{allowed}/)\"; \
         echo \"env $HTTPS_PROXY $NO_PROXY\""
    );
    let (out, err, _) = run(&sandbox, sh(&workspace.0, &script)).await;
    assert!(out.contains("hello /plain\n"), "{out}\n{err}");
    assert!(out.contains("hello /tunnel\n"), "{out}\n{err}");
    assert!(out.contains("refused 403"), "{out}\n{err}");
    assert!(out.contains("tunnel-refused 403"), "{out}\n{err}");
    assert!(
        out.contains("direct 000"),
        "no route to the host's port: {out}\n{err}"
    );
    assert!(
        out.contains("env http://127.0.0.1:3128 localhost,127.0.0.1,::1"),
        "{out}"
    );
    // A profile without proxy targets has no proxy.
    let (out, _, _) = run(
        &strict(),
        sh(&workspace.0, "echo \"proxy=${HTTP_PROXY:-none}\"; curl -s -o /dev/null -w '%{http_code}' -x http://127.0.0.1:3128 http://localhost/"),
    )
    .await;
    assert_eq!(out, "proxy=none\n000", "{out}");
}

/// The seccomp filter, tried with perl's `syscall`: each call fails `EPERM` (1) before the
/// kernel looks at its arguments, an x32 call too; `getpid` still works.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn the_kernels_machinery_is_out_of_reach() {
    let workspace = Dir::new("seccomp");
    // x86_64 numbers: ptrace 101, keyctl 250, add_key 248, bpf 321, perf_event_open 298,
    // unshare 272, setns 308, mount 165, io_uring_setup 425, userfaultfd 323,
    // open_by_handle_at 304; getpid 39, and getpid's x32 number (bit 30 set).
    let calls = [
        ("ptrace", 101),
        ("keyctl", 250),
        ("add_key", 248),
        ("bpf", 321),
        ("perf_event_open", 298),
        ("unshare", 272),
        ("setns", 308),
        ("mount", 165),
        ("io_uring_setup", 425),
        ("userfaultfd", 323),
        ("open_by_handle_at", 304),
        ("x32_getpid", 0x4000_0000 + 39),
        ("getpid", 39),
    ];
    let numbers: Vec<String> = calls.iter().map(|(_, n)| n.to_string()).collect();
    let probe = Launch::new("/usr/bin/perl", &workspace.0).arg("-e").arg(
        "for my $n (@ARGV) { $! = 0; my $r = syscall($n, 0, 0, 0, 0, 0); \
             print $r == -1 ? 'errno ' . ($! + 0) : 'ok', \"\\n\" }",
    );
    let probe = numbers.iter().fold(probe, |launch, n| launch.arg(n));
    let (out, err, ok) = run(&strict(), probe).await;
    assert!(ok, "{out}\n{err}");
    let results: Vec<&str> = out.lines().collect();
    assert_eq!(results.len(), calls.len(), "{out}\n{err}");
    for ((name, _), result) in calls.iter().zip(&results) {
        if *name == "getpid" {
            assert_eq!(*result, "ok", "{name}");
        } else {
            assert_eq!(*result, "errno 1", "{name} was not denied");
        }
    }
}

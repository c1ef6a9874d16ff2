//! The real harnesses and the mock model server they talk to, shared by
//! `tests/real_harnesses.rs` and `tests/conformance_real.rs`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness_acp::AcpAgent;
use harness_sandbox::{Sandbox, SandboxProfile};
use serde_json::{Value, json};

/// The environment variable every agent process (and each child it spawns) inherits: how
/// the tests find the whole tree in `/proc`, whatever the harness's argv looks like.
pub const MARK_VAR: &str = "HARNESS_ACP_TEST_MARK";

pub const HELLO: &str = "Hello from the mock model.";
pub const GOODBYE: &str = "Goodbye from the mock model.";
pub const DONE: &str = "The file is there now.";

pub fn harness_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/harnesses")
}

pub fn modules() -> PathBuf {
    let dir = harness_dir().join("node_modules");
    assert!(
        dir.join("@copilotkit/aimock/package.json").exists(),
        "the real harnesses are not installed: run .ci/install-harnesses.sh (it runs `npm ci` in {})",
        harness_dir().display()
    );
    dir
}

/// The mock model server, on a free loopback port, killed on drop.
pub struct Mock {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    fixtures: std::sync::Mutex<Value>,
}

impl Mock {
    pub fn start(fixtures: &Value, dir: &Path) -> Self {
        let file = dir.join("fixtures.json");
        std::fs::write(&file, serde_json::to_vec_pretty(fixtures).unwrap()).unwrap();
        let mut child = Command::new("node")
            .arg(modules().join("@copilotkit/aimock/dist/cli.js"))
            .args(["-p", "0", "-h", "127.0.0.1", "-f"])
            // `turnIndex` rejects a fixture at another position (it is a preference only
            // without it): how a fixture asks for a conversation's history.
            .env("AIMOCK_STRICT_TURN_INDEX", "1")
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs aimock");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Keeps draining its output so that the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on ") {
                    let _ = tx.send(line[at + "listening on ".len()..].trim().to_owned());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("aimock says where it listens");
        Self {
            child,
            url,
            fixtures: std::sync::Mutex::new(fixtures.clone()),
        }
    }
}

impl Mock {
    /// Puts `fixture` first (first match wins) in the running server's fixtures, through
    /// aimock's control API (`DELETE`, then `POST /__aimock/fixtures`).
    pub fn prepend(&self, fixture: Value) {
        let mut all = self.fixtures.lock().unwrap();
        all["fixtures"].as_array_mut().unwrap().insert(0, fixture);
        let (status, body) = http(&self.url, "DELETE", "/__aimock/fixtures", "");
        assert_eq!(status, 200, "{body}");
        let (status, body) = http(&self.url, "POST", "/__aimock/fixtures", &all.to_string());
        assert_eq!(status, 200, "{body}");
    }
}

impl Mock {
    /// The requests the server received and what answered them (aimock's journal), for a
    /// failing test's message.
    pub fn journal(&self) -> String {
        http(&self.url, "GET", "/__aimock/journal", "").1
    }
}

/// One HTTP/1.1 request to `url` (`http://host:port`), answered with its status and body.
fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).expect("aimock accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harness {
    /// `@google/gemini-cli` 0.61.0, `gemini --acp`.
    Gemini,
    /// `@agentclientprotocol/claude-agent-acp` 0.101.0.
    ClaudeAcp,
    /// `@zed-industries/claude-agent-acp` 0.23.1.
    ClaudeZed,
    /// `@agentclientprotocol/codex-acp` 2.6.0.
    CodexAcp,
    /// `@zed-industries/codex-acp` 0.16.0 (its native binary: the npm launcher orphans it on
    /// SIGTERM).
    CodexZed,
}

impl Harness {
    pub fn name(self) -> &'static str {
        match self {
            Self::Gemini => "gemini-cli 0.61.0",
            Self::ClaudeAcp => "@agentclientprotocol/claude-agent-acp 0.101.0",
            Self::ClaudeZed => "@zed-industries/claude-agent-acp 0.23.1",
            Self::CodexAcp => "@agentclientprotocol/codex-acp 2.6.0",
            Self::CodexZed => "@zed-industries/codex-acp 0.16.0",
        }
    }

    /// The harness's own shell tool, running `touch <file>` in its working directory.
    pub fn touch(self, file: &str) -> Value {
        let command = format!("touch {file}");
        match self {
            Self::Gemini => json!({
                "name": "run_shell_command",
                "arguments": json!({"command": command, "description": "create the file"}).to_string(),
            }),
            Self::ClaudeAcp | Self::ClaudeZed => json!({
                "name": "Bash",
                "arguments": json!({"command": command, "description": "create the file"}).to_string(),
            }),
            // No sandbox on these machines: the escalated form is the one that runs, and the
            // one that asks in a mode that asks.
            Self::CodexAcp | Self::CodexZed => json!({
                "name": "exec_command",
                "arguments": json!({
                    "cmd": command,
                    "sandbox_permissions": "require_escalated",
                    "justification": "create the file the user asked for",
                })
                .to_string(),
            }),
        }
    }

    /// The operator's configuration of this harness: its program, an isolated HOME with the
    /// settings that make it ask before running tools and never retry, and the mock model.
    pub fn agent(self, mark: &str, mock: &Mock, home: &Path, workspace: PathBuf) -> AcpAgent {
        let node_modules = modules();
        let node = |script: &str| {
            vec![
                "node".to_owned(),
                node_modules.join(script).display().to_string(),
            ]
        };
        let write = |path: &str, contents: &str| {
            let path = home.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        };
        let command = match self {
            Self::Gemini => {
                write(
                    ".gemini/settings.json",
                    &json!({
                        "general": {"maxAttempts": 1, "disableAutoUpdate": true},
                        "security": {"auth": {"selectedType": "gemini-api-key"}},
                        "privacy": {"usageStatisticsEnabled": false},
                    })
                    .to_string(),
                );
                let mut argv = node("@google/gemini-cli/bundle/gemini.js");
                argv.extend(["--acp", "-m", "gemini-2.5-flash"].map(String::from));
                argv
            }
            Self::ClaudeAcp | Self::ClaudeZed => {
                write(
                    ".claude/settings.json",
                    &json!({"permissions": {"defaultMode": "default"}}).to_string(),
                );
                node(if self == Self::ClaudeAcp {
                    "@agentclientprotocol/claude-agent-acp/dist/index.js"
                } else {
                    "@zed-industries/claude-agent-acp/dist/index.js"
                })
            }
            Self::CodexAcp | Self::CodexZed => {
                write(
                    ".codex/config.toml",
                    &format!(
                        r#"model = "gpt-5.5"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"#,
                        url = mock.url
                    ),
                );
                if self == Self::CodexAcp {
                    node("@agentclientprotocol/codex-acp/dist/index.js")
                } else {
                    vec![
                        node_modules
                            .join("@zed-industries/codex-acp-linux-x64/bin/codex-acp")
                            .display()
                            .to_string(),
                    ]
                }
            }
        };
        let url = mock.url.as_str();
        let home_dir = home.display().to_string();
        let env: Vec<(&str, String)> = match self {
            Self::Gemini => vec![
                ("GEMINI_API_KEY", "mock-key".into()),
                ("GOOGLE_GEMINI_BASE_URL", url.into()),
                ("GEMINI_CLI_TRUST_WORKSPACE", "true".into()),
            ],
            Self::ClaudeAcp | Self::ClaudeZed => vec![
                ("ANTHROPIC_BASE_URL", url.into()),
                ("ANTHROPIC_API_KEY", "mock-key".into()),
                // Claude Code refuses to run as root (CI) unless told it is sandboxed.
                ("IS_SANDBOX", "1".into()),
                ("CLAUDE_CODE_MAX_RETRIES", "0".into()),
                ("CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION", "false".into()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                ("DISABLE_AUTOUPDATER", "1".into()),
            ],
            Self::CodexAcp | Self::CodexZed => vec![
                ("OPENAI_API_KEY", "mock-key".into()),
                ("CODEX_HOME", format!("{home_dir}/.codex")),
            ],
        };
        let mut agent = AcpAgent::new(command, workspace)
            .allow_env("PATH")
            .set_env("HOME", home_dir)
            .set_env(MARK_VAR, mark)
            .with_cancel_grace(Duration::from_secs(3));
        for (name, value) in env {
            agent = agent.set_env(name, value);
        }
        agent
    }
}

impl Harness {
    /// [`agent`](Self::agent) in a bubblewrap sandbox, as an operator would run it for
    /// callers: its HOME inside the workspace (the only place it may write), the installed
    /// harnesses read-only, the mock model its only endpoint, and exactly the variables its
    /// configuration sets.
    pub fn sandboxed_agent(self, mark: &str, mock: &Mock, workspace: PathBuf) -> AcpAgent {
        let home = workspace.join(".home");
        std::fs::create_dir_all(&home).unwrap();
        let agent = self.agent(mark, mock, &home, workspace);
        let mut profile = SandboxProfile::default().read_only(modules()).allow(
            mock.url
                .trim_start_matches("http://")
                .parse()
                .expect("a loopback mock"),
        );
        for name in agent.env.iter().chain(agent.set_env.keys()) {
            profile = profile.allow_env(name.clone());
        }
        agent.in_sandbox(Sandbox::new(profile).expect("bwrap is installed"))
    }
}

/// The fixtures of one harness: first match wins, the catch-all last.
pub fn fixtures(harness: Harness) -> Value {
    let story = "Once upon a time, a mock model told a very long story. ".repeat(40);
    json!({"fixtures": [
        {"match": {"userMessage": "create the file", "hasToolResult": true},
         "response": {"content": DONE}},
        {"match": {"userMessage": "create the file"},
         "response": {"toolCalls": [harness.touch("approved.txt")]}},
        {"match": {"userMessage": "tell a long story"},
         "response": {"content": story}, "latency": 150, "chunkSize": 8},
        {"match": {"userMessage": "say goodbye"}, "response": {"content": GOODBYE}},
        {"match": {"userMessage": "say hello"}, "response": {"content": HELLO}},
        {"match": {}, "response": {"content": "ok"}},
    ]})
}

/// Live (non-zombie) processes whose environment carries `mark`.
pub fn processes_marked(mark: &str) -> Vec<u32> {
    let needle = format!("{MARK_VAR}={mark}");
    super::processes(|dir| {
        std::fs::read(dir.join("environ"))
            .is_ok_and(|environ| environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
    })
}

pub async fn assert_tree_gone(mark: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_marked(mark).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        processes_marked(mark),
        Vec::<u32>::new(),
        "processes left behind"
    );
}

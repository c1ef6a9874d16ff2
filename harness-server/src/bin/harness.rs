//! The `harness` command: serves the Runtime API, and is its client.
//!
//! ```text
//! harness serve [--config harness.toml] [--listen 127.0.0.1:8700]
//! harness token [principal]
//! harness run <adapter> "<message>" [--options JSON] [--idempotency-key KEY] [--yes]
//! harness events <id> [--follow] [--after N]
//! harness list [--limit N]
//! harness show <id>
//! harness answer <id> <action-id> approve|reject|dismiss|<answer JSON>
//! harness cancel <id> [--reason TEXT]
//! ```
//!
//! Client verbs reach the server at `--server` (else `HARNESS_URL`, else
//! `http://127.0.0.1:8700`) with the token `--token` (else `HARNESS_TOKEN`).

use std::io::Write;
use std::process::ExitCode;

use futures_util::StreamExt;
use harness_core::action::{ActionKind, ActionRequest, ActionResponse, FormValues};
use harness_core::event::{Event, EventPayload};
use harness_server::client::Client;
use harness_server::config::Config;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

const USAGE: &str = "\
usage:
  harness serve [--config harness.toml] [--listen ADDR]
  harness token [PRINCIPAL]
  harness run ADAPTER MESSAGE [--options JSON] [--idempotency-key KEY] [--yes]
  harness events ID [--follow] [--after N]
  harness list [--limit N]
  harness show ID
  harness answer ID ACTION_ID approve|reject|dismiss|ANSWER_JSON
  harness cancel ID [--reason TEXT]
client options: --server URL (HARNESS_URL), --token TOKEN (HARNESS_TOKEN)";

/// The arguments after the verb: positionals and `--flag [value]` pairs.
struct Args {
    positional: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

/// Flags that take no value.
const SWITCHES: &[&str] = &["--follow", "--yes"];

impl Args {
    fn parse(args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut positional = Vec::new();
        let mut flags = Vec::new();
        let mut args = args.peekable();
        while let Some(arg) = args.next() {
            if let Some(flag) = arg.strip_prefix("--") {
                if let Some((name, value)) = flag.split_once('=') {
                    flags.push((format!("--{name}"), Some(value.to_owned())));
                } else if SWITCHES.contains(&arg.as_str()) {
                    flags.push((arg, None));
                } else {
                    let value = args
                        .next()
                        .ok_or_else(|| format!("`{arg}` needs a value"))?;
                    flags.push((arg, Some(value)));
                }
            } else {
                positional.push(arg);
            }
        }
        Ok(Self { positional, flags })
    }

    fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn switch(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| n == name)
    }

    /// Refuses flags other than `allowed` (and the client's).
    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        for (name, _) in &self.flags {
            if !allowed.contains(&name.as_str()) && name != "--server" && name != "--token" {
                return Err(format!("unknown option `{name}`"));
            }
        }
        Ok(())
    }

    fn client(&self) -> Result<Client, String> {
        let base = self
            .value("--server")
            .map(str::to_owned)
            .or_else(|| std::env::var("HARNESS_URL").ok())
            .unwrap_or_else(|| format!("http://{}", harness_server::config::DEFAULT_LISTEN));
        let token = self
            .value("--token")
            .map(str::to_owned)
            .or_else(|| std::env::var("HARNESS_TOKEN").ok())
            .ok_or("no token: pass --token or set HARNESS_TOKEN (`harness serve` prints one)")?;
        Ok(Client::new(base, token))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    let Some(verb) = argv.next() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let args = match Args::parse(argv) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("harness {verb}: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match verb.as_str() {
        "serve" => serve(&args).await,
        "token" => token(&args),
        "run" => run(&args).await,
        "events" => events(&args).await,
        "list" => list(&args).await,
        "show" => show(&args).await,
        "answer" => answer(&args).await,
        "cancel" => cancel(&args).await,
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness {verb}: {e}");
            ExitCode::from(2)
        }
    }
}

/// A fresh random token: 32 bytes as hex.
fn fresh_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn token(args: &Args) -> Result<ExitCode, String> {
    args.only(&[])?;
    let principal = args.positional.first().map_or("dev", String::as_str);
    let token = fresh_token()?;
    println!("token: {token}");
    println!("# for harness.toml:");
    println!(
        "[[tokens]]\nprincipal = \"{principal}\"\nsha256 = \"{}\"",
        harness_server::auth::digest(&token)
    );
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: &Args) -> Result<ExitCode, String> {
    args.only(&["--config", "--listen"])?;
    let config = match args.value("--config") {
        Some(path) => Config::from_path(std::path::Path::new(path)).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    let listen = match args.value("--listen") {
        Some(addr) => addr
            .parse()
            .map_err(|e| format!("`--listen {addr}` is not an address (127.0.0.1:8700): {e}"))?,
        None => config.listen(),
    };
    let limits = config.connection_limits().map_err(|e| e.to_string())?;
    let mut tokens = config.tokens().map_err(|e| e.to_string())?;
    let mut dev_token = None;
    if tokens.is_empty() {
        let token = fresh_token()?;
        tokens = tokens
            .with_token("dev", &token)
            .map_err(|e| e.to_string())?;
        dev_token = Some(token);
    }
    let (server, store) = config.server(tokens).await.map_err(|e| e.to_string())?;
    for instance in server.instances() {
        match instance.recover().await {
            Ok(recovered) if !recovered.is_empty() => {
                eprintln!(
                    "{}: recovered {} executions",
                    instance.id(),
                    recovered.len()
                );
            }
            Ok(_) => {}
            Err(e) => return Err(format!("recovery of {} failed: {e}", instance.id())),
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let adapters: Vec<String> = server.instances().map(|i| i.id().to_string()).collect();
    // The address last: a script waiting for it has read everything else by then.
    println!("adapters: {}", adapters.join(", "));
    println!("store: {store}");
    if let Some(token) = &dev_token {
        println!("development token (principal `dev`): {token}");
        println!("  export HARNESS_URL=http://{address} HARNESS_TOKEN={token}");
        // The fragment signs the page in and never reaches the server.
        println!("console: http://{address}/console#token={token}");
    } else {
        println!("console: http://{address}/console");
    }
    println!("harness serving on http://{address}");
    let _ = std::io::stdout().flush();
    harness_server::serve(listener, server.router(), limits)
        .with_graceful_shutdown(shutdown())
        .await;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

async fn run(args: &Args) -> Result<ExitCode, String> {
    args.only(&["--options", "--idempotency-key", "--yes"])?;
    let [adapter, message] = args.positional.as_slice() else {
        return Err("run needs an adapter and a message: harness run scripted \"hello\"".into());
    };
    let client = args.client()?;
    let mut request = json!({ "message": message });
    if let Some(options) = args.value("--options") {
        request["options"] =
            serde_json::from_str(options).map_err(|e| format!("`--options` is not JSON: {e}"))?;
    }
    let execution = client
        .start(adapter, request, args.value("--idempotency-key"))
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("execution {}", execution.id);
    let id = execution.id.to_string();
    let mut stream = Box::pin(client.events(&id, 0));
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut cancelled = false;
    let mut mid_line = false;
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                eprintln!("\ncancelling ...");
                client.cancel(&id, Some("interrupted from the terminal")).await.map_err(|e| e.to_string())?;
                continue;
            }
        };
        let Some(event) = event else { break };
        let event = event.map_err(|e| e.to_string())?;
        render(&event, &mut mid_line);
        if let EventPayload::ActionRequested(request) = event.payload() {
            let response = if args.switch("--yes") {
                auto_answer(request)
            } else {
                prompt(request, &mut stdin).await?
            };
            if let Err(e) = client.answer(&id, &response).await {
                eprintln!("answer refused: {e}");
            }
        }
        if event.payload().is_terminal() {
            return Ok(match event.payload() {
                EventPayload::RunSucceeded(_) => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            });
        }
    }
    Err("the event stream ended before the execution did".into())
}

/// What `--yes` answers: approve every call; dismiss a form, else submit it empty.
fn auto_answer(request: &ActionRequest) -> ActionResponse {
    match &request.kind {
        ActionKind::ToolApproval(_) => request.approve_all(),
        ActionKind::FormInput(_) if request.dismissible => request.dismiss(),
        ActionKind::FormInput(_) => request.submit(FormValues::new()),
    }
}

/// Asks on the terminal (or reads piped lines): `y` approves, `n` rejects, `e` edits the
/// arguments (a JSON line follows), `d` dismisses; a form takes a JSON object of values.
async fn prompt(
    request: &ActionRequest,
    stdin: &mut tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>,
) -> Result<ActionResponse, String> {
    let mut line = async |question: &str| -> Result<String, String> {
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        stdin
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .map(|l| l.trim().to_owned())
            .ok_or_else(|| "stdin closed while an answer was awaited".to_owned())
    };
    match &request.kind {
        ActionKind::ToolApproval(approval) => loop {
            let choice = line("approve? [y]es / [n]o / [e]dit / [d]ismiss: ").await?;
            match choice.as_str() {
                "y" | "yes" | "" => return Ok(request.approve_all()),
                "n" | "no" => return Ok(request.reject_all("rejected from the terminal")),
                "d" | "dismiss" => return Ok(request.dismiss()),
                "e" | "edit" => {
                    let Some(call) = approval.calls().first() else {
                        continue;
                    };
                    let text = line(&format!("new arguments for {} (JSON): ", call.tool())).await?;
                    match serde_json::from_str::<Value>(&text) {
                        Ok(arguments) => return Ok(request.edit(call.call_id(), arguments)),
                        Err(e) => eprintln!("not JSON: {e}"),
                    }
                }
                _ => eprintln!("answer y, n, e or d"),
            }
        },
        ActionKind::FormInput(_) => loop {
            let text = line("values (a JSON object), or d to dismiss: ").await?;
            if text == "d" && request.dismissible {
                return Ok(request.dismiss());
            }
            match serde_json::from_str::<FormValues>(&text) {
                Ok(values) => return Ok(request.submit(values)),
                Err(e) => eprintln!("not a JSON object of values: {e}"),
            }
        },
    }
}

/// Prints `event` readably: text as it streams, the rest one line each on stderr.
fn render(event: &Event, mid_line: &mut bool) {
    let mut out = std::io::stdout();
    let mut line = |text: String| {
        if *mid_line {
            println!();
            *mid_line = false;
        }
        eprintln!("{text}");
    };
    match event.payload() {
        EventPayload::MessageDelta(delta) => {
            print!("{}", delta.text);
            let _ = out.flush();
            *mid_line = !delta.text.ends_with('\n');
        }
        EventPayload::ReasoningDelta(delta) => line(format!("(thinking) {}", delta.text)),
        EventPayload::ToolCallStarted(call) => {
            line(format!("-> tool {} {}", call.tool, call.arguments));
        }
        EventPayload::ToolCallCompleted(done) => line(format!("<- tool {}", done.call_id)),
        EventPayload::ActionRequested(request) => match &request.kind {
            ActionKind::ToolApproval(approval) => {
                for call in approval.calls() {
                    line(format!("? approve {} {}", call.tool(), call.arguments()));
                }
            }
            ActionKind::FormInput(form) => {
                line(format!("? form {}", form.title().unwrap_or("(untitled)")));
            }
        },
        EventPayload::ArtifactCreated(artifact) => line(format!("+ artifact {}", artifact.id())),
        EventPayload::RunSucceeded(done) => line(format!(
            "succeeded{}",
            done.summary
                .as_deref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default()
        )),
        EventPayload::RunFailed(failed) => line(format!("failed: {}", failed.error)),
        EventPayload::RunCancelled(reason) => line(format!(
            "cancelled{}",
            reason
                .reason
                .as_deref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default()
        )),
        _ => {}
    }
}

async fn events(args: &Args) -> Result<ExitCode, String> {
    args.only(&["--follow", "--after"])?;
    let [id] = args.positional.as_slice() else {
        return Err("events needs an execution id".into());
    };
    let after = args
        .value("--after")
        .map(|a| {
            a.parse::<u64>()
                .map_err(|_| format!("`--after {a}` is not a number"))
        })
        .transpose()?
        .unwrap_or(0);
    let client = args.client()?;
    if args.switch("--follow") {
        let mut stream = Box::pin(client.events(id, after));
        while let Some(event) = stream.next().await {
            let event = event.map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        }
        return Ok(ExitCode::SUCCESS);
    }
    // What is there now, one JSON line per event, page by page.
    let mut after = after;
    loop {
        let page = client
            .events_page(id, after, 1000)
            .await
            .map_err(|e| e.to_string())?;
        for event in &page.events {
            println!("{}", serde_json::to_string(event).unwrap_or_default());
        }
        if page.events.is_empty() || page.ended {
            return Ok(ExitCode::SUCCESS);
        }
        after = page.next;
    }
}

async fn list(args: &Args) -> Result<ExitCode, String> {
    args.only(&["--limit"])?;
    let limit = args
        .value("--limit")
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| format!("`--limit {l}` is not a number"))
        })
        .transpose()?
        .unwrap_or(20);
    let page = args
        .client()?
        .list(None, limit)
        .await
        .map_err(|e| e.to_string())?;
    for execution in &page.executions {
        println!(
            "{}  {:<18} {:<10} {}",
            execution.id,
            execution.state.as_str(),
            execution.adapter,
            execution.created_at,
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(args: &Args) -> Result<ExitCode, String> {
    args.only(&[])?;
    let [id] = args.positional.as_slice() else {
        return Err("show needs an execution id".into());
    };
    let view = args
        .client()?
        .execution(id)
        .await
        .map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(&view).unwrap_or_default();
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

async fn answer(args: &Args) -> Result<ExitCode, String> {
    args.only(&[])?;
    let [id, action, answer] = args.positional.as_slice() else {
        return Err("answer needs an execution id, an action id and an answer".into());
    };
    let client = args.client()?;
    let view = client.execution(id).await.map_err(|e| e.to_string())?;
    let request = view
        .pending_actions
        .iter()
        .find(|r| r.id.as_str() == action)
        .ok_or_else(|| format!("{id} has no pending action {action}"))?;
    let response = match answer.as_str() {
        "approve" if request.as_approval().is_some() => request.approve_all(),
        "reject" if request.as_approval().is_some() => request.reject_all("rejected"),
        "dismiss" => request.dismiss(),
        json => {
            let value: Value = serde_json::from_str(json)
                .map_err(|e| format!("the answer is not approve, reject, dismiss or JSON: {e}"))?;
            match &request.kind {
                ActionKind::FormInput(_) => request.submit(
                    serde_json::from_value(value)
                        .map_err(|e| format!("form values must be a JSON object: {e}"))?,
                ),
                ActionKind::ToolApproval(_) => serde_json::from_value(value)
                    .map_err(|e| format!("not an action response: {e}"))?,
            }
        }
    };
    client
        .answer(id, &response)
        .await
        .map_err(|e| e.to_string())?;
    println!("answered {action}");
    Ok(ExitCode::SUCCESS)
}

async fn cancel(args: &Args) -> Result<ExitCode, String> {
    args.only(&["--reason"])?;
    let [id] = args.positional.as_slice() else {
        return Err("cancel needs an execution id".into());
    };
    let status = args
        .client()?
        .cancel(id, args.value("--reason"))
        .await
        .map_err(|e| e.to_string())?;
    let status = serde_json::to_value(status).unwrap_or_default();
    println!("{}", status.as_str().unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

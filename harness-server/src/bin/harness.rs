//! The `harness` command: serves the Runtime API, and is its client. `harness --help` and
//! `harness <verb> --help` describe every verb, flag and default.
//!
//! Exit codes: 0 done; 1 the execution failed or was cancelled, or the server refused or
//! could not be reached; 2 usage or configuration.

use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use futures_util::StreamExt;
use harness_core::action::{ActionKind, ActionRequest, ActionResponse, FormValues};
use harness_core::event::{Event, EventPayload, ToolCallOutcome};
use harness_server::client::{Client, ClientError};
use harness_server::config::{self, Config};
use harness_server::visible::{NOTE, escape};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

/// Serves the harness Runtime API, and is its client.
#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    after_help = ROOT_HELP,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

const ROOT_HELP: &str = "\
Examples:
  harness init                                   # writes a commented ./harness.toml
  harness serve                                  # reads ./harness.toml if there is one
  harness run scripted \"Summarize my notes\"      # streams it, asks before tool calls

Client verbs reach the server at --server (else $HARNESS_URL, else http://127.0.0.1:8700)
with the token --token (else $HARNESS_TOKEN; `harness serve` prints a development token).

Exit codes:
  0  done
  1  the execution failed or was cancelled, or the server refused or could not be reached
  2  usage or configuration";

#[derive(Debug, Subcommand)]
enum Verb {
    /// Serve the Runtime API (and the console) from a configuration.
    #[command(after_help = "\
Without --config: ./harness.toml when there is one, else the file $HARNESS_CONFIG names,
else the defaults (the scripted adapter, executions in ./harness.db). Without [[tokens]], a
development token (principal `dev`) is kept in harness.token beside the database (mode 0600)
and reused across restarts; `harness token --rotate` makes a new one.

Example:
  harness serve --config harness.toml --listen 127.0.0.1:8700

The log (warnings and above, a failed execution's diagnostic among them) goes to stderr;
$HARNESS_LOG chooses more or less, as `info` or `warn,harness_acp=debug`.

Exit codes: 0 stopped by Ctrl-C or SIGTERM; 2 the configuration (or $HARNESS_LOG) is refused.")]
    Serve {
        /// The configuration file [default: ./harness.toml, else $HARNESS_CONFIG].
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// The address to listen on [default: the configuration's `listen`, else 127.0.0.1:8700].
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// Write a commented sample configuration that `harness serve` accepts as written.
    #[command(after_help = "Example:\n  harness init && harness serve\n\n\
Exit codes: 0 written; 2 the file exists (pass --force) or cannot be written.")]
    Init {
        /// Where to write it.
        #[arg(default_value = "harness.toml")]
        path: PathBuf,
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Print a new token and its [[tokens]] table, or make a new development token.
    #[command(
        after_help = "Examples:\n  harness token alice          # a token for harness.toml\n  \
harness token --rotate       # a new development token (restart `harness serve` to use it)\n\n\
Exit codes: 0 done; 2 the configuration or token file cannot be used."
    )]
    Token {
        /// Whose token it is.
        #[arg(default_value = "dev")]
        principal: String,
        /// Replace the development token kept beside the database with a new one.
        #[arg(long)]
        rotate: bool,
        /// With --rotate: the configuration naming the database [default: as `serve`].
        #[arg(long, value_name = "PATH", requires = "rotate")]
        config: Option<PathBuf>,
    },
    /// Start an execution, stream it, and answer its questions on the terminal.
    #[command(after_help = "\
At an approval: y approves; n [REASON] rejects; e edits the arguments (a JSON line follows);
d dismisses. Invisible and direction-changing characters in tool names and arguments are shown
escaped, as [\\u{202e}]. Ctrl-C cancels the execution at any point.

Example:
  harness run scripted \"Summarize my notes\" --options '{\"script\": {...}}'

Exit codes: 0 succeeded; 1 failed or cancelled; 2 usage.")]
    Run {
        /// The adapter instance (`scripted`, `acp`, `openai`, as served).
        adapter: String,
        /// The message.
        message: String,
        /// The adapter's options, as JSON.
        #[arg(long, value_name = "JSON")]
        options: Option<String>,
        /// Makes a retried start recognizable.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Approve every tool call and dismiss every form without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print an execution's events, one JSON line each.
    #[command(after_help = "Example:\n  harness events exe_123 --follow --after 3")]
    Events {
        /// The execution.
        id: String,
        /// Keep following until the execution ends.
        #[arg(long)]
        follow: bool,
        /// Only the events after this sequence number.
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        after: u64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the caller's executions, newest first.
    #[command(after_help = "Example:\n  harness list --limit 5")]
    List {
        /// How many.
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print an execution as JSON.
    #[command(after_help = "Example:\n  harness show exe_123")]
    Show {
        /// The execution.
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Answer an execution's pending action (a tool approval or a form).
    #[command(after_help = "\
Examples:
  harness answer exe_123 approve
  harness answer exe_123 reject --reason 'not that file'
  harness answer exe_123 edit --args '{\"path\": \"b.txt\"}'
  harness answer exe_123 form name=Ada age=36
  harness answer exe_123 dismiss
  harness answer exe_123 --action act_1 json '{\"type\": \"tool_approval\", \"revision\": 1, \"answer\": {\"type\": \"dismiss\"}}'

`json` takes the body of POST /v1/executions/{id}/actions/{actionId} as it is (an
ActionResponse); the short forms build that body from the pending action.")]
    Answer {
        /// The execution.
        id: String,
        /// The action [default: the execution's only pending action].
        #[arg(long, value_name = "ACTION_ID")]
        action: Option<String>,
        #[command(subcommand)]
        answer: Answer,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Ask to cancel an execution; prints what the request did.
    #[command(after_help = "Example:\n  harness cancel exe_123 --reason 'taking too long'")]
    Cancel {
        /// The execution.
        id: String,
        /// Why (recorded on the execution).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Subcommand)]
enum Answer {
    /// Approve every call.
    Approve,
    /// Reject every call (or --call's).
    Reject {
        /// Why: shown to the agent and in the call's outcome.
        #[arg(long, default_value = "rejected")]
        reason: String,
        /// Only this call (the others are approved).
        #[arg(long, value_name = "CALL_ID")]
        call: Option<String>,
    },
    /// Run a call with other arguments.
    Edit {
        /// The new arguments, as a JSON object.
        #[arg(long = "args", value_name = "JSON")]
        arguments: String,
        /// The call [default: the first].
        #[arg(long, value_name = "CALL_ID")]
        call: Option<String>,
    },
    /// Submit a form's values (a value that is JSON is taken as JSON, else as text).
    Form {
        /// NAME=VALUE pairs.
        #[arg(value_name = "NAME=VALUE")]
        values: Vec<String>,
    },
    /// Dismiss the action as a whole.
    Dismiss,
    /// The answer as the HTTP API takes it (an ActionResponse); `-` reads it from stdin.
    Json {
        /// The JSON body.
        body: String,
    },
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// The server [default: $HARNESS_URL, else http://127.0.0.1:8700].
    #[arg(long, value_name = "URL", global = true)]
    server: Option<String>,
    /// The bearer token [default: $HARNESS_TOKEN].
    #[arg(long, value_name = "TOKEN", global = true)]
    token: Option<String>,
}

impl ClientArgs {
    fn client(&self) -> Result<Client, Failure> {
        let base = self
            .server
            .clone()
            .or_else(|| std::env::var("HARNESS_URL").ok())
            .unwrap_or_else(|| format!("http://{}", config::DEFAULT_LISTEN));
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("HARNESS_TOKEN").ok())
            .ok_or_else(|| {
                usage("no token: pass --token or set HARNESS_TOKEN (`harness serve` prints one)")
            })?;
        Ok(Client::new(base, token))
    }
}

/// Why a verb stopped, and its exit code.
struct Failure {
    code: u8,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

fn failed(message: impl std::fmt::Display) -> Failure {
    Failure {
        code: 1,
        message: message.to_string(),
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        failed(e)
    }
}

impl From<harness_core::error::HarnessError> for Failure {
    fn from(e: harness_core::error::HarnessError) -> Self {
        // The operator's own messages: the diagnostic says the most.
        usage(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("harness: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(verb(cli));
    // A prompt's read of stdin that Ctrl-C interrupted is still blocked in its thread: do
    // not wait for it to end.
    runtime.shutdown_background();
    code
}

async fn verb(cli: Cli) -> ExitCode {
    let name = verb_name(&cli.verb);
    let result = match cli.verb {
        Verb::Serve { config, listen } => serve(config, listen).await,
        Verb::Init { path, force } => init(&path, force),
        Verb::Token {
            principal,
            rotate,
            config,
        } => token(&principal, rotate, config),
        Verb::Run {
            adapter,
            message,
            options,
            idempotency_key,
            yes,
            client,
        } => {
            run(
                &client,
                &adapter,
                &message,
                options.as_deref(),
                idempotency_key.as_deref(),
                yes,
            )
            .await
        }
        Verb::Events {
            id,
            follow,
            after,
            client,
        } => events(&client, &id, follow, after).await,
        Verb::List { limit, client } => list(&client, limit).await,
        Verb::Show { id, client } => show(&client, &id).await,
        Verb::Answer {
            id,
            action,
            answer: decision,
            client,
        } => answer(&client, &id, action.as_deref(), decision).await,
        Verb::Cancel { id, reason, client } => cancel(&client, &id, reason.as_deref()).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("harness {name}: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

fn verb_name(verb: &Verb) -> &'static str {
    match verb {
        Verb::Serve { .. } => "serve",
        Verb::Init { .. } => "init",
        Verb::Token { .. } => "token",
        Verb::Run { .. } => "run",
        Verb::Events { .. } => "events",
        Verb::List { .. } => "list",
        Verb::Show { .. } => "show",
        Verb::Answer { .. } => "answer",
        Verb::Cancel { .. } => "cancel",
    }
}

/// The configuration `--config` names, else `./harness.toml`, else `$HARNESS_CONFIG`'s; and
/// which file that was (`None`: the defaults).
fn load_config(explicit: Option<PathBuf>) -> Result<(Config, Option<PathBuf>), Failure> {
    let path = explicit.or_else(|| {
        let local = PathBuf::from("harness.toml");
        if local.is_file() {
            Some(local)
        } else {
            std::env::var_os("HARNESS_CONFIG")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        }
    });
    match path {
        Some(path) => Ok((Config::from_path(&path)?, Some(path))),
        None => Ok((Config::default(), None)),
    }
}

fn init(path: &Path, force: bool) -> Result<ExitCode, Failure> {
    let mut file = std::fs::OpenOptions::new();
    file.write(true);
    if force {
        file.create(true).truncate(true);
    } else {
        file.create_new(true);
    }
    let written = file
        .open(path)
        .and_then(|mut f| f.write_all(config::SAMPLE.as_bytes()));
    match written {
        Ok(()) => {
            println!("wrote {}: edit it, then `harness serve`", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(usage(format!(
            "{} exists: pass --force to overwrite it",
            path.display()
        ))),
        Err(e) => Err(usage(format!("cannot write {}: {e}", path.display()))),
    }
}

fn token(principal: &str, rotate: bool, config: Option<PathBuf>) -> Result<ExitCode, Failure> {
    if rotate {
        let (config, _) = load_config(config)?;
        let (token, file) = config::development_token(&config.data_dir(), true)?;
        println!("development token (principal `dev`): {token}");
        println!(
            "kept in {} (restart `harness serve` to use it)",
            file.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| failed(format!("no randomness for a token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    println!("token: {token}");
    println!("# for harness.toml:");
    println!(
        "[[tokens]]\nprincipal = \"{principal}\"\nsha256 = \"{}\"",
        harness_server::auth::digest(&token)
    );
    Ok(ExitCode::SUCCESS)
}

/// The operator's log: on stderr, warnings and above unless `$HARNESS_LOG` says otherwise
/// (`tracing_subscriber`'s target syntax: `info`, `warn,harness_acp=debug`). Diagnostics,
/// which never reach a client, reach the operator here. With `otlp`, spans at INFO and above
/// are also exported (whatever `$HARNESS_LOG` says: it filters the log, not the export).
fn install_log(otlp: Option<&harness_observe::otlp::OtlpExporter>) -> Result<(), Failure> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter: tracing_subscriber::filter::Targets = match std::env::var("HARNESS_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse().map_err(|e| {
            usage(format!(
                "HARNESS_LOG={spec:?} is not a log filter ({e}); write a level (`info`) or \
                 targets with levels (`warn,harness_acp=debug`)"
            ))
        })?,
        _ => tracing_subscriber::filter::Targets::new()
            .with_default(tracing_subscriber::filter::LevelFilter::WARN),
    };
    // Another subscriber already installed (a test harness) keeps its place.
    let _ = tracing_subscriber::registry()
        .with(otlp.map(harness_observe::otlp::OtlpExporter::layer))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_filter(filter),
        )
        .try_init();
    Ok(())
}

async fn serve(
    config: Option<PathBuf>,
    listen: Option<std::net::SocketAddr>,
) -> Result<ExitCode, Failure> {
    let (config, read) = load_config(config)?;
    let otlp = match &config.telemetry.otlp {
        Some(otlp) => {
            let settings = otlp.otlp().map_err(|e| usage(e.message().to_owned()))?;
            // The built-in rules: the server's redactor is the same (the configuration
            // adds none).
            let redactor = harness_layers::redaction::Redactor::builder()
                .build()
                .map_err(failed)?;
            Some(
                harness_observe::otlp::OtlpExporter::new(&settings, std::sync::Arc::new(redactor))
                    .map_err(|e| usage(format!("[telemetry.otlp]: {e}")))?,
            )
        }
        None => None,
    };
    install_log(otlp.as_ref())?;
    let listen = listen.unwrap_or_else(|| config.listen());
    let limits = config.connection_limits()?;
    config.check_programs()?;
    let mut tokens = config.tokens()?;
    let mut dev_token = None;
    if tokens.is_empty() {
        let (token, file) = config::development_token(&config.data_dir(), false)?;
        tokens = tokens.with_token("dev", &token)?;
        dev_token = Some((token, file));
    }
    let (server, store) = config.server(tokens).await?;
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
            Err(e) => return Err(failed(format!("recovery of {} failed: {e}", instance.id()))),
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| usage(format!("cannot listen on {listen}: {e}")))?;
    let address = listener.local_addr().map_err(failed)?;
    let adapters: Vec<String> = server.instances().map(|i| i.id().to_string()).collect();
    // The address last: a script waiting for it has read everything else by then.
    match &read {
        Some(path) => println!("config: {}", path.display()),
        None => println!("config: none (the defaults; `harness init` writes a sample)"),
    }
    println!("adapters: {}", adapters.join(", "));
    println!("store: {store}");
    if let Some((token, file)) = &dev_token {
        println!("development token (principal `dev`): {token}");
        println!(
            "  kept in {} (`harness token --rotate` makes a new one)",
            file.display()
        );
        println!("  export HARNESS_URL=http://{address} HARNESS_TOKEN={token}");
        // A one-time code, not the token: the browser keeps the URL in its history.
        let code = server.console_code(token).map_err(failed)?;
        println!("console: http://{address}/console#code={code}");
        println!("  (the link signs in once, within 10 minutes; then sign in with the token)");
    } else {
        println!("console: http://{address}/console");
    }
    println!("harness serving on http://{address}");
    let _ = std::io::stdout().flush();
    harness_server::serve(listener, server.router(), limits)
        .with_graceful_shutdown(shutdown())
        .await;
    if let Some(otlp) = &otlp {
        // The spans still in the batch (the last executions') go out before the exit.
        otlp.shutdown();
    }
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

type Stdin = tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>;

async fn run(
    client: &ClientArgs,
    adapter: &str,
    message: &str,
    options: Option<&str>,
    idempotency_key: Option<&str>,
    yes: bool,
) -> Result<ExitCode, Failure> {
    let mut request = json!({ "message": message });
    if let Some(options) = options {
        request["options"] = serde_json::from_str(options)
            .map_err(|e| usage(format!("`--options` is not JSON: {e}")))?;
    }
    let client = &client.client()?;
    // Ctrl-C is ours from here on, wherever the run is (starting, streaming, asking).
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(failed)?;
    let execution = client.start(adapter, request, idempotency_key).await?;
    eprintln!("execution {}", execution.id);
    let id = execution.id.to_string();
    let mut stream = Box::pin(client.events(&id, 0));
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut cancelled = false;
    let mut mid_line = false;
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = interrupt.recv(), if !cancelled => {
                cancelled = true;
                cancel_run(client, &id).await?;
                continue;
            }
        };
        let Some(event) = event else { break };
        let event = event?;
        render(&event, &mut mid_line);
        if let EventPayload::ActionRequested(request) = event.payload() {
            if cancelled {
                continue;
            }
            let decided = async {
                if yes {
                    answer_once(client, &id, &auto_answer(request)).await;
                    return Ok(());
                }
                ask_until_taken(client, &id, request, &mut stdin).await
            };
            tokio::select! {
                result = decided => result?,
                _ = interrupt.recv() => {
                    cancelled = true;
                    cancel_run(client, &id).await?;
                }
            }
        }
        if event.payload().is_terminal() {
            return Ok(match event.payload() {
                EventPayload::RunSucceeded(_) => ExitCode::SUCCESS,
                _ => ExitCode::from(1),
            });
        }
    }
    Err(failed("the event stream ended before the execution did"))
}

async fn cancel_run(client: &Client, id: &str) -> Result<(), Failure> {
    eprintln!("\ncancelling ...");
    client
        .cancel(id, Some("interrupted from the terminal"))
        .await?;
    Ok(())
}

async fn answer_once(client: &Client, id: &str, response: &ActionResponse) {
    if let Err(e) = client.answer(id, response).await {
        eprintln!("answer refused: {e}");
    }
}

/// Asks until the server takes an answer: a refused one (an edit its schema refuses, a
/// decision the call does not allow) is shown and asked again; one that the action no
/// longer awaits ends the asking.
async fn ask_until_taken(
    client: &Client,
    id: &str,
    request: &ActionRequest,
    stdin: &mut Stdin,
) -> Result<(), Failure> {
    loop {
        let response = prompt(request, stdin).await?;
        match client.answer(id, &response).await {
            Ok(()) => return Ok(()),
            Err(
                e @ ClientError::Api {
                    status: 400 | 422, ..
                },
            ) => {
                eprintln!("answer refused: {}", escape(&e.to_string()));
                eprintln!("try again");
            }
            Err(e) => {
                eprintln!("answer refused: {e}");
                return Ok(());
            }
        }
    }
}

/// What `--yes` answers: approve every call; dismiss a form, else submit it empty.
fn auto_answer(request: &ActionRequest) -> ActionResponse {
    match &request.kind {
        ActionKind::ToolApproval(_) => request.approve_all(),
        ActionKind::FormInput(_) if request.dismissible => request.dismiss(),
        ActionKind::FormInput(_) => request.submit(FormValues::new()),
    }
}

/// Asks on the terminal (or reads piped lines): `y` approves, `n [reason]` rejects, `e`
/// edits the arguments (a JSON line follows), `d` dismisses; a form takes a JSON object of
/// values.
async fn prompt(request: &ActionRequest, stdin: &mut Stdin) -> Result<ActionResponse, Failure> {
    let mut line = async |question: &str| -> Result<String, Failure> {
        eprint!("{question}");
        let _ = std::io::stderr().flush();
        stdin
            .next_line()
            .await
            .map_err(failed)?
            .map(|l| l.trim().to_owned())
            .ok_or_else(|| failed("stdin closed while an answer was awaited"))
    };
    match &request.kind {
        ActionKind::ToolApproval(approval) => loop {
            eprintln!("  ({NOTE})");
            let choice = line("approve? [y]es / [n]o [reason] / [e]dit / [d]ismiss: ").await?;
            let (word, rest) = choice.split_once(' ').unwrap_or((&choice, ""));
            match word {
                "y" | "yes" | "" => return Ok(request.approve_all()),
                "n" | "no" => {
                    let reason = rest.trim();
                    let reason = if reason.is_empty() {
                        "rejected from the terminal"
                    } else {
                        reason
                    };
                    return Ok(request.reject_all(reason));
                }
                "d" | "dismiss" => return Ok(request.dismiss()),
                "e" | "edit" => {
                    let Some(call) = approval.calls().first() else {
                        continue;
                    };
                    let text = line(&format!(
                        "new arguments for {} (JSON): ",
                        escape(call.tool())
                    ))
                    .await?;
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

/// Prints `event` readably: text as it streams, the rest one line each on stderr; what an
/// agent named or passed to a tool with its invisible characters marked.
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
        EventPayload::ToolCallStarted(call) => line(format!(
            "-> tool {} {}",
            escape(&call.tool),
            escape(&call.arguments.to_string())
        )),
        EventPayload::ToolCallCompleted(done) => line(match &done.outcome {
            ToolCallOutcome::Success { .. } => format!("<- tool {}: succeeded", done.call_id),
            ToolCallOutcome::Failure { message } => {
                format!("<- tool {}: failed: {}", done.call_id, escape(message))
            }
            ToolCallOutcome::Rejected { reason } => format!(
                "<- tool {}: rejected{}",
                done.call_id,
                reason
                    .as_deref()
                    .map(|r| format!(": {}", escape(r)))
                    .unwrap_or_default()
            ),
        }),
        EventPayload::ActionRequested(request) => match &request.kind {
            ActionKind::ToolApproval(approval) => {
                for call in approval.calls() {
                    line(format!(
                        "? approve {} {}",
                        escape(call.tool()),
                        escape(&call.arguments().to_string())
                    ));
                }
            }
            ActionKind::FormInput(form) => {
                line(format!(
                    "? form {}",
                    escape(form.title().unwrap_or("(untitled)"))
                ));
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

async fn events(
    args: &ClientArgs,
    id: &str,
    follow: bool,
    after: u64,
) -> Result<ExitCode, Failure> {
    let client = args.client()?;
    if follow {
        let mut stream = Box::pin(client.events(id, after));
        while let Some(event) = stream.next().await {
            let event = event?;
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        }
        return Ok(ExitCode::SUCCESS);
    }
    // What is there now, one JSON line per event, page by page.
    let mut after = after;
    loop {
        let page = client.events_page(id, after, 1000).await?;
        for event in &page.events {
            println!("{}", serde_json::to_string(event).unwrap_or_default());
        }
        if page.events.is_empty() || page.ended {
            return Ok(ExitCode::SUCCESS);
        }
        after = page.next;
    }
}

async fn list(args: &ClientArgs, limit: usize) -> Result<ExitCode, Failure> {
    let page = args.client()?.list(None, limit).await?;
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

async fn show(args: &ClientArgs, id: &str) -> Result<ExitCode, Failure> {
    let view = args.client()?.execution(id).await?;
    let text = serde_json::to_string_pretty(&view).unwrap_or_default();
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

async fn answer(
    args: &ClientArgs,
    id: &str,
    action: Option<&str>,
    decision: Answer,
) -> Result<ExitCode, Failure> {
    let client = args.client()?;
    let view = client.execution(id).await?;
    let request = match action {
        Some(action) => view
            .pending_actions
            .iter()
            .find(|r| r.id.as_str() == action)
            .ok_or_else(|| failed(format!("{id} has no pending action {action}")))?,
        None => match view.pending_actions.as_slice() {
            [only] => only,
            [] => return Err(failed(format!("{id} awaits no answer"))),
            several => {
                let ids: Vec<&str> = several.iter().map(|r| r.id.as_str()).collect();
                return Err(usage(format!(
                    "{id} awaits several answers: name one with --action ({})",
                    ids.join(", ")
                )));
            }
        },
    };
    let action = request.id.as_str();
    let approval = || {
        request.as_approval().ok_or_else(|| {
            usage(format!(
                "{action} is a form: answer it with `form` or `dismiss`"
            ))
        })
    };
    let call_of = |call: Option<&str>| -> Result<harness_core::id::ToolCallId, Failure> {
        let approval = approval()?;
        match call {
            Some(call) => approval
                .calls()
                .iter()
                .find(|c| c.call_id().as_str() == call)
                .map(|c| c.call_id().clone())
                .ok_or_else(|| usage(format!("{action} has no call {call}"))),
            None => approval
                .calls()
                .first()
                .map(|c| c.call_id().clone())
                .ok_or_else(|| usage(format!("{action} has no calls"))),
        }
    };
    let body = match decision {
        Answer::Approve => {
            approval()?;
            to_json(&request.approve_all())
        }
        Answer::Reject { reason, call } => {
            approval()?;
            match call {
                Some(_) => to_json(&request.reject(&call_of(call.as_deref())?, reason)),
                None => to_json(&request.reject_all(reason)),
            }
        }
        Answer::Edit { arguments, call } => {
            let arguments: Value = serde_json::from_str(&arguments)
                .map_err(|e| usage(format!("`--args` is not JSON: {e}")))?;
            to_json(&request.edit(&call_of(call.as_deref())?, arguments))
        }
        Answer::Form { values } => {
            if request.as_approval().is_some() {
                return Err(usage(format!(
                    "{action} is a tool approval: answer it with approve, reject or edit"
                )));
            }
            let mut form = FormValues::new();
            for pair in &values {
                let (name, value) = pair.split_once('=').ok_or_else(|| {
                    usage(format!("`{pair}` is not NAME=VALUE (name=Ada, age=36)"))
                })?;
                let value = serde_json::from_str::<Value>(value)
                    .unwrap_or_else(|_| Value::String(value.to_owned()));
                form = form.with(name, value);
            }
            to_json(&request.submit(form))
        }
        Answer::Dismiss => to_json(&request.dismiss()),
        Answer::Json { body } => {
            let text = if body == "-" {
                std::io::read_to_string(std::io::stdin().take(1 << 20)).map_err(failed)?
            } else {
                body
            };
            // The server checks it as it checks any caller's body.
            serde_json::from_str(&text)
                .map_err(|e| usage(format!("the answer is not JSON: {e}")))?
        }
    };
    client.answer_json(id, action, &body).await?;
    println!("answered {action}");
    Ok(ExitCode::SUCCESS)
}

fn to_json(response: &ActionResponse) -> Value {
    serde_json::to_value(response).unwrap_or_default()
}

async fn cancel(args: &ClientArgs, id: &str, reason: Option<&str>) -> Result<ExitCode, Failure> {
    let status = args.client()?.cancel(id, reason).await?;
    let status = serde_json::to_value(status).unwrap_or_default();
    println!("{}", status.as_str().unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}

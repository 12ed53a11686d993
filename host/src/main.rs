//! The `sonde` command: parses flags, loads the configuration and runs the host.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use sonde::config::{Config, parse_override};

/// The plugins this binary carries (`host/build.rs`: `target/plugins/bundled/` at build time).
mod carried {
    include!(concat!(env!("OUT_DIR"), "/bundled_plugins.rs"));
}

/// sonde: a profiling host for distributed ML training and serving.
///
/// Samples this machine, runs the Wasm plugins found in the plugins directory
/// and exports over OTLP. With no plugins directory given, it runs the
/// plugins it carries, written into <data dir>/plugins. Settings come from
/// (lowest to highest) defaults, --config, OTEL_* and SONDE_* environment
/// variables, then these flags.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// TOML configuration file.
    #[arg(short, long, env = "SONDE_CONFIG")]
    config: Option<PathBuf>,
    /// Address of the API and dashboard (api.listen).
    #[arg(long)]
    listen: Option<String>,
    /// Plugins directory (plugins.dir). Default: <data dir>/plugins, holding
    /// the plugins this binary carries.
    #[arg(long)]
    plugins_dir: Option<PathBuf>,
    /// Data directory: state and compiled-plugin cache (host.data_dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Directory for plugins' file sinks; must exist (sinks.dir).
    #[arg(long)]
    sinks_dir: Option<PathBuf>,
    /// Sampling period in milliseconds (sampler.period_ms).
    #[arg(long)]
    period_ms: Option<u32>,
    /// OTLP collector, e.g. http://127.0.0.1:4317, or https://… with export.tls (export.endpoint).
    #[arg(long)]
    export_endpoint: Option<String>,
    /// grpc or http/protobuf (export.protocol).
    #[arg(long)]
    export_protocol: Option<String>,
    /// standalone (default), agent or master (cluster.role).
    #[arg(long)]
    role: Option<String>,
    /// An agent's master, e.g. http://10.0.0.5:4317, or https://… when its receivers use TLS (cluster.master).
    #[arg(long)]
    master: Option<String>,
    /// Any setting as key=value, e.g. --set plugins.call_timeout_ms=50 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Validate the configuration, print it, and exit.
    #[arg(long)]
    check_config: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Tools for plugin authors, and the plugins this binary carries.
    #[command(subcommand, visible_alias = "plugins")]
    Plugin(PluginCommand),
    /// Compiles a plugin component into the compile cache (the host runs
    /// this itself, so that compiling leaves nothing in its memory).
    #[command(hide = true)]
    CompilePlugin {
        /// The component (`-`: stdin).
        input: PathBuf,
        /// Where the compiled form goes.
        output: PathBuf,
    },
    /// The configuration's own tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Record what a running sonde hands its plugins, for `sonde plugin test`.
    Record {
        /// How long to record, 1 to 600 seconds.
        #[arg(long)]
        seconds: u64,
        /// The running sonde's API.
        #[arg(long, default_value = "http://127.0.0.1:7878")]
        api: String,
        /// The file to write (default: sonde-recording-<unix seconds>.jsonl).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The largest recording the sonde should make (default 64 MiB, at most 256 MiB).
        #[arg(long)]
        max_bytes: Option<usize>,
    },
}

#[derive(clap::Subcommand, Debug)]
enum ConfigCommand {
    /// Print every key (its type, default, range and doc) as markdown: what
    /// docs/configuration.md holds.
    Reference,
}

#[derive(clap::Subcommand, Debug)]
enum PluginCommand {
    /// Write the plugins this binary carries into DIR (created if missing;
    /// files of the same name are replaced), to run them from a plugins
    /// directory of your own (--plugins-dir DIR).
    Extract {
        /// The folder to write them in.
        dir: PathBuf,
    },
    /// Write a ready-to-build plugin (hooks, a test, a README) into a new folder.
    New {
        /// The plugin's name: its .wasm file name and its route, /api/plugins/NAME/...
        name: String,
        /// rust, python (componentize-py) or js (componentize-js).
        #[arg(long, default_value = "rust")]
        lang: sonde::plugin_kit::Lang,
        /// The folder to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// For --lang rust: an SDK to depend on by path, e.g. a checkout's
        /// plugins/sdk (default: the copy this sonde carries, written into
        /// the plugin's folder).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Replay a recording (`sonde record`) through a plugin, in the host's sandbox, and print what it emitted.
    Test {
        /// The plugin component.
        wasm: PathBuf,
        /// The recording to replay.
        #[arg(long)]
        events: PathBuf,
        /// The plugin's settings, a JSON object (as `[plugin.NAME] settings`).
        #[arg(long, default_value = "{}")]
        settings: String,
        /// The plugin's name (default: the file name without .wasm).
        #[arg(long)]
        name: Option<String>,
        /// Ask a route of the plugin after the replay: PATH or "METHOD PATH" (repeatable).
        #[arg(long = "route", value_name = "PATH")]
        routes: Vec<String>,
        /// Print everything as one JSON object.
        #[arg(long)]
        json: bool,
        /// Where compiled plugins are cached (default: $XDG_CACHE_HOME/sonde/plugin-cache).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// The plugin's memory cap (plugins.memory_limit_mb, default 64).
        #[arg(long)]
        memory_limit_mb: Option<u32>,
        /// The deadline of one hook call (plugins.call_timeout_ms, default 100).
        #[arg(long)]
        call_timeout_ms: Option<u32>,
    },
}

/// Runs a subcommand: nothing of the host starts.
fn run_command(command: Command) -> ExitCode {
    match command {
        Command::Plugin(PluginCommand::New { name, lang, dir, sdk }) => plugin_new(name, lang, dir, sdk),
        Command::Plugin(PluginCommand::Extract { dir }) => plugins_extract(&dir),
        Command::Config(ConfigCommand::Reference) => {
            print!("{}", sonde::config::reference::markdown());
            ExitCode::SUCCESS
        }
        Command::CompilePlugin { input, output } => match sonde::plugin::engine::compile_file(&input, &output) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sonde compile-plugin: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Plugin(PluginCommand::Test {
            wasm,
            events,
            settings,
            name,
            routes,
            json,
            cache_dir,
            memory_limit_mb,
            call_timeout_ms,
        }) => {
            let settings = match serde_json::from_str(&settings) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("sonde plugin test: --settings is not JSON: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut limits = sonde::plugin::config::PluginsConfig::default();
            limits.memory_limit_mb = memory_limit_mb.unwrap_or(limits.memory_limit_mb);
            limits.call_timeout_ms = call_timeout_ms.unwrap_or(limits.call_timeout_ms);
            let run = sonde::plugin_kit::replay::TestRun {
                wasm,
                recording: events,
                settings,
                name,
                routes,
                cache_dir: cache_dir.unwrap_or_else(sonde::plugin_kit::replay::default_cache_dir),
                limits,
            };
            plugin_test(&run, json)
        }
        Command::Record {
            seconds,
            api,
            out,
            max_bytes,
        } => {
            let r = sonde::plugin_kit::record::Record {
                api,
                seconds,
                max_bytes,
                out: out.unwrap_or_else(sonde::plugin_kit::record::default_out),
            };
            eprintln!("recording {} s from {} ...", r.seconds, r.api);
            match sonde::plugin_kit::record::record(&r) {
                Ok(saved) => {
                    println!(
                        "{}: {} bytes, {} ticks, {} event batches",
                        r.out.display(),
                        saved.bytes,
                        saved.ticks,
                        saved.event_batches
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("sonde record: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `sonde plugin test`: 0 when the replay ran through, 1 when the plugin
/// refused to start or trapped, 2 for a bad file or argument.
fn plugin_test(run: &sonde::plugin_kit::replay::TestRun, json: bool) -> ExitCode {
    use sonde::plugin_kit::{replay, report};
    match replay::run(run) {
        Ok(r) => {
            print!("{}", if json { report::json(&r) } else { report::text(&r) });
            if json {
                println!();
            }
            match &r.trap {
                Some(t) => {
                    eprintln!("sonde plugin test: {t}");
                    ExitCode::FAILURE
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(replay::TestError::Input(e)) => {
            eprintln!("sonde plugin test: {e}");
            ExitCode::from(2)
        }
        Err(replay::TestError::Plugin(e)) => {
            eprintln!("sonde plugin test: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sonde plugins extract DIR`: 1 when the binary carries none (it was
/// built before `./dev plugins`) or a file cannot be written.
fn plugins_extract(dir: &std::path::Path) -> ExitCode {
    if carried::BUNDLED_PLUGINS.is_empty() {
        eprintln!(
            "sonde plugins extract: this sonde carries no plugins (it was built without target/plugins/bundled/)"
        );
        return ExitCode::FAILURE;
    }
    match sonde::plugin::bundled::extract(dir, carried::BUNDLED_PLUGINS) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sonde plugins extract: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// With no `plugins.dir` given, brings `<host.data_dir>/plugins` up to the
/// plugins this binary carries (see `sonde::plugin::bundled`).
fn install_carried(cfg: &Config) -> anyhow::Result<()> {
    if cfg.plugins.dir.is_some() {
        return Ok(());
    }
    let dir = cfg.plugins_dir();
    if carried::BUNDLED_PLUGINS.is_empty() {
        tracing::warn!(
            dir = %dir.display(),
            "this sonde carries no plugins (built without target/plugins/bundled/): only what the plugins directory holds runs"
        );
    }
    let done = sonde::plugin::bundled::install(&dir, carried::BUNDLED_PLUGINS)?;
    for (what, names) in [
        ("written", &done.written),
        ("kept: a file of your own under this name", &done.kept),
        ("left out: removed from the directory earlier", &done.left_out),
        ("removed: no longer carried", &done.retired),
    ] {
        if !names.is_empty() {
            tracing::info!(dir = %dir.display(), "bundled plugins {what}: {}", names.join(", "));
        }
    }
    Ok(())
}

fn plugin_new(name: String, lang: sonde::plugin_kit::Lang, dir: Option<PathBuf>, sdk: Option<PathBuf>) -> ExitCode {
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    let new = sonde::plugin_kit::NewPlugin { name, lang, dir, sdk };
    match sonde::plugin_kit::write(&new) {
        Ok(files) => {
            println!("wrote the {lang} plugin {:?} in {}:", new.name, new.dir.display());
            let sdk = std::path::Path::new(sonde::plugin_kit::sdk::FOLDER);
            let (sdk_files, own): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| f.starts_with(sdk));
            for f in own {
                println!("  {}", f.display());
            }
            if !sdk_files.is_empty() {
                println!(
                    "  {}/ (the plugin SDK {}, {} files)",
                    sdk.display(),
                    sonde::plugin_kit::sdk::version(),
                    sdk_files.len()
                );
            }
            println!(
                "build it (in {}): {}",
                new.dir.display(),
                sonde::plugin_kit::build_command(lang, &new.name)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sonde plugin new: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,wasmtime=warn,cranelift=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut cli = Cli::parse();
    if let Some(command) = cli.command.take() {
        return run_command(command);
    }
    let mut overrides = Vec::new();
    let flag = |k: &str, v: Option<String>, o: &mut Vec<(String, toml::Value)>| {
        if let Some(v) = v {
            o.push((k.to_string(), toml::Value::String(v)));
        }
    };
    flag("api.listen", cli.listen, &mut overrides);
    flag(
        "plugins.dir",
        cli.plugins_dir.map(|p| p.display().to_string()),
        &mut overrides,
    );
    flag(
        "host.data_dir",
        cli.data_dir.map(|p| p.display().to_string()),
        &mut overrides,
    );
    flag(
        "sinks.dir",
        cli.sinks_dir.map(|p| p.display().to_string()),
        &mut overrides,
    );
    flag("export.endpoint", cli.export_endpoint, &mut overrides);
    flag("export.protocol", cli.export_protocol, &mut overrides);
    flag("cluster.role", cli.role, &mut overrides);
    flag("cluster.master", cli.master, &mut overrides);
    if let Some(p) = cli.period_ms {
        overrides.push(("sampler.period_ms".into(), toml::Value::Integer(p as i64)));
    }
    for s in &cli.set {
        match parse_override(s) {
            Ok(kv) => overrides.push(kv),
            Err(e) => {
                eprintln!("sonde: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let cfg = match Config::load(cli.config.as_deref(), &env, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sonde: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        println!("{}", toml::to_string_pretty(&cfg).unwrap_or_default());
        println!("# configuration is valid");
        return ExitCode::SUCCESS;
    }
    if let Err(e) = install_carried(&cfg) {
        eprintln!("sonde: writing the bundled plugins: {e:#}");
        return ExitCode::FAILURE;
    }
    // Plugins are compiled by this same binary in a child process (see
    // plugin::engine). On Linux through /proc/self/exe: the running file
    // even if a rebuild replaced it on disk since.
    let exe = if cfg!(target_os = "linux") {
        Ok(PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    };
    if let Ok(exe) = exe {
        sonde::plugin::engine::compile_in_child(exe);
    }
    sonde::footprint::share_heap_arenas();
    let rt = match sonde::run::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sonde: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(sonde::run::run(cfg));
    // Never wait for stray blocking tasks at exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sonde: {e:#}");
            ExitCode::FAILURE
        }
    }
}

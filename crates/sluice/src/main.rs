//! The sluice binary: command line, wiring of source → compile → publish → proxy, and the admin listener.

mod admin;
mod check;
mod cli;
mod control;
mod demo;
mod drill;
mod events;
mod gateway_listeners;
mod kube_source;
mod logging;
mod metrics;
mod serve;
mod workers;

use clap::Parser;

use cli::{Cli, Command};

/// jemalloc: compiles at cluster scale allocate and free hundreds of thousands of small objects;
/// glibc's allocator serves them markedly slower, and mimalloc holds on to more memory (see
/// docs/benchmarks.md for the comparison). Its build-time settings are in .cargo/config.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log);
    raise_file_limit();
    if let Command::Drill(options) = &cli.command {
        // A drill with a kernel-DNAT ClusterIP runs in a network namespace of its own.
        match sluice_drill::reexec_in_netns_if_needed(&options.drill) {
            Ok(Some(status)) => return exit_code(status.code()),
            Ok(None) => {}
            Err(error) => {
                eprintln!("sluice: {error:#}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let runtime = match runtime_builder().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => {
                let config = args.into_config();
                let shutdown = serve::shutdown_on_signal(config.shutdown_delay);
                serve::run(config, shutdown).await.map(|()| true)
            }
            Command::Check(args) => check::run(&args),
            Command::Demo(args) => demo::run(*args).await.map(|()| true),
            Command::Drill(options) => drill::run(*options).await,
        }
    });
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(error) => {
            eprintln!("sluice: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The async runtime: one thread when the process may use one core (taskset, a CPU limit of
/// one in a container), else one worker per core. On one core the single-threaded scheduler
/// costs about 10 % less CPU per proxied request than a one-worker multi-threaded one
/// (docs/benchmarks.md), and there is no other core to steal work for.
fn runtime_builder() -> tokio::runtime::Builder {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
}

/// The exit code of a child process (1 when a signal ended it).
fn exit_code(code: Option<i32>) -> std::process::ExitCode {
    let code = code.unwrap_or(1);
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does: every client
/// and upstream connection holds a descriptor, and the common default of 1,024 runs out at a
/// few hundred busy clients.
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let (Some(soft), Some(hard)) = (limit.current, limit.maximum) else {
        tracing::debug!("the open files limit is unlimited");
        return;
    };
    if soft >= hard {
        tracing::info!(limit = soft, "open files limit (already at the hard limit)");
        return;
    }
    let raised = rustix::process::Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(
            limit = hard,
            was = soft,
            "raised the open files limit to the hard limit"
        ),
        Err(error) => tracing::warn!(%error, limit = soft, "cannot raise the open files limit"),
    }
}

//! `sluice-test-apiserver`: runs the test Kubernetes API server until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use sluice_testapi::TestApiServer;

const USAGE: &str = "usage: sluice-test-apiserver [--listen ADDR] [--kubeconfig PATH]\n\
  --listen ADDR       address to listen on (default 127.0.0.1:8001)\n\
  --kubeconfig PATH   also write a kubeconfig for the server to PATH\n\
fault controls: POST /__testapi/drop-watches, /__testapi/expire, /__testapi/compact,\n\
  /__testapi/refuse?seconds=N, /__testapi/delay?millis=N, /__testapi/seed (JSON list); GET /__testapi/stats";

#[tokio::main]
async fn main() -> ExitCode {
    let mut listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8001));
    let mut kubeconfig: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(value)) => match value.parse() {
                Ok(addr) => listen = addr,
                Err(error) => {
                    eprintln!("--listen {value}: {error}\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            ("--kubeconfig", Some(value)) => kubeconfig = Some(PathBuf::from(value)),
            ("--help" | "-h", _) => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => {
                eprintln!("unexpected argument {arg:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let server = match TestApiServer::start(listen).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("sluice-test-apiserver: {error}: {}", source_of(&error));
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = kubeconfig {
        if let Err(error) = server.write_kubeconfig(&path) {
            eprintln!("sluice-test-apiserver: {error}: {}", source_of(&error));
            return ExitCode::FAILURE;
        }
        println!("kubeconfig written to {}", path.display());
    }
    println!("{}", server.url());
    if let Err(error) = tokio::signal::ctrl_c().await {
        eprintln!("sluice-test-apiserver: waiting for Ctrl-C: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn source_of(error: &dyn std::error::Error) -> String {
    error.source().map(ToString::to_string).unwrap_or_default()
}

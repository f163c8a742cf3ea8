//! `capstan`: a Karpenter-style node provisioner. See `capstan --help`.

use anyhow::Result;
use capstan_cli::{bench, table};
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "capstan", version, about = "Karpenter-style Kubernetes node provisioner", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks (run with --release).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Karpenter's scheduling benchmark: N mixed pods against M synthetic instance types.
    Scheduling {
        /// Pending pods per row; repeat for several rows.
        #[arg(long = "pods", default_values_t = vec![1usize, 100, 1000, 5000, 20000])]
        pods: Vec<usize>,
        /// Synthetic instance types (type i has i+1 vCPU).
        #[arg(long = "instance-types", default_value_t = 400)]
        instance_types: usize,
        /// Seed for the pods' requests.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Solves per row at most (the median is reported; rows stop repeating after ~2 s).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Table,
    Json,
}

fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn bench_scheduling(
    pods: &[usize],
    instance_types: usize,
    seed: u64,
    runs: usize,
    output: Output,
) -> Result<()> {
    let mut rows = Vec::new();
    for &n in pods {
        let row = bench::run_scheduling(n, instance_types, seed, runs);
        tracing::info!(
            pods = row.pods,
            seconds = row.seconds,
            nodes = row.nodes,
            runs = row.runs,
            "solved"
        );
        rows.push(row);
    }
    match output {
        Output::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&rows)?)),
        Output::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.pods.to_string(),
                        r.instance_types.to_string(),
                        format!("{:.4}", r.seconds),
                        format!("{:.0}", r.pods_per_second),
                        r.nodes.to_string(),
                        r.unschedulable.to_string(),
                    ]
                })
                .collect();
            emit(&table::render(
                &[
                    "PODS",
                    "INSTANCE TYPES",
                    "SECONDS",
                    "PODS/S",
                    "NODES",
                    "UNSCHEDULABLE",
                ],
                &cells,
            ))
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { which } => match which {
            BenchCommand::Scheduling {
                pods,
                instance_types,
                seed,
                runs,
                output,
            } => bench_scheduling(&pods, instance_types, seed, runs, output),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(1)
        }
    }
}

//! The `pdsim` command.
//!
//! Exit codes (documented in the README and in `--help`):
//! - 0: success (for `validate`: every document is valid; warnings allowed);
//! - 1: the inputs are invalid;
//! - 2: a usage error, or a file that could not be read or written (an
//!   `--out` that pdsim may not replace included);
//! - 3: an engine invariant broke;
//! - 130 / 143: interrupted by SIGINT / SIGTERM (unfinished results removed).

mod calibrate_cmd;
mod compare_cmd;
mod disk;
mod engine_cmd;
mod export_cmd;
mod flags;
mod interrupt;
mod output;
mod plan_cmd;
mod run_cmd;
mod session;
mod validate_cmd;

use std::process::ExitCode;

fn main() -> ExitCode {
    pdsim_cli_run()
}

/// Parses the command line and runs it; errors go to stderr.
fn pdsim_cli_run() -> ExitCode {
    use clap::Parser;
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // clap prints help and version to stdout with exit 0, usage
            // errors to stderr with exit 2.
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() { 2 } else { 0 });
        }
    };
    // The commands that write results remove what they have not finished
    // when interrupted; `validate` and `engine replay` write nothing and
    // keep the default.
    match &cli.command {
        Command::Validate(_) | Command::Engine(_) => {}
        Command::Run(_) => interrupt::install("run"),
        Command::Compare(_) => interrupt::install("compare"),
        Command::Plan(_) => interrupt::install("plan"),
        Command::Calibrate(_) => interrupt::install("calibrate"),
        Command::Export(_) => interrupt::install("export"),
        Command::Import(_) => interrupt::install("import"),
    }
    match cli.command {
        Command::Validate(args) => validate_cmd::run(&args),
        Command::Run(args) => run_cmd::run_command(&args),
        Command::Compare(args) => compare_cmd::run(&args),
        Command::Plan(args) => plan_cmd::run(&args),
        Command::Calibrate(args) => calibrate_cmd::run(&args),
        Command::Engine(args) => engine_cmd::run(&args),
        Command::Export(args) => export_cmd::exit("export", export_cmd::export(&args)),
        Command::Import(args) => export_cmd::exit("import", export_cmd::import(&args)),
    }
}

/// pdsim: replay request traces against LLM serving clusters run the llm-d
/// way (vLLM engines, prefill/decode pools, the EPP router), compare layouts
/// and plan capacity. Same inputs and seed, same results.
///
/// Start with `pdsim run` (the built-in default) or `pdsim validate`.
#[derive(clap::Parser, Debug)]
#[command(name = "pdsim", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 success (valid), 1 invalid input, 2 usage or I/O error (including an --out that is not an earlier pdsim result), 3 an invariant broke (run --check), 130 / 143 interrupted by SIGINT / SIGTERM (unfinished results removed).";

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Check Scenario and Deployment documents and say exactly what is wrong and where.
    Validate(validate_cmd::Args),
    /// Replay a trace against a deployment; with no arguments, the built-in default.
    Run(run_cmd::Args),
    /// Run the same requests through several deployments and explain the difference.
    Compare(compare_cmd::Args),
    /// Find each layout's highest request rate within an SLO; rank layouts; shard and merge.
    Plan(plan_cmd::Args),
    /// Fit named cost-model coefficients to measured runs; write CoefficientSet files for --catalog.
    Calibrate(calibrate_cmd::Args),
    /// Drive one engine directly: `engine replay` prints its decisions step by step.
    Engine(engine_cmd::Args),
    /// Write what an llm-d user deploys for a deployment: model-service and inferencepool Helm values, vllm serve commands.
    Export(export_cmd::ExportArgs),
    /// Read llm-d Helm values (model-service, inferencepool) back into a Deployment and its router files.
    Import(export_cmd::ImportArgs),
}

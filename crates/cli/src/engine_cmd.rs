//! `pdsim engine replay CONFIG WORKLOAD`: drive one pdsim engine step by step
//! through a workload of token-id prompts and print one canonical JSON line
//! per step, in the format `tools/vllm-oracle/oracle.py` prints for vLLM's
//! own scheduler (`tools/vllm-oracle/README.md`), so the two can be diffed
//! byte for byte. The replay itself is `pdsim_engine::replay`; this reads
//! the files and prints.

use crate::disk::DiskFiles;
use pdsim_engine::replay::{ReplayError, replay};
use pdsim_spec::files::Files;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: EngineCommand,
}

#[derive(clap::Subcommand, Debug)]
enum EngineCommand {
    /// Replay a token-id workload through one engine and print its decisions, one JSON line a step.
    Replay {
        /// The engine config: one JSON object (tools/vllm-oracle/README.md).
        #[arg(value_name = "CONFIG")]
        config: PathBuf,
        /// The workload: JSONL, one request a line.
        #[arg(value_name = "WORKLOAD")]
        workload: PathBuf,
        /// Override a feature switch of the release's rules pack, NAME=true|false
        /// (reserve_full_prompt, unhashed_blocks_to_front,
        /// long_prefill_waiver_when_alone, kv_holding_first), to see what a
        /// pack fix would change.
        /// Repeatable.
        #[arg(long = "feature", value_name = "NAME=BOOL")]
        features: Vec<String>,
    },
}

pub fn run(args: &Args) -> ExitCode {
    match &args.command {
        EngineCommand::Replay {
            config,
            workload,
            features,
        } => {
            // Read as every document is (`pdsim run`'s too): a FIFO, a
            // device or a socket is refused before it is opened, since
            // /dev/zero never ends and a FIFO with no writer blocks for
            // ever, and a regular file is read only up to the document
            // limit (8 MiB, some five hundred times the largest golden
            // workload), so neither input can grow memory without bound.
            let read = |path: &Path| {
                DiskFiles
                    .read(path)
                    .map_err(|e| format!("{}: {e}", path.display()))
            };
            let (config_text, workload_text) = match (read(config), read(workload)) {
                (Ok(c), Ok(w)) => (c, w),
                (Err(msg), _) | (_, Err(msg)) => {
                    eprintln!("error: {msg}");
                    return ExitCode::from(2);
                }
            };
            let mut out = std::io::stdout().lock();
            let mut emit = |line: &str| {
                out.write_all(line.as_bytes())
                    .map_err(|e| format!("stdout: {e}"))
            };
            let result = replay(
                &config_text,
                &config.display().to_string(),
                &workload_text,
                &workload.display().to_string(),
                features,
                &mut emit,
            )
            .and_then(|()| {
                out.flush()
                    .map_err(|e| ReplayError::Output(format!("stdout: {e}")))
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(ReplayError::Input(msg)) => {
                    eprintln!("error: {msg}");
                    ExitCode::from(1)
                }
                Err(ReplayError::Output(msg)) => {
                    eprintln!("error: {msg}");
                    ExitCode::from(2)
                }
                Err(ReplayError::Spin(msg)) => {
                    eprintln!("error: {msg}");
                    ExitCode::from(1)
                }
                Err(ReplayError::Invariant(msg)) => {
                    eprintln!("error: engine invariant broke: {msg}");
                    ExitCode::from(3)
                }
            }
        }
    }
}

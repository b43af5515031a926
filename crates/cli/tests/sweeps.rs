//! The sweep recipes in `deploy/` run as they are written: the Kubernetes
//! Indexed Job's shard and merge commands, and the Slurm array's
//! `plan.sbatch` and `merge.sbatch`, each given the environment its batch
//! system gives it, must merge into exactly the plan one unsharded run
//! writes. Where Slurm is installed, a single-node Slurm cluster started
//! here runs `deploy/slurm/submit.sh` for real; elsewhere that part says
//! it skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A working folder laid out as the recipes expect their volume or
/// submission folder: the repository's inputs (as symbolic links) and
/// `bin/pdsim`, the binary under test.
fn workspace(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("sweeps")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for input in ["scenarios", "deployments", "traces"] {
        std::os::unix::fs::symlink(root().join(input), dir.join(input)).unwrap();
    }
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_pdsim"), dir.join("bin/pdsim")).unwrap();
    dir
}

/// Runs `sh -c command` (or `sh file`) in `dir` with `bin/` first on the
/// PATH and `env` set; panics with its output unless it succeeds.
fn sh(dir: &Path, args: &[&str], env: &[(&str, String)]) {
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("sh");
    command.args(args).current_dir(dir).env("PATH", path);
    // The batch systems' variables of the test's own environment (a test
    // run inside a Slurm job, say) must not reach the recipes.
    for name in [
        "JOB_COMPLETION_INDEX",
        "PDSIM_SHARD_COUNT",
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_TASK_STEP",
    ] {
        command.env_remove(name);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("sh runs");
    assert!(
        out.status.success(),
        "sh {args:?} with {env:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file of a plan folder, by relative path, but its README (which
/// names the command and folder it came from).
fn plan_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).unwrap().display().to_string();
                if rel != "README.md" && !rel.starts_with('.') {
                    out.insert(rel, std::fs::read(&path).unwrap());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Requires the plan in `dir` to hold exactly the files of `whole`, byte
/// for byte.
fn same_plan(whole: &BTreeMap<String, Vec<u8>>, dir: &Path, what: &str) {
    let merged = plan_files(dir);
    assert_eq!(
        merged.keys().collect::<Vec<_>>(),
        whole.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (file, bytes) in whole {
        assert!(
            merged[file] == *bytes,
            "{file}: {what} differs from the unsharded plan"
        );
    }
}

/// The shard command of the Indexed Job in `plan-indexed-job.yaml`, and
/// its `completions`, which `PDSIM_SHARD_COUNT` must equal.
fn indexed_job() -> (String, usize) {
    let text =
        std::fs::read_to_string(root().join("deploy/kubernetes/plan-indexed-job.yaml")).unwrap();
    let job: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let completions = spec["completions"].as_u64().unwrap() as usize;
    let container = &spec["template"]["spec"]["containers"][0];
    let count = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("PDSIM_SHARD_COUNT"))
        .and_then(|e| e["value"].as_str())
        .expect("PDSIM_SHARD_COUNT in the container's env");
    assert_eq!(
        count.parse::<usize>().unwrap(),
        completions,
        "PDSIM_SHARD_COUNT must equal the Job's completions"
    );
    (shell_command(container), completions)
}

/// The `sh -c` command of a container.
fn shell_command(container: &serde_yaml::Value) -> String {
    let command: Vec<&str> = container["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(&command[..2], ["sh", "-c"], "{command:?}");
    command[2].to_string()
}

/// The unsharded plan the shards must merge into: the shard command
/// without `--shard auto`, into `results/whole`.
fn whole_plan(dir: &Path, shard_command: &str) -> BTreeMap<String, Vec<u8>> {
    assert!(shard_command.contains("--shard auto"), "{shard_command}");
    let out = regex_free_out(shard_command);
    let whole = shard_command
        .replace("--shard auto", "")
        .replace(&out, "--out results/whole");
    sh(dir, &["-c", &whole], &[]);
    plan_files(&dir.join("results/whole"))
}

/// The `--out "…"` argument of a command, as written.
fn regex_free_out(command: &str) -> String {
    let start = command.find("--out ").expect("an --out folder");
    let rest = &command[start + "--out ".len()..];
    let end = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.find('"').unwrap() + 2
    } else {
        rest.find(char::is_whitespace).unwrap_or(rest.len())
    };
    command[start..start + "--out ".len() + end].to_string()
}

#[test]
fn the_kubernetes_indexed_job_merges_into_the_unsharded_plan() {
    let dir = workspace("kubernetes");
    let (shard_command, completions) = indexed_job();
    let whole = whole_plan(&dir, &shard_command);
    assert!(whole.contains_key("plan.json") && whole.contains_key("report.html"));
    for index in 0..completions {
        sh(
            &dir,
            &["-c", &shard_command],
            &[
                ("JOB_COMPLETION_INDEX", index.to_string()),
                ("PDSIM_SHARD_COUNT", completions.to_string()),
            ],
        );
    }
    let merge: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("deploy/kubernetes/plan-merge-job.yaml")).unwrap(),
    )
    .unwrap();
    let merge_command = shell_command(&merge["spec"]["template"]["spec"]["containers"][0]);
    sh(&dir, &["-c", &merge_command], &[]);
    same_plan(
        &whole,
        &dir.join("results/plan"),
        "the Indexed Job's merged plan",
    );
}

/// The array range of `plan.sbatch` (`#SBATCH --array=A-B`).
fn slurm_array() -> (usize, usize) {
    let text = std::fs::read_to_string(root().join("deploy/slurm/plan.sbatch")).unwrap();
    let range = text
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --array="))
        .expect("an --array line");
    let (a, b) = range.trim().split_once('-').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn the_slurm_array_merges_into_the_unsharded_plan() {
    let dir = workspace("slurm");
    let text = std::fs::read_to_string(root().join("deploy/slurm/plan.sbatch")).unwrap();
    let shard_command = text
        .split("exec ")
        .nth(1)
        .expect("plan.sbatch ends in `exec pdsim plan …`")
        .replace("\\\n", " ");
    let whole = whole_plan(&dir, &shard_command);
    let (first, last) = slurm_array();
    let count = last - first + 1;
    std::fs::create_dir_all(dir.join("results/plan-shards")).unwrap();
    for task in first..=last {
        // What Slurm sets in each array task's environment.
        sh(
            &dir,
            &[root().join("deploy/slurm/plan.sbatch").to_str().unwrap()],
            &[
                ("SLURM_ARRAY_JOB_ID", "1".to_string()),
                ("SLURM_ARRAY_TASK_ID", task.to_string()),
                ("SLURM_ARRAY_TASK_MIN", first.to_string()),
                ("SLURM_ARRAY_TASK_MAX", last.to_string()),
                ("SLURM_ARRAY_TASK_COUNT", count.to_string()),
                ("SLURM_ARRAY_TASK_STEP", "1".to_string()),
            ],
        );
    }
    sh(
        &dir,
        &[root().join("deploy/slurm/merge.sbatch").to_str().unwrap()],
        &[],
    );
    same_plan(
        &whole,
        &dir.join("results/plan"),
        "the Slurm array's merged plan",
    );
    real_slurm(&whole);
}

/// `submit.sh` against a single-node Slurm cluster started here, when
/// Slurm and MUNGE are installed; otherwise a visible skip line.
fn real_slurm(whole: &BTreeMap<String, Vec<u8>>) {
    let test = "the_slurm_array_merges_into_the_unsharded_plan";
    let missing: Vec<&str> = ["sbatch", "squeue", "slurmctld", "slurmd", "munged"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        pdsim_testkit::skipped(
            test,
            "submitting deploy/slurm/submit.sh to a real single-node Slurm",
            &format!("not installed: {}", missing.join(", ")),
        );
        return;
    }
    let dir = workspace("slurm-real");
    let cluster = slurm::Cluster::start(&dir.join("slurm"));
    let cluster = match cluster {
        Ok(c) => c,
        Err(why) => {
            pdsim_testkit::skipped(
                test,
                "submitting deploy/slurm/submit.sh to a real single-node Slurm",
                &format!("Slurm is installed but a cluster could not be started here: {why}"),
            );
            return;
        }
    };
    let submit = cluster.run(
        &dir,
        &[root().join("deploy/slurm/submit.sh").to_str().unwrap()],
    );
    assert!(submit.0, "submit.sh failed: {}", submit.1);
    cluster.wait_until_idle(std::time::Duration::from_secs(600));
    let merged_dir = dir.join("results/plan");
    assert!(
        merged_dir.join("plan.json").is_file(),
        "the merge job wrote no plan; Slurm logs: {}",
        cluster.logs(&dir.join("results/plan-shards"))
    );
    let merged = plan_files(&merged_dir);
    for (file, bytes) in whole {
        assert!(
            merged.get(file) == Some(bytes),
            "{file}: the plan Slurm ran differs from the unsharded plan"
        );
    }
    // Straight to the process's stderr, which the harness does not
    // capture: a person sees that the real path ran.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "ran: {test}: a single-node Slurm ran deploy/slurm/submit.sh; its plan matches the unsharded one"
    );
}

/// A throw-away single-node Slurm cluster: MUNGE, `slurmctld` and `slurmd`
/// with their state, sockets and logs under one folder, stopped on drop.
mod slurm {
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    pub struct Cluster {
        dir: PathBuf,
        daemons: Vec<Child>,
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(6817)
    }

    impl Cluster {
        pub fn start(dir: &Path) -> Result<Cluster, String> {
            let _ = std::fs::remove_dir_all(dir);
            for sub in ["state", "spool", "log", "munge"] {
                std::fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
            }
            let host = Command::new("hostname")
                .arg("-s")
                .output()
                .map_err(|e| e.to_string())?;
            let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
            let user = Command::new("id")
                .arg("-un")
                .output()
                .map_err(|e| e.to_string())?;
            let user = String::from_utf8_lossy(&user.stdout).trim().to_string();
            // The node as slurmd sees it (CPUs, sockets, memory), so it
            // registers without being drained for claiming more.
            let node = Command::new("slurmd")
                .arg("-C")
                .output()
                .map_err(|e| format!("slurmd -C: {e}"))?;
            let node = String::from_utf8_lossy(&node.stdout)
                .lines()
                .find(|l| l.starts_with("NodeName="))
                .ok_or("slurmd -C printed no NodeName line")?
                .to_string();
            let d = dir.display();
            let (ctl_port, node_port) = (free_port(), free_port());
            // A one-node cluster: the node runs the controller and the
            // jobs, with enough CPUs for the array and its merge.
            let conf = format!(
                "ClusterName=pdsimtest\nSlurmctldHost={host}\nSlurmctldPort={ctl_port}\nSlurmdPort={node_port}\n\
                 SlurmUser={user}\nSlurmdUser={user}\nAuthType=auth/munge\nAuthInfo=socket={d}/munge/munge.socket\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
                 SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_CPU_Memory\n\
                 ReturnToService=2\nMpiDefault=none\nSwitchType=switch/none\n\
                 {node} State=UNKNOWN\n\
                 PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP\n"
            );
            std::fs::write(dir.join("slurm.conf"), conf).map_err(|e| e.to_string())?;
            let key = dir.join("munge/munge.key");
            std::fs::write(&key, [7u8; 1024]).map_err(|e| e.to_string())?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400))
                .map_err(|e| e.to_string())?;
            std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o700))
                .map_err(|e| e.to_string())?;
            let mut cluster = Cluster {
                dir: dir.to_path_buf(),
                daemons: Vec::new(),
            };
            let socket = dir.join("munge/munge.socket");
            cluster.spawn(
                "munged",
                &[
                    "--foreground",
                    "--force",
                    &format!("--key-file={}", key.display()),
                    &format!("--socket={}", socket.display()),
                    &format!("--pid-file={}", dir.join("munge/munged.pid").display()),
                    &format!("--log-file={}", dir.join("log/munged.log").display()),
                    &format!("--seed-file={}", dir.join("munge/munged.seed").display()),
                ],
            )?;
            cluster.wait_for(&socket, Duration::from_secs(10))?;
            cluster.spawn("slurmctld", &["-D", "-i"])?;
            std::thread::sleep(Duration::from_millis(500));
            cluster.spawn("slurmd", &["-D"])?;
            // The node registers, then takes jobs.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let out = cluster.command("sinfo", &["-h", "-o", "%t"]).output();
                if let Ok(o) = out
                    && o.status.success()
                    && String::from_utf8_lossy(&o.stdout).trim() == "idle"
                {
                    return Ok(cluster);
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "the node did not become idle within 30 s; {}",
                        cluster.tail("log/slurmctld.log")
                    ));
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }

        fn env(&self, c: &mut Command) {
            c.env("SLURM_CONF", self.dir.join("slurm.conf"));
        }

        fn command(&self, program: &str, args: &[&str]) -> Command {
            let mut c = Command::new(program);
            c.args(args);
            self.env(&mut c);
            c
        }

        fn spawn(&mut self, program: &str, args: &[&str]) -> Result<(), String> {
            let child = self
                .command(program, args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("{program}: {e}"))?;
            self.daemons.push(child);
            Ok(())
        }

        fn wait_for(&self, path: &Path, limit: Duration) -> Result<(), String> {
            let deadline = Instant::now() + limit;
            while !path.exists() {
                if Instant::now() > deadline {
                    return Err(format!("{} did not appear", path.display()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        }

        fn tail(&self, log: &str) -> String {
            let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        }

        /// Runs `sh args` in `dir` with the cluster's configuration and
        /// `dir/bin` first on the PATH; whether it succeeded, and its output.
        pub fn run(&self, dir: &Path, args: &[&str]) -> (bool, String) {
            let path = format!(
                "{}:{}",
                dir.join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let out = self
                .command("sh", args)
                .current_dir(dir)
                .env("PATH", path)
                .output();
            match out {
                Ok(o) => (
                    o.status.success(),
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    ),
                ),
                Err(e) => (false, e.to_string()),
            }
        }

        /// Waits until no job is queued or running.
        pub fn wait_until_idle(&self, limit: Duration) {
            let deadline = Instant::now() + limit;
            loop {
                let out = self
                    .command("squeue", &["-h"])
                    .output()
                    .expect("squeue runs");
                if out.status.success() && String::from_utf8_lossy(&out.stdout).trim().is_empty() {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "Slurm jobs still queued after {limit:?}: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
                std::thread::sleep(Duration::from_millis(500));
            }
        }

        /// The jobs' own logs, for a failure message.
        pub fn logs(&self, dir: &Path) -> String {
            let mut out = self.tail("log/slurmctld.log");
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().ends_with(".out") {
                        out.push_str(&format!(
                            "\n--- {}\n{}",
                            e.path().display(),
                            std::fs::read_to_string(e.path()).unwrap_or_default()
                        ));
                    }
                }
            }
            out
        }
    }

    impl Drop for Cluster {
        fn drop(&mut self) {
            for child in self.daemons.iter_mut().rev() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

//! What one hostile case is (files, special files, command lines) and how a
//! case is stored on disk as a regression fixture and read back.
//!
//! A fixture is a folder:
//! - `args.txt`: one argument per line; a line `----` starts the next
//!   command (the commands run in order in the same folder); a line
//!   starting with `@` is a directive for the current command (`@signal
//!   INT|TERM|KILL MS`, `@agree`, `@unused --FLAG`, `@expect CODE`,
//!   `@says TEXT`: stdout or stderr must hold TEXT, the rest of the line),
//!   `#` starts a comment (`@signal` counts from the moment the staging
//!   folder appears), `@empty` is an empty argument and a leading `\` is
//!   dropped (for an argument that starts with `@`, `#` or `\`). `@ROOT@`
//!   inside an argument is the repository root.
//! - `setup.txt` (optional): special files made before the first command,
//!   one per line: `fifo PATH drain|zeros|feed:FILE|loop:FILE`, `dir PATH`, `symlink
//!   PATH TARGET`, `keep PATH` (a user file or folder that must survive
//!   unchanged), `home PATH` (HOME for the commands), `repeat PATH N TEXT`
//!   (appends TEXT N times; `\n`, `\t`, `\\` and `\xHH` escapes).
//! - every other file: an input, copied into the case folder as it is.

use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sig {
    Int,
    Term,
    Kill,
}

impl Sig {
    pub fn name(&self) -> &'static str {
        match self {
            Sig::Int => "INT",
            Sig::Term => "TERM",
            Sig::Kill => "KILL",
        }
    }
    fn parse(text: &str) -> Option<Sig> {
        match text {
            "INT" => Some(Sig::Int),
            "TERM" => Some(Sig::Term),
            "KILL" => Some(Sig::Kill),
            _ => None,
        }
    }
}

/// What sits on the other end of a FIFO while the commands run.
#[derive(Clone, Debug)]
pub enum FifoEnd {
    /// A reader that discards everything (for a FIFO given as an output).
    Drain,
    /// A writer of endless zero bytes (an input that never ends).
    Zeros,
    /// A writer of one file's bytes, again each time the FIFO is reopened.
    Feed(String),
    /// A writer of one file's bytes over and over, never closing (a line
    /// without end, say).
    Loop(String),
}

#[derive(Clone, Debug)]
pub enum Setup {
    Fifo {
        path: String,
        end: FifoEnd,
    },
    Dir(String),
    Symlink {
        path: String,
        target: String,
    },
    Keep(String),
    Home(String),
    Repeat {
        path: String,
        count: usize,
        text: Vec<u8>,
    },
}

#[derive(Clone, Debug, Default)]
pub struct Step {
    pub args: Vec<String>,
    /// A signal sent this many milliseconds after the command's staging
    /// folder (`.NAME.partial-PID`) appears, that is while it is writing.
    pub signal: Option<(Sig, u64)>,
    /// `validate` before this `run` on the same documents: they must agree.
    pub agree: bool,
    /// Flags that cannot apply here: a successful command must name them.
    pub unused: Vec<String>,
    /// The only acceptable exit code (a BOM-prefixed valid document, say).
    pub expect: Option<i32>,
    /// Text the command's stdout or stderr must hold: what a refusal's
    /// message has to name (the key, the value, the reason).
    pub says: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Case {
    /// What the generator made, for the failure report.
    pub label: String,
    /// The generator's family of the case, for the timing summary.
    pub kind: &'static str,
    pub files: Vec<(String, Vec<u8>)>,
    pub setup: Vec<Setup>,
    pub steps: Vec<Step>,
}

impl Case {
    pub fn file(&mut self, path: &str, bytes: impl Into<Vec<u8>>) {
        let bytes = bytes.into();
        if let Some(slot) = self.files.iter_mut().find(|(p, _)| p == path) {
            slot.1 = bytes;
        } else {
            self.files.push((path.to_string(), bytes));
        }
    }

    pub fn step(&mut self, args: &[&str]) -> &mut Step {
        self.steps.push(Step {
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Step::default()
        });
        self.steps.last_mut().expect("just pushed")
    }

    /// Writes the case as a fixture folder (the format above).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (path, bytes) in &self.files {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(target, bytes)?;
        }
        let mut setup = String::new();
        for s in &self.setup {
            setup.push_str(&match s {
                Setup::Fifo { path, end } => match end {
                    FifoEnd::Drain => format!("fifo {path} drain\n"),
                    FifoEnd::Zeros => format!("fifo {path} zeros\n"),
                    FifoEnd::Feed(file) => format!("fifo {path} feed:{file}\n"),
                    FifoEnd::Loop(file) => format!("fifo {path} loop:{file}\n"),
                },
                Setup::Dir(path) => format!("dir {path}\n"),
                Setup::Symlink { path, target } => format!("symlink {path} {target}\n"),
                Setup::Keep(path) => format!("keep {path}\n"),
                Setup::Home(path) => format!("home {path}\n"),
                Setup::Repeat { path, count, text } => {
                    format!("repeat {path} {count} {}\n", escape(text))
                }
            });
        }
        if !setup.is_empty() {
            std::fs::write(dir.join("setup.txt"), setup)?;
        }
        let mut args = format!("# {}\n", self.label.replace('\n', " "));
        for (i, step) in self.steps.iter().enumerate() {
            if i > 0 {
                args.push_str("----\n");
            }
            if let Some((sig, ms)) = &step.signal {
                args.push_str(&format!("@signal {} {ms}\n", sig.name()));
            }
            if step.agree {
                args.push_str("@agree\n");
            }
            for flag in &step.unused {
                args.push_str(&format!("@unused {flag}\n"));
            }
            if let Some(code) = step.expect {
                args.push_str(&format!("@expect {code}\n"));
            }
            for text in &step.says {
                args.push_str(&format!("@says {text}\n"));
            }
            for a in &step.args {
                if a.is_empty() {
                    args.push_str("@empty\n");
                } else if a.starts_with(['@', '#', '\\']) || a == "----" {
                    args.push_str(&format!("\\{}\n", a.replace('\n', " ")));
                } else {
                    args.push_str(&format!("{}\n", a.replace('\n', " ")));
                }
            }
        }
        std::fs::write(dir.join("args.txt"), args)
    }

    /// Reads a fixture folder back.
    pub fn load(dir: &Path) -> Result<Case, String> {
        let name = dir.display().to_string();
        let args = std::fs::read_to_string(dir.join("args.txt"))
            .map_err(|e| format!("{name}/args.txt: {e}"))?;
        let mut case = Case {
            label: format!("regression fixture {name}"),
            kind: "fixture",
            ..Case::default()
        };
        let mut step = Step::default();
        for line in args.lines() {
            if line == "----" {
                case.steps.push(std::mem::take(&mut step));
            } else if line.starts_with("@ROOT@") {
                step.args.push(line.to_string());
            } else if line.starts_with('#') {
                continue;
            } else if let Some(rest) = line.strip_prefix('\\') {
                step.args.push(rest.to_string());
            } else if line == "@empty" {
                step.args.push(String::new());
            } else if line == "@agree" {
                step.agree = true;
            } else if let Some(flag) = line.strip_prefix("@unused ") {
                step.unused.push(flag.trim().to_string());
            } else if let Some(code) = line.strip_prefix("@expect ") {
                step.expect = Some(
                    code.trim()
                        .parse()
                        .map_err(|_| format!("{name}/args.txt: bad `{line}`"))?,
                );
            } else if let Some(text) = line.strip_prefix("@says ") {
                step.says.push(text.to_string());
            } else if let Some(rest) = line.strip_prefix("@signal ") {
                let mut words = rest.split_whitespace();
                let sig = words.next().and_then(Sig::parse);
                let ms = words.next().and_then(|w| w.parse().ok());
                match (sig, ms) {
                    (Some(sig), Some(ms)) => step.signal = Some((sig, ms)),
                    _ => return Err(format!("{name}/args.txt: bad `{line}`")),
                }
            } else if line.starts_with('@') {
                return Err(format!("{name}/args.txt: unknown directive `{line}`"));
            } else {
                step.args.push(line.to_string());
            }
        }
        case.steps.push(step);
        if let Ok(setup) = std::fs::read_to_string(dir.join("setup.txt")) {
            for line in setup.lines().filter(|l| !l.trim().is_empty()) {
                case.setup.push(
                    parse_setup(line).ok_or_else(|| format!("{name}/setup.txt: bad `{line}`"))?,
                );
            }
        }
        let mut files = Vec::new();
        collect_files(dir, dir, &mut files).map_err(|e| format!("{name}: {e}"))?;
        for (rel, bytes) in files {
            if rel != "args.txt" && rel != "setup.txt" {
                case.files.push((rel, bytes));
            }
        }
        Ok(case)
    }
}

fn parse_setup(line: &str) -> Option<Setup> {
    let (word, rest) = line.split_once(' ')?;
    Some(match word {
        "fifo" => {
            let (path, end) = rest.split_once(' ')?;
            let end = match end {
                "drain" => FifoEnd::Drain,
                "zeros" => FifoEnd::Zeros,
                other => match other.strip_prefix("loop:") {
                    Some(file) => FifoEnd::Loop(file.to_string()),
                    None => FifoEnd::Feed(other.strip_prefix("feed:")?.to_string()),
                },
            };
            Setup::Fifo {
                path: path.to_string(),
                end,
            }
        }
        "dir" => Setup::Dir(rest.to_string()),
        "keep" => Setup::Keep(rest.to_string()),
        "home" => Setup::Home(rest.to_string()),
        "symlink" => {
            let (path, target) = rest.split_once(' ')?;
            Setup::Symlink {
                path: path.to_string(),
                target: target.to_string(),
            }
        }
        "repeat" => {
            let (path, rest) = rest.split_once(' ')?;
            let (count, text) = rest.split_once(' ').unwrap_or((rest, ""));
            Setup::Repeat {
                path: path.to_string(),
                count: count.parse().ok()?,
                text: unescape(text)?,
            }
        }
        _ => return None,
    })
}

fn collect_files(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect_files(base, &path, out)?;
        } else {
            let rel = path
                .strip_prefix(base)
                .expect("under the base")
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read(&path)?));
        }
    }
    Ok(())
}

fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    for &b in bytes {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            match bytes.get(i + 1)? {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    let hex = std::str::from_utf8(bytes.get(i + 2..i + 4)?).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 2;
                }
                _ => return None,
            }
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

    #[test]
    fn escapes_round_trip() {
        let bytes = b"a\n\t\\\x00\xff[".to_vec();
        assert_eq!(unescape(&escape(&bytes)), Some(bytes));
    }
}

//! Router files on disk that cannot be used, through the `pdsim` binary:
//! `validate` and `run` refuse them alike, and `run`'s "see above" has the
//! located reason above it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the pdsim binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A copy of the bundled EPP example whose EndpointPickerConfig is `epp`
/// (bytes, or a folder when `None`), in a fresh folder.
fn case(name: &str, epp: Option<&[u8]>) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("router-inputs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pd")).unwrap();
    std::fs::copy(
        root().join("deployments/1p3d-ep8-epp.yaml"),
        dir.join("d.yaml"),
    )
    .unwrap();
    let config = dir.join("pd/epp-prefix-pd.yaml");
    match epp {
        Some(bytes) => std::fs::write(&config, bytes).unwrap(),
        None => std::fs::create_dir_all(&config).unwrap(),
    }
    dir.join("d.yaml")
}

#[test]
fn an_unusable_epp_config_is_refused_by_validate_and_run_at_its_key_and_line() {
    let not_utf8: &[u8] = b"apiVersion: llm-d.ai/v1alpha1\nkind: \xff\xfe\n";
    let wrong_type: &[u8] = b"apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: queue-scorer\n";
    for (name, bytes, expected) in [
        (
            "not-utf8",
            Some(not_utf8),
            "d.yaml:36: error: router.endpoint_picker_config: ",
        ),
        (
            "folder",
            None,
            "d.yaml:36: error: router.endpoint_picker_config: ",
        ),
        (
            "wrong-type",
            Some(wrong_type),
            "epp-prefix-pd.yaml:7: error: schedulingProfiles[0].plugins: ",
        ),
    ] {
        let deployment = case(name, bytes);
        let deployment = deployment.to_string_lossy();
        let (code, stdout, stderr) = pdsim(&[
            "validate",
            "--scenario",
            "scenarios/4x8-h200.yaml",
            &deployment,
        ]);
        assert_eq!(code, 1, "{name}: {stdout}{stderr}");
        assert!(stdout.contains(expected), "{name}: {stdout}");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("router-inputs-{name}-out"));
        let (code, _, stderr) = pdsim(&[
            "run",
            "--scenario",
            "scenarios/4x8-h200.yaml",
            "--deployment",
            &deployment,
            "--rate",
            "1",
            "--requests",
            "5",
            "--out",
            &out.to_string_lossy(),
        ]);
        assert_eq!(code, 1, "{name}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        let see_above = lines
            .iter()
            .position(|l| l.contains("see above"))
            .unwrap_or_else(|| panic!("{name}: {stderr}"));
        assert!(
            lines[..see_above].iter().any(|l| l.contains(expected)),
            "{name}: the reason is not above the refusal: {stderr}"
        );
        assert!(!out.exists(), "{name}: nothing is written");
    }
}

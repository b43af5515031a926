//! What the cluster's integration tests share.

use pdsim_cluster::{Cluster, MemorySink, Outcome, RequestRecord, run};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};

/// The cluster the documents `s.yaml` (scenario) and `d.yaml` (deployment)
/// lay out, with `extra` files beside them, its router inputs loaded as
/// `pdsim run` loads them; every problem as text.
#[allow(dead_code)]
pub fn build(scenario: &str, deployment: &str, extra: &[(&str, &str)]) -> Result<Cluster, String> {
    build_with_catalog(scenario, deployment, extra, &[])
}

/// The same, with a user catalog folder `cat` searched after the built-in
/// one, holding `catalog` (paths inside it, such as
/// `coefficients/<set>.yaml`).
pub fn build_with_catalog(
    scenario: &str,
    deployment: &str,
    extra: &[(&str, &str)],
    catalog: &[(&str, &str)],
) -> Result<Cluster, String> {
    let mut files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment);
    for (path, text) in extra {
        files = files.with(path, text);
    }
    for (path, text) in catalog {
        files = files.with(&format!("cat/{path}"), text);
    }
    let report = validate(&Request {
        files: &files,
        catalog_dirs: if catalog.is_empty() {
            vec![]
        } else {
            vec!["cat".into()]
        },
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    if !report.valid {
        return Err(format!("{:?}", report.problems));
    }
    let block = report.loaded[0].1.router.as_ref();
    let inputs =
        pdsim_router::check_router_inputs(&files, "d.yaml", block).map_err(|p| format!("{p:?}"))?;
    pdsim_cluster::build_with_router(
        &report.deployments[0],
        report.scenario.as_ref().unwrap(),
        Some(inputs),
    )
    .map_err(|e| format!("{e:?}"))
}

/// `keys` (YAML lines, nested ones indented) as lines under a pool's
/// `engine:` block.
#[allow(dead_code)]
pub fn engine_lines(keys: &str) -> String {
    let mut engine = String::new();
    for line in keys.lines().filter(|l| !l.trim().is_empty()) {
        engine.push_str("      ");
        engine.push_str(line.trim_end());
        engine.push('\n');
    }
    engine
}

/// Runs a Mooncake trace through `cluster` (every invariant checked) and
/// returns its records in arrival order, each required to have completed.
#[allow(dead_code)]
pub fn completed_records(cluster: &Cluster, trace: &str) -> Vec<RequestRecord> {
    let mut source: Box<
        dyn Iterator<Item = Result<pdsim_workload::RequestSpec, pdsim_workload::TraceError>>,
    > = Box::new(pdsim_workload::MooncakeReader::new(
        std::io::Cursor::new(trace.as_bytes()),
        "t.jsonl",
    ));
    let mut sink = MemorySink::default();
    run(cluster, &mut source, 0, true, &mut sink).expect("runs");
    let mut records = sink.records;
    records.sort_by_key(|r| (r.arrival, r.id));
    for r in &records {
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    }
    records
}

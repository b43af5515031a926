//! How long `pdsim validate --resolve` takes on the bundled H200 bundle: a
//! plan sweeps thousands of layouts through this path, so it must stay in
//! the tens of microseconds per deployment.

use criterion::{Criterion, criterion_group, criterion_main};
use pdsim_spec::validate::{Request, validate};

fn bench_validate(c: &mut Criterion) {
    let files = pdsim_benches::h200_bundle();
    c.bench_function("validate_resolve_3_deployments", |b| {
        b.iter(|| {
            let report = validate(&Request {
                files: &files,
                catalog_dirs: vec![],
                scenario: Some("s.yaml".into()),
                documents: vec![
                    "1p3d.yaml".into(),
                    "2p2d.yaml".into(),
                    "colocated.yaml".into(),
                ],
            });
            assert!(report.valid);
            std::hint::black_box(report)
        })
    });
}

criterion_group!(benches, bench_validate);
criterion_main!(benches);

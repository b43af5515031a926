//! Inputs shared by pdsim's benchmarks: the bundled documents, in memory, so
//! a bench measures pdsim and not the disk.

use pdsim_spec::files::MemoryFiles;

/// The bundled 4×8 H200 scenario with its three layouts.
pub fn h200_bundle() -> MemoryFiles {
    MemoryFiles::new()
        .with("s.yaml", include_str!("../../scenarios/4x8-h200.yaml"))
        .with("1p3d.yaml", include_str!("../../deployments/1p3d-ep8.yaml"))
        .with("2p2d.yaml", include_str!("../../deployments/2p2d-ep8.yaml"))
        .with(
            "colocated.yaml",
            include_str!("../../deployments/colocated-tp8.yaml"),
        )
}

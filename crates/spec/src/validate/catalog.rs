//! Field checks of catalog entries (chips, fabrics, storage classes, shapes,
//! coefficient sets), as the BLIS catalog and registry validators run them.

use crate::catalog::{Chip, CoefficientSet, Fabric, Shape, StorageClass};
use crate::load::Source;
use crate::problem::Problems;
use crate::validate::limits::{self, check_f64};

fn positive(source: &Source, problems: &mut Problems, path: &str, value: f64) {
    if !value.is_finite() || value <= 0.0 {
        problems.push(source.error(
            path,
            "catalog-value-range",
            format!(
                "{path} must be a finite number above 0, found {}",
                crate::problem::number(value)
            ),
        ));
    }
}

/// A rate of a catalog entry, checked against the span any real device
/// lies in: above 0, at least `floor` and at most `ceiling` (in the key's
/// own unit). A value outside is a typo or a value in the wrong unit, and
/// one far below the floor makes every step, transfer or store take so
/// long that a run simulates for years (and writes a row a second); it is
/// refused where it is read instead.
fn rate(
    source: &Source,
    problems: &mut Problems,
    path: &str,
    value: f64,
    (floor, ceiling): (f64, f64),
    unit: &str,
) {
    if !value.is_finite() || value <= 0.0 {
        positive(source, problems, path, value);
    } else if !(floor..=ceiling).contains(&value) {
        // Far outside the span, the plain form runs to hundreds of digits.
        let value = if (1e-3..1e9).contains(&value) {
            format!("{value}")
        } else {
            format!("{value:e}")
        };
        problems.push(source.error(
            path,
            "catalog-value-range",
            format!(
                "{path} must lie between {floor} and {ceiling} {unit}, the span of real devices; \
                 found {value} (a value in another unit?)"
            ),
        ));
    }
}

/// The spans of [`rate`]: a compute rate from a tenth of a TFLOP/s (below
/// any accelerator vLLM runs on) to an exaFLOP/s per chip, and bandwidths
/// from about one 1 GbE link (0.1 GB/s) or one PCIe 3.0 lane (1 GB/s) to a
/// thousand times today's fastest.
pub const TFLOPS_SPAN: (f64, f64) = (0.1, 1e6);
pub const HBM_TBS_SPAN: (f64, f64) = (0.01, 1e3);
pub const LINK_GBPS_SPAN: (f64, f64) = (1.0, 1e6);
pub const NETWORK_GBPS_SPAN: (f64, f64) = (0.1, 1e6);
/// Storage from an SD card's 10 MB/s to 100 TB/s.
pub const STORAGE_MBS_SPAN: (f64, f64) = (10.0, 1e8);

fn done(problems: Problems) -> Result<(), Problems> {
    if problems.has_errors() {
        Err(problems)
    } else {
        Ok(())
    }
}

pub fn check_chip(source: &Source, chip: &Chip) -> Result<(), Problems> {
    let mut problems = Problems::new();
    if !matches!(chip.provenance.as_str(), "vendor_spec" | "derived") {
        problems.push(source.error(
            "Provenance",
            "catalog-provenance",
            "Provenance must be vendor_spec or derived",
        ));
    }
    rate(
        source,
        &mut problems,
        "TFlopsPeak",
        chip.t_flops_peak,
        TFLOPS_SPAN,
        "TFLOP/s",
    );
    rate(
        source,
        &mut problems,
        "BwPeakTBs",
        chip.bw_peak_tbs,
        HBM_TBS_SPAN,
        "TB/s",
    );
    positive(source, &mut problems, "MemoryGiB", chip.memory_gib);
    check_f64(
        source,
        &mut problems,
        "MemoryGiB",
        chip.memory_gib,
        limits::MAX_CHIP_MEMORY_GIB,
    );
    rate(
        source,
        &mut problems,
        "IntraNodeBwGBps",
        chip.intra_node_bw_gbps,
        LINK_GBPS_SPAN,
        "GB/s",
    );
    if chip.sm_count < 1 {
        problems.push(source.error(
            "SMCount",
            "catalog-value-range",
            "SMCount must be at least 1",
        ));
    }
    if let Some(fp8) = chip.t_flops_fp8 {
        rate(
            source,
            &mut problems,
            "TFlopsFP8",
            fp8,
            TFLOPS_SPAN,
            "TFLOP/s",
        );
        if fp8 <= chip.t_flops_peak {
            problems.push(source.error(
                "TFlopsFP8",
                "catalog-value-range",
                "TFlopsFP8 must exceed TFlopsPeak",
            ));
        }
    }
    for (key, value, span, unit) in [
        ("TFlopsNVFP4", chip.t_flops_nvfp4, TFLOPS_SPAN, "TFLOP/s"),
        (
            "IntraRackBwGBps",
            chip.intra_rack_bw_gbps,
            LINK_GBPS_SPAN,
            "GB/s",
        ),
        ("HostLinkGBps", chip.host_link_gbps, LINK_GBPS_SPAN, "GB/s"),
    ] {
        if let Some(value) = value {
            rate(source, &mut problems, key, value, span, unit);
        }
    }
    if let (Some(rack), Some(node)) = (chip.gpus_per_rack, chip.gpus_per_node)
        && (node < 1 || rack < 1 || rack % node != 0)
    {
        problems.push(source.error(
            "GPUsPerRack",
            "catalog-value-range",
            "GPUsPerRack must be a positive multiple of GPUsPerNode",
        ));
    }
    if chip.intra_rack_bw_gbps.is_some() && chip.gpus_per_rack.is_none() {
        problems.push(source.error(
            "IntraRackBwGBps",
            "catalog-value-range",
            "IntraRackBwGBps needs GPUsPerRack",
        ));
    }
    done(problems)
}

pub fn check_fabric(source: &Source, fabric: &Fabric) -> Result<(), Problems> {
    let mut problems = Problems::new();
    if !matches!(fabric.provenance.as_str(), "vendor_spec" | "derived") {
        problems.push(source.error(
            "Provenance",
            "catalog-provenance",
            "Provenance must be vendor_spec or derived",
        ));
    }
    rate(
        source,
        &mut problems,
        "InterNodeBwGBps",
        fabric.inter_node_bw_gbps,
        NETWORK_GBPS_SPAN,
        "GB/s",
    );
    done(problems)
}

pub fn check_storage(source: &Source, name: &str, class: &StorageClass) -> Result<(), Problems> {
    let mut problems = Problems::new();
    rate(
        source,
        &mut problems,
        &format!("{name}.read_bandwidth_mb_s"),
        class.read_bandwidth_mb_s,
        STORAGE_MBS_SPAN,
        "MB/s",
    );
    rate(
        source,
        &mut problems,
        &format!("{name}.write_bandwidth_mb_s"),
        class.write_bandwidth_mb_s,
        STORAGE_MBS_SPAN,
        "MB/s",
    );
    positive(
        source,
        &mut problems,
        &format!("{name}.base_latency_us"),
        class.base_latency_us,
    );
    done(problems)
}

pub fn check_shape(source: &Source, shape: &Shape) -> Result<(), Problems> {
    let mut problems = Problems::new();
    for (key, dist) in [("prompt", &shape.prompt), ("output", &shape.output)] {
        // Lengths no model serves: a stream drawing them would build
        // prompts of billions of tokens.
        let max = limits::MAX_TOKENS as f64;
        check_f64(
            source,
            &mut problems,
            &format!("{key}.tokens"),
            dist.tokens,
            max,
        );
        for (field, value) in [
            ("tokens_stdev", dist.tokens_stdev),
            ("tokens_min", dist.tokens_min as f64),
            ("tokens_max", dist.tokens_max as f64),
        ] {
            check_f64(source, &mut problems, &format!("{key}.{field}"), value, max);
        }
        if !dist.tokens.is_finite() || dist.tokens < 1.0 {
            problems.push(source.error(
                &format!("{key}.tokens"),
                "catalog-value-range",
                "the mean must be at least 1",
            ));
        }
        if !dist.tokens_stdev.is_finite() || dist.tokens_stdev < 0.0 {
            problems.push(source.error(
                &format!("{key}.tokens_stdev"),
                "catalog-value-range",
                "the deviation must be finite and not negative",
            ));
        }
        let min = dist.tokens_min as f64;
        let max = if dist.tokens_max == 0 {
            f64::INFINITY
        } else {
            dist.tokens_max as f64
        };
        if dist.tokens_min < 0 || dist.tokens_max < 0 || !(min..=max).contains(&dist.tokens) {
            problems.push(source.error(
                &format!("{key}.tokens"),
                "catalog-value-range",
                "the mean must lie in [tokens_min, tokens_max]",
            ));
        }
    }
    limits::check_int(
        source,
        &mut problems,
        "prefix_tokens",
        shape.prefix_tokens,
        limits::MAX_TOKENS,
    );
    if shape.prefix_tokens < 0 || shape.prefix_tokens as f64 > shape.prompt.tokens {
        problems.push(source.error(
            "prefix_tokens",
            "catalog-value-range",
            "prefix_tokens must lie in [0, prompt.tokens]",
        ));
    }
    done(problems)
}

/// Units a coefficient may carry: BLIS's list plus pdsim's `us_per_kernel`.
pub const UNITS: &[&str] = &[
    "dimensionless",
    "us_per_layer",
    "us_per_request",
    "us_per_step",
    "us_per_hop",
    "bytes_per_us",
    "bytes_per_rank",
    "us_per_load",
    "us_per_transfer",
    "tokens",
    "sm_count",
    "us_per_token",
    "us_per_kernel",
];

pub fn check_coefficient_set(source: &Source, set: &CoefficientSet) -> Result<(), Problems> {
    let mut problems = Problems::new();
    if set.kind != "CoefficientSet" {
        problems.push(source.error("kind", "coefficient-kind", "kind must be `CoefficientSet`"));
    }
    for (i, entry) in set.coefficients.iter().enumerate() {
        if entry.len() != 1 {
            problems.push(source.error(
                &format!("coefficients[{i}]"),
                "coefficient-shape",
                "each entry is a single-key mapping",
            ));
        }
        for (name, c) in entry {
            let at = |key: &str| format!("coefficients[{i}].{name}.{key}");
            if !crate::coefficient_names::read_by_pdsim(name) {
                let nearest =
                    crate::names::nearest(name, crate::coefficient_names::READ.iter().copied())
                        .map(|n| format!(" (did you mean `{n}`?)"))
                        .unwrap_or_default();
                problems.push(source.error(
                    &format!("coefficients[{i}].{name}"),
                    "coefficient-unread",
                    format!(
                        "pdsim reads no coefficient named `{name}`{nearest}: its cost model has no term it would set, so the entry would change nothing in a run; remove it (README, \"The cost models\", lists the names pdsim reads)"
                    ),
                ));
            }
            if !c.value.is_finite() {
                problems.push(source.error(
                    &at("value"),
                    "coefficient-value",
                    "value must be finite",
                ));
            }
            if !UNITS.contains(&c.units.as_str()) {
                problems.push(source.error(
                    &at("units"),
                    "coefficient-units",
                    format!("unknown units `{}`; one of {}", c.units, UNITS.join(", ")),
                ));
            }
            let methods = [
                "measured",
                "literature",
                "vendor_spec",
                "copied",
                "assumed",
                "not_charged",
            ];
            if !methods.contains(&c.method.as_str()) {
                problems.push(source.error(
                    &at("method"),
                    "coefficient-method",
                    format!("method must be one of {}", methods.join(", ")),
                ));
            }
            if (c.method == "not_charged") != (c.value == 0.0) {
                problems.push(source.error(
                    &at("value"),
                    "coefficient-value",
                    "value is 0 exactly when method is not_charged",
                ));
            }
            if c.fitted && c.method != "measured" {
                problems.push(source.error(
                    &at("fitted"),
                    "coefficient-fitted",
                    "fitted may be true only with method measured",
                ));
            }
            if c.method != "measured" && c.rationale.as_deref().is_none_or(|r| r.trim().is_empty())
            {
                problems.push(source.error(
                    &at("rationale"),
                    "coefficient-rationale",
                    format!("method {} needs a rationale", c.method),
                ));
            }
            if c.method == "copied" && c.copied_from.is_none() {
                problems.push(source.error(
                    &at("copied_from"),
                    "coefficient-copied-from",
                    "method copied needs copied_from",
                ));
            }
            if let Some(ci) = &c.ci95
                && (ci.len() != 2 || !(ci[0] <= c.value && c.value <= ci[1]))
            {
                problems.push(source.error(
                    &at("ci95"),
                    "coefficient-ci95",
                    "ci95 is [lo, hi] and must contain value",
                ));
            }
            for key in c.scope.keys() {
                if !["hardware", "model", "tp", "ep", "nodes_spanned"].contains(&key.as_str()) {
                    problems.push(source.error(
                        &at(&format!("scope.{key}")),
                        "coefficient-scope",
                        "scope keys are hardware, model, tp, ep and nodes_spanned",
                    ));
                }
            }
        }
    }
    done(problems)
}

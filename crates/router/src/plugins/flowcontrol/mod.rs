//! `pkg/epp/framework/plugins/flowcontrol/`: the flow controller's policy
//! plugins. The usage-limit policies are here; the fairness and ordering
//! policies and the saturation detectors are still in
//! [`crate::flowcontrol`].

pub mod usagelimits;

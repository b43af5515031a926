//! `pkg/epp/framework/plugins/flowcontrol/`: the flow controller's policy
//! plugins — fairness among a band's flows, ordering within a flow, the
//! saturation detectors and the usage-limit policies. The controller that
//! runs them is [`crate::flowcontrol`].

pub mod fairness;
pub mod ordering;
pub mod saturationdetector;
pub mod usagelimits;

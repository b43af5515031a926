//! `pkg/epp/framework/plugins/requestcontrol/`: what runs around the
//! scheduling cycle — the data producers so far.

pub(crate) mod dataproducer;

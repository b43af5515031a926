//! `pkg/epp/framework/plugins/requestcontrol/`: what runs around the
//! scheduling cycle: the data producers, and the request-attribute
//! reporter (a response plugin that changes no decision).

pub(crate) mod dataproducer;
pub(crate) mod requestattributereporter;

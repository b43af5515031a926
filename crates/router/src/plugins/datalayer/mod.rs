//! `pkg/epp/framework/plugins/datalayer/`: what the EPP learns about each
//! endpoint: which scraped series it reads (`metrics`), and what it learns
//! apart from them. pdsim's endpoints are fixed for
//! a run, so an extractor runs once, at build, over each endpoint's pod
//! labels.

pub(crate) mod metrics;
pub(crate) mod topology;

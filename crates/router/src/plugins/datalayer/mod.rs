//! `pkg/epp/framework/plugins/datalayer/`: what the EPP learns about each
//! endpoint apart from its scraped metrics. pdsim's endpoints are fixed for
//! a run, so an extractor runs once, at build, over each endpoint's pod
//! labels.

pub(crate) mod topology;

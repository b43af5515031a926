//! `scheduling/util/`: code several scheduling plugins share.

pub(crate) mod sessionaffinity;
pub(crate) mod topology;

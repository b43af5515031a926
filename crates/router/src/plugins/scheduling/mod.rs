//! `pkg/epp/framework/plugins/scheduling/`: what runs in a scheduling
//! profile (scorers, pickers) and the profile handlers' deciders.

pub(crate) mod filter;
pub(crate) mod picker;
pub(crate) mod profilehandler;
pub(crate) mod scorer;
pub(crate) mod util;

//! `pkg/epp/framework/plugins/scheduling/`: what runs in a scheduling
//! profile (filters, scorers, pickers), the profile handlers with their
//! deciders, and what several of them share (`util/`).

pub(crate) mod filter;
pub(crate) mod picker;
pub(crate) mod profilehandler;
pub(crate) mod scorer;
pub(crate) mod util;

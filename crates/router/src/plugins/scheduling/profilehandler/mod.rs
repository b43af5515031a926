//! `scheduling/profilehandler/`: the profile handlers' deciders so far; the
//! handlers themselves still run in [`crate::cycle`].

pub(crate) mod disagg;

//! `requestcontrol/dataproducer/`: producers that compute per-request
//! data the scheduling plugins consume. The in-flight load producer's
//! counters still live in [`crate::cycle`].

pub(crate) mod approximateprefix;
pub(crate) mod preciseprefixcache;

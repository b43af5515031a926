//! `requestcontrol/dataproducer/`: producers that compute per-request
//! data the scheduling plugins consume, and update it at PreRequest and
//! as responses stream back.

pub(crate) mod approximateprefix;
pub(crate) mod burstprefix;
pub(crate) mod inflightload;
pub(crate) mod preciseprefixcache;
pub(crate) mod prefixhash;
pub(crate) mod sessionid;
pub(crate) mod tokenizer;

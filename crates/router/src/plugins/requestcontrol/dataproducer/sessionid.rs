//! session-id-producer (`requestcontrol/dataproducer/sessionid/
//! producer.go`): it copies a session header or cookie into the request's
//! `SessionID` attribute, which no plugin at ebab687 reads; pdsim's
//! requests carry no headers, so it produces nothing, as the EPP does for
//! such a request. Only its factory's checks run.

use crate::plugins::Checks;
use serde_yaml::Value;

/// `Factory`: exactly one of `headerName` and `cookieName`, after
/// trimming.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    let set = |key: &str| {
        !parameters
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .is_empty()
    };
    match (set("headerName"), set("cookieName")) {
        (false, false) => c.bad(
            "headerName",
            "'session-id-producer' requires exactly one of headerName or cookieName to be set",
        ),
        (true, true) => c.bad(
            "cookieName",
            "'session-id-producer' requires exactly one of headerName or cookieName to be set, not both",
        ),
        _ => {}
    }
}

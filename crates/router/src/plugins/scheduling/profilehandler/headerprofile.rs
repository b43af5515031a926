//! header-profile-handler
//! (`scheduling/profilehandler/headerprofile/header_profile_handler.go`).

use super::{Picked, ProfileHandler, Profiles};
use crate::config::Plugin;
use crate::cycle::RequestContext;
use crate::plugins::Checks;
use serde_yaml::Value;

/// One profile per request. A lone profile always runs; otherwise the one
/// the header names (trimmed), or `defaultProfile` when the header is
/// absent or blank. A name matching no profile runs nothing, and the
/// request fails (the EPP logs it and answers 429). pdsim's requests carry
/// no headers, so with several profiles every request runs
/// `defaultProfile`, or fails if none has its name.
#[derive(Clone, Debug)]
pub(crate) struct HeaderProfileHandler {
    /// `headerName` trimmed and lower-cased (the EPP stores header keys
    /// so); empty means `EPP-Profile`.
    header: String,
    /// `defaultProfile` trimmed; empty means `decode`.
    default: String,
    /// The profile when there is exactly one.
    lone: Option<usize>,
}

impl HeaderProfileHandler {
    /// `NewHeaderProfileHandler`.
    pub fn new(plugin: &Plugin, names: &[String]) -> HeaderProfileHandler {
        let p = &plugin.parameters;
        let get = |key: &str, default: &str| {
            let v = p.get(key).and_then(Value::as_str).unwrap_or("").trim();
            if v.is_empty() {
                default.to_string()
            } else {
                v.to_string()
            }
        };
        HeaderProfileHandler {
            header: get("headerName", "EPP-Profile").to_lowercase(),
            default: get("defaultProfile", "decode"),
            lone: (names.len() == 1).then_some(0),
        }
    }
}

impl ProfileHandler for HeaderProfileHandler {
    fn pick(&self, request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let profile = match self.lone {
            Some(profile) => profile,
            None => {
                let value = request.headers.get(&self.header).map_or("", |v| v.trim());
                let name = if value.is_empty() {
                    self.default.as_str()
                } else {
                    value
                };
                profiles.index_of(name)?
            }
        };
        let target = profiles.run(profile, None)?;
        Some(Picked {
            primary: profile,
            target,
            other: None,
        })
    }
}

/// `HeaderProfileHandlerFactory`: two strings, any value accepted (an
/// unknown profile fails per request).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    for key in ["headerName", "defaultProfile"] {
        if let Some(v) = parameters.get(key)
            && !(v.is_string() || v.is_null())
        {
            c.bad(key, format!("{key} must be a string"));
        }
    }
}

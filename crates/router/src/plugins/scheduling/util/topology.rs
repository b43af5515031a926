//! Topology comparison shared by topology-affinity-filter and -scorer
//! (`scheduling/util/topology/level.go`, `peer.go`).

use crate::plugins::datalayer::topology::Topology;

/// A topology tier, tightest to loosest; same host implies the rest
/// (`topoutil.Level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Host,
    Rack,
    Zone,
    Region,
    /// Peer and candidate share no tier.
    None,
}

impl Level {
    /// A configured level (`ParseLevel`): `host`, `rack`, `zone` or
    /// `region`, exactly.
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "host" => Some(Level::Host),
            "rack" => Some(Level::Rack),
            "zone" => Some(Level::Zone),
            "region" => Some(Level::Region),
            _ => None,
        }
    }
}

/// The tightest tier at which peer and candidate share a non-empty, equal
/// value (`Compare`): an empty value never matches, not even another
/// empty one, and a missing attribute on either side shares nothing.
pub(crate) fn compare(peer: Option<&Topology>, candidate: Option<&Topology>) -> Level {
    let (Some(p), Some(c)) = (peer, candidate) else {
        return Level::None;
    };
    let matches = |a: &str, b: &str| !a.is_empty() && a == b;
    if matches(&p.hostname, &c.hostname) {
        Level::Host
    } else if matches(&p.rack, &c.rack) {
        Level::Rack
    } else if matches(&p.zone, &c.zone) {
        Level::Zone
    } else if matches(&p.region, &c.region) {
        Level::Region
    } else {
        Level::None
    }
}

/// The peer's topology (`PeerTopology`): the attribute of the endpoint the
/// disagg handler published as `peer-endpoint` for this profile, when
/// there is one and it carries the attribute.
pub(crate) fn peer_topology(
    peer: Option<usize>,
    topology: &[Option<Topology>],
) -> Option<&Topology> {
    topology.get(peer?)?.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(hostname: &str, rack: &str, zone: &str, region: &str) -> Topology {
        Topology {
            hostname: hostname.into(),
            rack: rack.into(),
            zone: zone.into(),
            region: region.into(),
        }
    }

    #[test]
    fn compare_takes_the_tightest_shared_tier_and_never_matches_empty() {
        let peer = t("h1", "r1", "z1", "eu");
        assert_eq!(
            compare(Some(&peer), Some(&t("h1", "", "", ""))),
            Level::Host
        );
        assert_eq!(
            compare(Some(&peer), Some(&t("h2", "r1", "z9", ""))),
            Level::Rack
        );
        assert_eq!(
            compare(Some(&peer), Some(&t("h2", "r2", "z1", "eu"))),
            Level::Zone
        );
        assert_eq!(
            compare(Some(&peer), Some(&t("h2", "r2", "z2", "eu"))),
            Level::Region
        );
        assert_eq!(
            compare(Some(&peer), Some(&t("h2", "r2", "z2", "us"))),
            Level::None
        );
        // Empty against empty is no match (`matches`).
        let bare = t("", "", "z1", "");
        assert_eq!(
            compare(Some(&bare), Some(&t("", "", "z1", ""))),
            Level::Zone
        );
        assert_eq!(
            compare(Some(&t("", "", "", "eu")), Some(&t("", "", "", ""))),
            Level::None
        );
        assert_eq!(compare(None, Some(&peer)), Level::None);
        assert_eq!(compare(Some(&peer), None), Level::None);
    }

    #[test]
    fn levels_parse_exactly_and_order_tightest_first() {
        assert_eq!(Level::parse("rack"), Some(Level::Rack));
        assert_eq!(Level::parse("Host"), None);
        assert_eq!(Level::parse(""), None);
        assert!(Level::Host < Level::Rack && Level::Region < Level::None);
    }

    #[test]
    fn the_peer_is_read_only_when_published_and_stamped() {
        let topology = vec![Some(t("h", "", "", "")), None];
        assert_eq!(peer_topology(Some(0), &topology), topology[0].as_ref());
        assert_eq!(peer_topology(Some(1), &topology), None);
        assert_eq!(peer_topology(None, &topology), None);
    }
}

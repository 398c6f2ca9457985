//! Version negotiation: from a broker's ApiVersions answer, pick per API the highest version
//! both sides speak (protocol guide, "Versioning and Compatibility"; KIP-35).

use std::collections::HashMap;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

use crate::api::api_versions::ApiVersionsResponse;
use crate::error::ProtoError;
use crate::message::Api;

/// The version ranges a broker advertised, by API key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerVersions {
    ranges: HashMap<i16, VersionRange>,
}

impl BrokerVersions {
    /// From an ApiVersions response.
    pub fn from_response(response: &ApiVersionsResponse) -> Self {
        let ranges = response
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    VersionRange {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        Self { ranges }
    }

    /// From explicit ranges (tests, fake brokers).
    pub fn from_ranges(ranges: impl IntoIterator<Item = (ApiKey, VersionRange)>) -> Self {
        Self {
            ranges: ranges.into_iter().map(|(k, r)| (k as i16, r)).collect(),
        }
    }

    /// What the broker advertised for `api`, if it listed it.
    pub fn range(&self, api: ApiKey) -> Option<VersionRange> {
        self.ranges.get(&(api as i16)).copied()
    }

    /// The highest version of `A` both kdirect and the broker speak.
    pub fn negotiate<A: Api>(&self) -> Result<i16, ProtoError> {
        negotiate(A::KEY, A::VERSIONS, self.range(A::KEY))
    }
}

/// The highest version in both `ours` and `theirs`; a typed error naming the API and both
/// ranges when there is none.
pub fn negotiate(
    api: ApiKey,
    ours: VersionRange,
    theirs: Option<VersionRange>,
) -> Result<i16, ProtoError> {
    let no_common = || ProtoError::NoCommonVersion { api, ours, theirs };
    let theirs_r = theirs.ok_or_else(no_common)?;
    let common = ours.intersect(&theirs_r);
    if common.is_empty() {
        return Err(no_common());
    }
    Ok(common.max)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
mod tests {
    use super::*;
    use crate::api::fetch::Fetch;
    use crate::api::list_offsets::ListOffsets;

    fn r(min: i16, max: i16) -> VersionRange {
        VersionRange { min, max }
    }

    #[test]
    fn picks_highest_common() {
        // librdkafka 2.12's mock cluster advertises Fetch 0..16 and ListOffsets 0..7.
        let b = BrokerVersions::from_ranges([
            (ApiKey::Fetch, r(0, 16)),
            (ApiKey::ListOffsets, r(0, 7)),
        ]);
        assert_eq!(b.negotiate::<Fetch>().unwrap(), 16);
        assert_eq!(b.negotiate::<ListOffsets>().unwrap(), 7);
    }

    #[test]
    fn no_overlap_names_api_and_both_ranges() {
        let b = BrokerVersions::from_ranges([(ApiKey::Fetch, r(0, 3))]);
        let e = b.negotiate::<Fetch>().unwrap_err();
        assert_eq!(
            e,
            ProtoError::NoCommonVersion {
                api: ApiKey::Fetch,
                ours: Fetch::VERSIONS_RANGE,
                theirs: Some(r(0, 3))
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("Fetch") && msg.contains("0..3") && msg.contains("4..17"),
            "{msg}"
        );
        let missing = b.negotiate::<ListOffsets>().unwrap_err().to_string();
        assert!(missing.contains("does not support it"), "{missing}");
    }
}

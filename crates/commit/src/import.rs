//! Offsets other programs wrote, read in their own layouts, for `kdirect offsets import`: the
//! layouts the Spark Streaming articles kdirect grew from keep a DStream's offsets in.
//!
//! | `--from` | layout read |
//! | --- | --- |
//! | `redis://…` | hash `offset:<topic>:<group>`, field = partition, value = next offset (the key is a template) |
//! | `postgres://…`, `mysql://…`, `sqlite:…` | a table `(topic, group_id, partition, offset, timestamp)`: the newest row per partition (names configurable) |
//! | `zk://…` | `/consumers/<group>/offsets/<topic>/<partition>` holding the offset as text (the old Kafka consumer's) |
//! | `kafka` | the group's committed offsets in `__consumer_offsets` |
//!
//! Each reader only reads; what the positions are checked against (the log) and where they
//! are written is the caller's.

use std::sync::Arc;

use kdirect_engine::cluster::Cluster;

use crate::{redact, OffsetStore, Positions, StoreError, StoreErrorKind};

/// Where to import from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// A Redis hash per topic and group.
    Redis {
        /// `redis://…`.
        url: String,
        /// The key, with `{topic}` and `{group}` replaced (default `offset:{topic}:{group}`).
        key: String,
    },
    /// A SQL table with one row per partition (or several: the newest wins).
    Sql {
        /// `postgres://…`, `mysql://…`, `mariadb://…` or `sqlite:PATH`.
        url: String,
        /// The table and its columns.
        layout: SqlLayout,
    },
    /// ZooKeeper, the old consumer's znodes.
    ZooKeeper(String),
    /// The group's offsets in Kafka.
    Kafka,
}

/// The default Redis key template.
pub const REDIS_KEY: &str = "offset:{topic}:{group}";

/// A SQL offsets table's name and columns, as the articles name them by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlLayout {
    /// The table (default `offsets`).
    pub table: String,
    /// The topic column (default `topic`).
    pub topic: String,
    /// The group column (default `group_id`).
    pub group: String,
    /// The partition column (default `partition`).
    pub partition: String,
    /// The offset column, the next offset to read (default `offset`).
    pub offset: String,
    /// The column that orders a partition's rows, newest first (default `timestamp`); `None`:
    /// a partition must have one row.
    pub timestamp: Option<String>,
}

impl Default for SqlLayout {
    fn default() -> Self {
        SqlLayout {
            table: "offsets".to_owned(),
            topic: "topic".to_owned(),
            group: "group_id".to_owned(),
            partition: "partition".to_owned(),
            offset: "offset".to_owned(),
            timestamp: Some("timestamp".to_owned()),
        }
    }
}

impl Source {
    /// Parses `--from`: `redis://…`, `postgres://…`, `mysql://…`, `mariadb://…`, `sqlite:…`,
    /// `zk://…` or `kafka`, with the SQL layout and Redis key given separately.
    pub fn parse(from: &str, layout: SqlLayout, redis_key: &str) -> Result<Source, StoreError> {
        if from == "kafka" {
            return Ok(Source::Kafka);
        }
        if from.starts_with("redis://") || from.starts_with("rediss://") {
            return Ok(Source::Redis {
                url: from.to_owned(),
                key: redis_key.to_owned(),
            });
        }
        if from.starts_with("zk://") || from.starts_with("zookeeper://") {
            return Ok(Source::ZooKeeper(from.to_owned()));
        }
        let sql = [
            "postgres://",
            "postgresql://",
            "mysql://",
            "mariadb://",
            "sqlite:",
        ];
        if sql.iter().any(|p| from.starts_with(p)) {
            return Ok(Source::Sql {
                url: from.to_owned(),
                layout,
            });
        }
        Err(StoreErrorKind::Spec {
            spec: redact(from),
            reason: "--from takes redis://…, postgres://…, mysql://…, sqlite:PATH, zk://… or \
                     kafka"
                .to_owned(),
        }
        .into())
    }

    /// A short name for messages (passwords removed).
    pub fn describe(&self, topic: &str, group: &str) -> String {
        match self {
            Source::Redis { url, key } => {
                format!("redis {} key {}", redact(url), redis_key(key, topic, group))
            }
            Source::Sql { url, layout } => format!("{} table {}", redact(url), layout.table),
            Source::ZooKeeper(url) => {
                format!(
                    "zookeeper {} /consumers/{group}/offsets/{topic}",
                    redact(url)
                )
            }
            Source::Kafka => format!("kafka group '{group}'"),
        }
    }

    /// Reads `topic`'s positions for `group`.
    pub async fn read(
        &self,
        topic: &str,
        group: &str,
        cluster: Option<Arc<Cluster>>,
    ) -> Result<Positions, StoreError> {
        match self {
            #[cfg(feature = "redis")]
            Source::Redis { url, key } => {
                crate::redis::read_hash(url, &redis_key(key, topic, group), topic).await
            }
            #[cfg(feature = "sql")]
            Source::Sql { url, layout } => {
                crate::sql::read_offsets_table(url, layout, topic, group).await
            }
            #[cfg(feature = "zookeeper")]
            Source::ZooKeeper(url) => {
                let zk = crate::zookeeper::ZooKeeperStore::connect(url, group).await?;
                Ok(zk.load(&[topic.to_owned()]).await?.positions)
            }
            Source::Kafka => {
                let cluster = cluster.ok_or_else(|| StoreErrorKind::NeedsCluster {
                    spec: "kafka".to_owned(),
                })?;
                let store = crate::kafka::KafkaGroupStore::new(cluster, group);
                Ok(store.load(&[topic.to_owned()]).await?.positions)
            }
            #[allow(unreachable_patterns)]
            other => Err(StoreErrorKind::FeatureDisabled {
                spec: other.describe(topic, group),
                feature: match other {
                    Source::Redis { .. } => "redis",
                    Source::Sql { .. } => "sql",
                    _ => "zookeeper",
                },
            }
            .into()),
        }
    }
}

fn redis_key(template: &str, topic: &str, group: &str) -> String {
    template.replace("{topic}", topic).replace("{group}", group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        let l = SqlLayout::default();
        assert_eq!(
            Source::parse("kafka", l.clone(), REDIS_KEY).unwrap(),
            Source::Kafka
        );
        assert!(matches!(
            Source::parse("mariadb://u:p@h/db", l.clone(), REDIS_KEY).unwrap(),
            Source::Sql { .. }
        ));
        assert!(matches!(
            Source::parse("zk://h:1/x", l.clone(), REDIS_KEY).unwrap(),
            Source::ZooKeeper(_)
        ));
        let r = Source::parse("redis://h:6379/0", l.clone(), REDIS_KEY).unwrap();
        assert_eq!(
            r.describe("t", "g"),
            "redis redis://h:6379/0 key offset:t:g"
        );
        let e = Source::parse("s3://u:secret@b/x", l, REDIS_KEY).unwrap_err();
        assert!(e.to_string().contains("--from takes"), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

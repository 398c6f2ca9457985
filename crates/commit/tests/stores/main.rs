//! Integration tests of every store against the real thing: the file system, PostgreSQL,
//! MariaDB, Redis, ZooKeeper, HBase, an S3-compatible server, Azurite, HDFS (each skipped, with a printed reason, only when its variable is unset) and
//! librdkafka's mock cluster for Kafka group offsets. One binary, helpers in `support`.
#[cfg(feature = "object-store")]
mod azure;
mod checkpoint;
mod common;
#[cfg(feature = "hbase")]
mod hbase;
#[cfg(feature = "hdfs")]
mod hdfs;
mod kafka;
#[cfg(feature = "object-store")]
mod object;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;
mod support;
#[cfg(feature = "zookeeper")]
mod zookeeper;

//! `kdirect-commit`: where offsets live.
//!
//! This crate will hold the one `OffsetStore` trait and its strategies (a checkpoint directory,
//! Kafka consumer-group offsets, external SQL/Redis stores). It has nothing yet: the trait and the
//! stores are the subject of a later issue, and no placeholder API is published before then.
//!
//! Direction: `proto` ← `engine` ← `commit` ← `kdirect`. This crate may use the engine's broker
//! connection (for the Kafka-group store); the engine never imports a store.

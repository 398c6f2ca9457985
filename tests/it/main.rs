//! Integration tests, compiled as one binary. Real peers first: librdkafka's mock cluster
//! (through the `rdkafka` dev-dependency) is an independent implementation of the protocol.
mod capabilities;
mod chunked;
mod cli;
mod cluster;
mod decode;
mod demo;
mod engine_fake;
mod fake_broker;
mod fetch;
mod group;
mod hostile;
mod import;
mod kill;
mod lakehouse;
mod migrate;
mod output;
mod progress;
mod real_kafka;
mod secure;
mod secure_fake;
mod spark;
mod stream;
mod stream_store;
mod support;
mod truncation;
mod wire;

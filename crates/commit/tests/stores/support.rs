//! Helpers shared by the store tests: kdirect's test support (one copy for every test suite).
pub use kdirect_test_support::{rt, service, tmpdir, unique};

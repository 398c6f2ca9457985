//! Fuzzes the SASL/GSSAPI exchange's state machine (`kdirect_engine::sasl::gssapi`) with the
//! broker's tokens: never a panic, never more context rounds than its bound, never a token
//! over the size bound handed to the GSS library, an answer only to a well-formed offer
//! (checked inside `fuzz_exchange`'s mechanism), and every sequence ends (tokens run out, an
//! error, or done). The GSS-API library itself (MIT's `gss_init_sec_context`/`gss_unwrap`)
//! is not in the loop: its stand-in completes the context after the input's first byte of
//! rounds and unwraps a token to itself, so the input also writes the security-layer offer.
//!
//! Input: one byte of rounds (1..=255; the bound is 4), then tokens, each a big-endian `u16`
//! length (0xffff: a token one byte over the 64 KiB bound) and its bytes.
#![no_main]

use kdirect_engine::sasl::gssapi::{fuzz_exchange, MAX_TOKEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&rounds, mut rest)) = data.split_first() else {
        return;
    };
    let big = vec![0u8; MAX_TOKEN + 1];
    let mut tokens: Vec<&[u8]> = Vec::new();
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let len = usize::from(u16::from_be_bytes(*len));
        if len == 0xffff {
            tokens.push(&big);
            rest = tail;
            continue;
        }
        let n = len.min(tail.len());
        tokens.push(&tail[..n]);
        rest = &tail[n..];
    }
    let ended = fuzz_exchange(rounds, &tokens);
    if let Ok((sent, done)) = ended {
        // Each token the exchange sent answered the broker's previous one (or started it).
        assert!(sent <= tokens.len() + 1);
        assert!(!done || sent >= 2);
    }
});

#![allow(unreachable_pub)]

//! In-process integration tests: a real server on port 0, spoken to with the protocol codec.
//! Numbered modules give a preferred reading order.

/// As in the binary: huge array-length claims in hostile frames must cost address space, not
/// memory (see src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod harness;
mod requests;
mod t10_protocol;
mod t20_produce_fetch;
mod t25_store;
mod t30_topics;
mod t40_restart;
mod t50_groups;

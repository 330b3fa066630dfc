//! Any bytes as a request frame (after the size prefix): the header parse and the body decode of
//! every API corral serves must return an error, never panic or abort.

#![no_main]

use libfuzzer_sys::fuzz_target;

// As in the server: oversized array-length claims cost address space, not memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fuzz_target!(|data: &[u8]| {
    let _ = corral::decode_request(bytes::Bytes::copy_from_slice(data));
});

//! Any bytes as a produced record batch: validation must return an error, never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = corral::record_batch::validate(data) {
        let _ = header.last_sequence();
        let _ = corral::record_batch::record_timestamps(data);
    }
});

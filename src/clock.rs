//! Wall-clock time in Kafka's unit (milliseconds since the Unix epoch).
//!
//! Only the edges of the system read the clock; the cores take `now` as an argument.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

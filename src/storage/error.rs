//! Storage errors and their one mapping to Kafka error codes.

use kafka_protocol::ResponseError;

use super::producer_state::SequenceError;
use crate::record_batch::BatchError;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("record batch of {size} bytes exceeds max.message.bytes ({max})")]
    MessageTooLarge { size: usize, max: u32 },
    #[error("offset {requested} is outside the log [{start}, {end}]")]
    OffsetOutOfRange { requested: i64, start: i64, end: i64 },
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    #[error("transactional record batches are not supported")]
    Transactional,
    #[error("clients may not write control batches")]
    ControlBatch,
    /// Records without a key, by their index in the batch (each also in the response's
    /// `record_errors`, KIP-467).
    #[error("{}", no_key_message(partition, records))]
    NoKey { partition: String, records: Vec<usize> },
    /// DeleteRecords on a topic whose cleanup.policy has no "delete" (Kafka's wording).
    #[error("Records of partition {partition} can not be deleted due to the configured policy")]
    DeleteNotAllowed { partition: String },
}

/// Each record refused for having no key: its index in the batch, and why (Kafka's wording).
fn no_key_errors(partition: &str, records: &[usize]) -> Vec<(i32, String)> {
    let why = format!("Compacted topic cannot accept message without key in topic partition {partition}");
    records.iter().map(|&i| (i as i32, why.clone())).collect()
}

/// The error message of a batch with records without a key: the first three, as Kafka writes it.
fn no_key_message(partition: &str, records: &[usize]) -> String {
    let errors = no_key_errors(partition, records);
    let first: Vec<String> = errors.iter().take(3).map(|(i, why)| format!("RecordError(batchIndex={i}, message='{why}')")).collect();
    format!(
        "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
        errors.len(),
        first.join(", ")
    )
}

impl StorageError {
    /// The records of the batch that were refused, for the response's `record_errors`.
    pub fn record_errors(&self) -> Vec<(i32, String)> {
        match self {
            StorageError::NoKey { partition, records } => no_key_errors(partition, records),
            _ => Vec::new(),
        }
    }

    /// The Kafka error code a client receives for this error.
    pub fn error_code(&self) -> ResponseError {
        match self {
            StorageError::Io(_) => ResponseError::KafkaStorageError,
            StorageError::Batch(b) => match b {
                BatchError::CrcMismatch { .. } | BatchError::Truncated { .. } | BatchError::InvalidCompression(_) => {
                    ResponseError::CorruptMessage
                }
                BatchError::UnsupportedMagic(_) | BatchError::Invalid(_) | BatchError::Decompress(_) => ResponseError::InvalidRecord,
            },
            StorageError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            StorageError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            StorageError::Sequence(SequenceError::OutOfOrder { .. }) => ResponseError::OutOfOrderSequenceNumber,
            StorageError::Sequence(SequenceError::FencedEpoch { .. }) => ResponseError::InvalidProducerEpoch,
            StorageError::Transactional | StorageError::ControlBatch | StorageError::NoKey { .. } => ResponseError::InvalidRecord,
            StorageError::DeleteNotAllowed { .. } => ResponseError::PolicyViolation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        let crc = StorageError::Batch(BatchError::CrcMismatch { stored: 1, computed: 2 });
        assert_eq!(crc.error_code(), ResponseError::CorruptMessage);
        let oor = StorageError::OffsetOutOfRange { requested: 9, start: 0, end: 3 };
        assert_eq!(oor.error_code(), ResponseError::OffsetOutOfRange);
        let seq = StorageError::Sequence(SequenceError::OutOfOrder { producer_id: 1, epoch: 0, last: 1, got: 5 });
        assert_eq!(seq.error_code(), ResponseError::OutOfOrderSequenceNumber);
        assert_eq!(StorageError::MessageTooLarge { size: 2, max: 1 }.error_code(), ResponseError::MessageTooLarge);
    }
}

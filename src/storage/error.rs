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
    /// Kafka's wording.
    #[error("Compacted topic cannot accept message without key in topic partition {partition}")]
    NoKey { partition: String },
    /// DeleteRecords on a topic whose cleanup.policy has no "delete" (Kafka's wording).
    #[error("Records of partition {partition} can not be deleted due to the configured policy")]
    DeleteNotAllowed { partition: String },
}

impl StorageError {
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

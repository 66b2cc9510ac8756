//! The client's one error type.
//!
//! Broker-side failures keep their Kafka error code (`Error::Kafka`), so a
//! caller can match on `NOT_LEADER_OR_FOLLOWER` the way the Java client
//! matches on its exception classes. Everything the client itself detects
//! (a dead socket, a timeout, a response it cannot decode) has its own
//! variant; nothing here panics on a bad response.

use std::fmt;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;

/// A Kafka error code with its name, displayed the way Kafka spells it
/// (`NOT_LEADER_OR_FOLLOWER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaCode(pub ResponseError);

impl KafkaCode {
    /// The code as a `KafkaCode`, `None` for 0 (no error).
    pub fn from_code(code: i16) -> Option<Self> {
        ResponseError::try_from_code(code).map(Self)
    }

    pub fn code(self) -> i16 {
        self.0.code()
    }

    /// Retriable by Kafka's definition (`RetriableException` in Java).
    pub fn is_retriable(self) -> bool {
        self.0.is_retriable()
    }

    /// Whether this error means our cached metadata is stale: the leader
    /// moved, the topic is not known yet, or its leader is being elected.
    pub fn invalidates_metadata(self) -> bool {
        matches!(
            self.0,
            ResponseError::NotLeaderOrFollower
                | ResponseError::UnknownTopicOrPartition
                | ResponseError::LeaderNotAvailable
                | ResponseError::FencedLeaderEpoch
                | ResponseError::UnknownLeaderEpoch
                | ResponseError::NotController
                | ResponseError::KafkaStorageError
                | ResponseError::UnknownTopicId
                | ResponseError::BrokerNotAvailable
                | ResponseError::ReplicaNotAvailable
        )
    }
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let camel = self.0.to_string();
        if let ResponseError::Unknown(code) = self.0 {
            return write!(f, "UNKNOWN_ERROR_CODE({code})");
        }
        // `NotLeaderOrFollower` -> `NOT_LEADER_OR_FOLLOWER`.
        for (i, c) in camel.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                f.write_str("_")?;
            }
            write!(f, "{}", c.to_ascii_uppercase())?;
        }
        Ok(())
    }
}

/// Everything that can go wrong talking to a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker answered with an error code.
    #[error("{code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka { code: KafkaCode, message: Option<String> },
    /// Connecting to or talking with a broker failed at the socket level.
    #[error("{addr}: {source}")]
    Io { addr: String, source: std::io::Error },
    /// The connection closed while requests were waiting for their responses.
    #[error("connection to {addr} closed")]
    Disconnected { addr: String },
    /// No response within `request.timeout.ms`.
    #[error("{api:?} request to {addr} timed out after {}ms", timeout.as_millis())]
    Timeout { api: ApiKey, addr: String, timeout: Duration },
    /// The broker does not serve any version of `api` this client speaks.
    #[error("broker {addr} does not support {api:?} (versions this client speaks: {min}..={max})")]
    UnsupportedApi { api: ApiKey, addr: String, min: i16, max: i16 },
    /// A response that could not be decoded or does not match its request.
    #[error("bad response from {addr}: {reason}")]
    Protocol { addr: String, reason: String },
    /// None of the bootstrap servers (or known brokers) could be reached.
    #[error("no broker reachable: {0}")]
    NoBrokerReachable(String),
    /// Retries ran out or the deadline passed on an operation.
    #[error("{what} failed after {attempts} attempts: {last}")]
    RetriesExhausted { what: String, attempts: u32, last: Box<Error> },
    /// A client configuration value is invalid.
    #[error("invalid client config: {0}")]
    Config(String),
    /// A request that cannot be built (empty, too large, unknown topic name…).
    #[error("{0}")]
    InvalidRequest(String),
    /// The producer was closed before the record could be sent.
    #[error("producer closed")]
    ProducerClosed,
}

impl Error {
    /// An `Error::Kafka` from a response's code and message, `None` for 0.
    pub fn from_code(code: i16, message: Option<&str>) -> Option<Self> {
        KafkaCode::from_code(code).map(|code| Self::Kafka { code, message: message.map(str::to_owned) })
    }

    /// The Kafka error code, if this is a broker-side error.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            Self::Kafka { code, .. } => Some(*code),
            Self::RetriesExhausted { last, .. } => last.kafka_code(),
            _ => None,
        }
    }

    /// Whether trying again (possibly after a metadata refresh) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Kafka { code, .. } => code.is_retriable(),
            Self::Io { .. } | Self::Disconnected { .. } | Self::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether this error means the cached metadata is stale.
    pub fn invalidates_metadata(&self) -> bool {
        match self {
            Self::Kafka { code, .. } => code.invalidates_metadata(),
            Self::Io { .. } | Self::Disconnected { .. } => true,
            _ => false,
        }
    }
}

/// Each record of a failed batch gets its own copy of the batch's error.
impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Self::Kafka { code, message } => Self::Kafka { code: *code, message: message.clone() },
            Self::Io { addr, source } => Self::Io {
                addr: addr.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Self::Disconnected { addr } => Self::Disconnected { addr: addr.clone() },
            Self::Timeout { api, addr, timeout } => {
                Self::Timeout { api: *api, addr: addr.clone(), timeout: *timeout }
            }
            Self::UnsupportedApi { api, addr, min, max } => {
                Self::UnsupportedApi { api: *api, addr: addr.clone(), min: *min, max: *max }
            }
            Self::Protocol { addr, reason } => Self::Protocol { addr: addr.clone(), reason: reason.clone() },
            Self::NoBrokerReachable(why) => Self::NoBrokerReachable(why.clone()),
            Self::RetriesExhausted { what, attempts, last } => {
                Self::RetriesExhausted { what: what.clone(), attempts: *attempts, last: last.clone() }
            }
            Self::Config(why) => Self::Config(why.clone()),
            Self::InvalidRequest(why) => Self::InvalidRequest(why.clone()),
            Self::ProducerClosed => Self::ProducerClosed,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_read_like_kafkas() {
        let code = KafkaCode::from_code(6).unwrap();
        assert_eq!(code.to_string(), "NOT_LEADER_OR_FOLLOWER");
        assert!(code.invalidates_metadata());
        assert_eq!(KafkaCode::from_code(36).unwrap().to_string(), "TOPIC_ALREADY_EXISTS");
        assert_eq!(KafkaCode::from_code(-42).unwrap().to_string(), "UNKNOWN_ERROR_CODE(-42)");
        assert!(KafkaCode::from_code(0).is_none());
        let error = Error::from_code(36, Some("Topic 'a' already exists.")).unwrap();
        assert_eq!(error.to_string(), "TOPIC_ALREADY_EXISTS: Topic 'a' already exists.");
    }
}

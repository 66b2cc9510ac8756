//! KRaft metadata records in Kafka's own schemas (KIP-631).
//!
//! The record types are generated from Kafka's JSON schema files in
//! `crates/metadata/schemas/` by `strom-metadata-codegen` into
//! `generated.rs`, which is checked in and must not be edited by hand:
//!
//! - one struct per record type (`TopicRecord`, `PartitionRecord`, …) and per
//!   struct nested in one, with typed fields, Kafka's defaults and the
//!   per-version field layout, tagged fields included;
//! - [`MetadataRecord`], the enum over all record types;
//! - [`wire`], Kafka's flexible-version field encoding they are built on.
//!
//! A record in the metadata log is framed as Kafka's `MetadataRecordSerde`
//! frames it: unsigned varints for the frame version (1), the record type
//! (the schema's apiKey) and the record version, then the record's fields.

#[rustfmt::skip]
mod generated;
pub mod wire;

#[cfg(test)]
mod tests;

use bytes::BytesMut;

pub use generated::*;
pub use wire::{DecodeError, EncodeError, RawTaggedField};

use wire::{put_uvarint, Reader};

/// The only frame version Kafka writes and reads; 0 was the pre-release
/// format of Kafka 2.8.
pub const FRAME_VERSION: u32 = 1;

impl MetadataRecord {
    /// Decodes one framed record value, returning the record and its version.
    /// The value must hold exactly one record.
    pub fn decode_frame(value: &[u8]) -> Result<(Self, i16), DecodeError> {
        let mut r = Reader::new(value);
        let frame_version = r.uvarint()?;
        if frame_version != FRAME_VERSION {
            return Err(DecodeError::UnknownFrameVersion(frame_version));
        }
        let record_type = frame_short(&mut r, "type")? as u16;
        let version = frame_short(&mut r, "version")?;
        let (record, lowest, highest) =
            Self::schema(record_type).ok_or(DecodeError::UnknownRecordType(record_type))?;
        if !(lowest..=highest).contains(&version) {
            return Err(DecodeError::UnsupportedVersion { record, version });
        }
        let decoded = Self::read_body(record_type, &mut r, version)?;
        match r.remaining() {
            0 => Ok((decoded, version)),
            len => Err(DecodeError::TrailingBytes { record_type, len }),
        }
    }

    /// Appends the record framed at `version` to `out`; on error `out` is
    /// left as it was.
    pub fn encode_frame(&self, version: i16, out: &mut BytesMut) -> Result<(), EncodeError> {
        let (lowest, highest) = self.versions();
        if !(lowest..=highest).contains(&version) {
            return Err(EncodeError::UnsupportedVersion { record: self.name(), version });
        }
        let start = out.len();
        put_uvarint(out, FRAME_VERSION);
        put_uvarint(out, self.record_type().into());
        put_uvarint(out, version as u32);
        self.write_body(out, version).inspect_err(|_| out.truncate(start))
    }
}

/// Kafka reads the record type and version as varints that must fit a short.
fn frame_short(r: &mut Reader<'_>, what: &'static str) -> Result<i16, DecodeError> {
    i16::try_from(r.uvarint()?).map_err(|_| DecodeError::FrameValueTooLarge(what))
}

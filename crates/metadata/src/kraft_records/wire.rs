//! Kafka's flexible-version encoding of message fields, the runtime of the
//! generated record types.
//!
//! Every metadata record is flexible from version 0, so strings, bytes and
//! arrays are compact (an unsigned varint holding length + 1, with 0 meaning
//! null) and every struct ends with a tagged-field section: a count, then
//! `tag, size, value` entries in ascending tag order.
//!
//! Decoding treats its input as hostile: every read is bounds-checked, and a
//! declared length is checked against the bytes left before anything is
//! allocated, so an allocation never exceeds the size of the input.

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// Kafka rejects strings longer than a Java `short` in every version.
const STRING_LEN_MAX: usize = 0x7fff;
/// Kafka sizes bytes and arrays with a Java `int`.
const COLLECTION_LEN_MAX: usize = i32::MAX as usize - 1;

/// A record value that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the record ends early")]
    Truncated,
    #[error("an unsigned varint is longer than 5 bytes")]
    VarintTooLong,
    #[error("unknown frame version {0} (only frame version 1 is supported)")]
    UnknownFrameVersion(u32),
    #[error("the {0} in the frame is larger than 32767")]
    FrameValueTooLarge(&'static str),
    #[error("unknown metadata record type {0}")]
    UnknownRecordType(u16),
    #[error("{record} has no version {version}")]
    UnsupportedVersion { record: &'static str, version: i16 },
    #[error("non-nullable field {0} was serialized as null")]
    NullField(&'static str),
    #[error("string field {field} has invalid length {len}")]
    StringTooLong { field: &'static str, len: usize },
    #[error("string field {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    #[error("field {field} declares {len} elements but only {remaining} bytes remain")]
    LengthBeyondInput { field: &'static str, len: usize, remaining: usize },
    #[error("tag {tag} is not valid for version {version}")]
    TagNotValid { tag: u32, version: i16 },
    #[error("tagged field {field} has {unread} byte(s) beyond its value")]
    TaggedFieldTooLong { field: &'static str, unread: usize },
    #[error("found {len} byte(s) of garbage after record type {record_type}")]
    TrailingBytes { record_type: u16, len: usize },
}

/// A record that cannot be written at the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{record} has no version {version}")]
    UnsupportedVersion { record: &'static str, version: i16 },
    #[error("attempted to write a non-default {field} at version {version}")]
    NonDefaultField { field: &'static str, version: i16 },
    #[error("field {field} is null but not nullable at version {version}")]
    NullField { field: &'static str, version: i16 },
    #[error("field {field} is {len} long, over the maximum of {max}")]
    TooLong { field: &'static str, len: usize, max: usize },
}

/// A tagged field this version of Strom does not know, kept so that
/// re-encoding a record writes it back unchanged (as Kafka does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    /// The field's tag.
    pub tag: u32,
    /// The field's encoded value.
    pub data: Bytes,
}

impl RawTaggedField {
    pub(super) fn new(tag: u32, data: Reader<'_>) -> Self {
        Self { tag, data: Bytes::copy_from_slice(data.buf) }
    }
}

/// A bounds-checked cursor over the bytes of one record.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.buf.split_at(len);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Kafka's unsigned varint (storage's codec), holding an int: at most 5 bytes.
    pub fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let window = &self.buf[..self.buf.len().min(5)];
        match strom_storage::batch::read_uvarint(window) {
            Some((value, used)) => {
                self.take(used)?;
                u32::try_from(value).map_err(|_| DecodeError::VarintTooLong)
            }
            None if window.len() == 5 => Err(DecodeError::VarintTooLong),
            None => Err(DecodeError::Truncated),
        }
    }

    /// A compact length: `None` for null, else the length, which must fit in
    /// the bytes left (every element takes at least one byte).
    fn compact_len(&mut self, field: &'static str) -> Result<Option<usize>, DecodeError> {
        let Some(len) = (self.uvarint()? as usize).checked_sub(1) else {
            return Ok(None);
        };
        if len > self.remaining() {
            return Err(DecodeError::LengthBeyondInput { field, len, remaining: self.remaining() });
        }
        Ok(Some(len))
    }

    /// One entry of a tagged-field section: its tag and a reader over its value.
    pub fn tagged_field(&mut self) -> Result<(u32, Reader<'a>), DecodeError> {
        let tag = self.uvarint()?;
        let size = self.uvarint()? as usize;
        Ok((tag, Reader::new(self.take(size)?)))
    }

    /// Reads a tagged field's whole value.
    pub fn read_tagged<T: Wire>(mut self, version: i16, field: &'static str) -> Result<T, DecodeError> {
        let value = T::read(&mut self, version, field)?;
        self.finish_tagged(field)?;
        Ok(value)
    }

    /// Reads a nullable tagged field's whole value.
    pub fn read_tagged_nullable<T: Compact>(
        mut self,
        version: i16,
        nullable: bool,
        field: &'static str,
    ) -> Result<Option<T>, DecodeError> {
        let value = read_nullable(&mut self, version, nullable, field)?;
        self.finish_tagged(field)?;
        Ok(value)
    }

    // A size that disagrees with the value is corruption, not padding.
    fn finish_tagged(&self, field: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            unread => Err(DecodeError::TaggedFieldTooLong { field, unread }),
        }
    }

    /// Skips a tagged-field section, keeping the entries (for structs whose
    /// schema has no tagged fields).
    pub fn unknown_tagged_fields(&mut self) -> Result<Vec<RawTaggedField>, DecodeError> {
        let mut fields = Vec::new();
        for _ in 0..self.uvarint()? {
            let (tag, data) = self.tagged_field()?;
            fields.push(RawTaggedField::new(tag, data));
        }
        Ok(fields)
    }
}

/// Appends Kafka's unsigned varint (storage's codec).
pub fn put_uvarint(out: &mut BytesMut, value: u32) {
    strom_storage::records::write_uvarint(u64::from(value), out);
}

fn put_compact_len(
    out: &mut BytesMut,
    len: usize,
    max: usize,
    field: &'static str,
) -> Result<(), EncodeError> {
    if len > max {
        return Err(EncodeError::TooLong { field, len, max });
    }
    put_uvarint(out, len as u32 + 1);
    Ok(())
}

/// A field type with Kafka's flexible-version encoding.
pub trait Wire: Sized {
    /// The fewest bytes a value takes, to reject an array whose declared
    /// length cannot fit in the bytes left.
    const MIN_ENCODED_LEN: usize = 1;

    /// Reads a value of `version`; `field` names it in errors.
    fn read(r: &mut Reader<'_>, version: i16, field: &'static str) -> Result<Self, DecodeError>;

    /// Appends the value encoded at `version`; `field` names it in errors.
    fn write(&self, out: &mut BytesMut, version: i16, field: &'static str) -> Result<(), EncodeError>;
}

/// A compact type (string, bytes, array): its length prefix doubles as the
/// null marker, so it can be nullable.
pub trait Compact: Wire {
    /// Reads the value after its length prefix.
    fn read_body(
        r: &mut Reader<'_>,
        len: usize,
        version: i16,
        field: &'static str,
    ) -> Result<Self, DecodeError>;
}

fn read_compact<T: Compact>(r: &mut Reader<'_>, version: i16, field: &'static str) -> Result<T, DecodeError> {
    match r.compact_len(field)? {
        Some(len) => T::read_body(r, len, version, field),
        None => Err(DecodeError::NullField(field)),
    }
}

/// Reads a field that may be null; `nullable` says whether this version allows it.
pub fn read_nullable<T: Compact>(
    r: &mut Reader<'_>,
    version: i16,
    nullable: bool,
    field: &'static str,
) -> Result<Option<T>, DecodeError> {
    match r.compact_len(field)? {
        Some(len) => T::read_body(r, len, version, field).map(Some),
        None if nullable => Ok(None),
        None => Err(DecodeError::NullField(field)),
    }
}

/// Writes a field that may be null; `nullable` says whether this version allows it.
pub fn write_nullable<T: Compact>(
    value: &Option<T>,
    out: &mut BytesMut,
    version: i16,
    nullable: bool,
    field: &'static str,
) -> Result<(), EncodeError> {
    match value {
        Some(value) => value.write(out, version, field),
        None if nullable => {
            put_uvarint(out, 0);
            Ok(())
        }
        None => Err(EncodeError::NullField { field, version }),
    }
}

macro_rules! fixed_width {
    ($($ty:ty, $put:ident;)*) => {$(
        impl Wire for $ty {
            const MIN_ENCODED_LEN: usize = std::mem::size_of::<$ty>();

            fn read(r: &mut Reader<'_>, _: i16, _: &'static str) -> Result<Self, DecodeError> {
                Ok(<$ty>::from_be_bytes(r.array()?))
            }
            fn write(&self, out: &mut BytesMut, _: i16, _: &'static str) -> Result<(), EncodeError> {
                out.$put(*self);
                Ok(())
            }
        }
    )*};
}

fixed_width! {
    i8, put_i8;
    i16, put_i16;
    u16, put_u16;
    i32, put_i32;
    i64, put_i64;
    f64, put_f64;
}

impl Wire for bool {
    fn read(r: &mut Reader<'_>, _: i16, _: &'static str) -> Result<Self, DecodeError> {
        // As Kafka: any non-zero byte is true.
        Ok(r.array::<1>()?[0] != 0)
    }
    fn write(&self, out: &mut BytesMut, _: i16, _: &'static str) -> Result<(), EncodeError> {
        out.put_u8(u8::from(*self));
        Ok(())
    }
}

impl Wire for Uuid {
    const MIN_ENCODED_LEN: usize = 16;

    fn read(r: &mut Reader<'_>, _: i16, _: &'static str) -> Result<Self, DecodeError> {
        Ok(Uuid::from_bytes(r.array()?))
    }
    fn write(&self, out: &mut BytesMut, _: i16, _: &'static str) -> Result<(), EncodeError> {
        out.put_slice(self.as_bytes());
        Ok(())
    }
}

impl Wire for String {
    fn read(r: &mut Reader<'_>, version: i16, field: &'static str) -> Result<Self, DecodeError> {
        read_compact(r, version, field)
    }
    fn write(&self, out: &mut BytesMut, _: i16, field: &'static str) -> Result<(), EncodeError> {
        put_compact_len(out, self.len(), STRING_LEN_MAX, field)?;
        out.put_slice(self.as_bytes());
        Ok(())
    }
}

impl Compact for String {
    fn read_body(r: &mut Reader<'_>, len: usize, _: i16, field: &'static str) -> Result<Self, DecodeError> {
        if len > STRING_LEN_MAX {
            return Err(DecodeError::StringTooLong { field, len });
        }
        let bytes = r.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::InvalidUtf8(field))
    }
}

impl Wire for Bytes {
    fn read(r: &mut Reader<'_>, version: i16, field: &'static str) -> Result<Self, DecodeError> {
        read_compact(r, version, field)
    }
    fn write(&self, out: &mut BytesMut, _: i16, field: &'static str) -> Result<(), EncodeError> {
        put_compact_len(out, self.len(), COLLECTION_LEN_MAX, field)?;
        out.put_slice(self);
        Ok(())
    }
}

impl Compact for Bytes {
    fn read_body(r: &mut Reader<'_>, len: usize, _: i16, _: &'static str) -> Result<Self, DecodeError> {
        Ok(Bytes::copy_from_slice(r.take(len)?))
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn read(r: &mut Reader<'_>, version: i16, field: &'static str) -> Result<Self, DecodeError> {
        read_compact(r, version, field)
    }
    fn write(&self, out: &mut BytesMut, version: i16, field: &'static str) -> Result<(), EncodeError> {
        put_compact_len(out, self.len(), COLLECTION_LEN_MAX, field)?;
        self.iter().try_for_each(|element| element.write(out, version, field))
    }
}

impl<T: Wire> Compact for Vec<T> {
    fn read_body(
        r: &mut Reader<'_>,
        len: usize,
        version: i16,
        field: &'static str,
    ) -> Result<Self, DecodeError> {
        let remaining = r.remaining();
        if len.saturating_mul(T::MIN_ENCODED_LEN) > remaining {
            return Err(DecodeError::LengthBeyondInput { field, len, remaining });
        }
        let mut elements = Vec::with_capacity(len);
        for _ in 0..len {
            elements.push(T::read(r, version, field)?);
        }
        Ok(elements)
    }
}

/// Collects a struct's tagged fields, then writes the section with the
/// unknown ones merged in, all in ascending tag order.
pub struct TaggedFieldsWriter {
    version: i16,
    fields: Vec<(u32, BytesMut)>,
}

impl TaggedFieldsWriter {
    /// A writer for a struct encoded at `version`.
    pub fn new(version: i16) -> Self {
        Self { version, fields: Vec::new() }
    }

    /// Adds a known tagged field's value.
    pub fn add<T: Wire>(&mut self, tag: u32, value: &T, field: &'static str) -> Result<(), EncodeError> {
        let mut data = BytesMut::new();
        value.write(&mut data, self.version, field)?;
        self.fields.push((tag, data));
        Ok(())
    }

    /// Appends the section: the count, then `tag, size, value` entries.
    pub fn finish(self, out: &mut BytesMut, unknown: &[RawTaggedField]) -> Result<(), EncodeError> {
        let known = self.fields.iter().map(|(tag, data)| (*tag, &data[..]));
        let unknown = unknown.iter().map(|raw| (raw.tag, &raw.data[..]));
        let mut all: Vec<(u32, &[u8])> = known.chain(unknown).collect();
        // Stable: a known field goes before an unknown one with its tag.
        all.sort_by_key(|(tag, _)| *tag);
        put_uvarint(out, all.len() as u32);
        for (tag, data) in all {
            let size = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong {
                field: "tagged field",
                len: data.len(),
                max: u32::MAX as usize,
            })?;
            put_uvarint(out, tag);
            put_uvarint(out, size);
            out.put_slice(data);
        }
        Ok(())
    }
}

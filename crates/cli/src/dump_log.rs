//! `strom dump-log`: prints segment files the way Kafka's `kafka-dump-log.sh`
//! (DumpLogSegments) does, with its flags and line formats, so an operator's
//! habits and scripts carry over.
//!
//! - `.log`: a line per batch; with `--deep-iteration` a `| offset: …` line
//!   per record, with `--print-data-log` its key and payload too;
//!   `--cluster-metadata-decoder` shows the payloads of `__cluster_metadata`
//!   as the KIP-631 records they are, by record type and version.
//! - `.index`, `.timeindex`: a line per entry, each checked against the
//!   `.log` beside it (`--verify-index-only` only checks);
//!   `--index-sanity-check` runs the check a broker runs when it loads them.
//! - `.snapshot` (producer state) and `.txnindex` (aborted transactions), in
//!   Kafka's formats.
//! - `.checkpoint`: a KIP-630 metadata snapshot, batches as in a `.log`,
//!   its header, footer, `kraft.version` and voters control records shown
//!   as Kafka's JSON.
//!
//! Files are read as streams, a batch at a time, and never opened for
//! writing, so the segments of a running broker can be dumped. What is wrong
//! with a file goes to stderr, in Kafka's words where Kafka reports it, and
//! makes the exit status 1.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use strom_metadata::kraft_records::MetadataRecord;
use strom_storage::batch::{
    self, i16_at, i32_at, i64_at, BatchHeader, TimestampType, HEADER_LEN, LOG_OVERHEAD, MAGIC_V2,
};
use strom_storage::index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
use strom_storage::records::{records_body, RecordHeader, RecordView, Records};

#[derive(clap::Args, Debug, Default)]
#[command(after_help = "Exits with status 1 when a file is missing or unreadable, or damaged: \
    an invalid batch, bytes after the last whole batch, an index entry that disagrees with its log.")]
pub struct DumpLogArgs {
    /// The data and index files to dump: a comma separated list, or the flag repeated.
    #[arg(long, required = true, value_delimiter = ',', value_name = "FILE1,FILE2,...")]
    files: Vec<PathBuf>,
    /// Print each record's key, headers and payload; implies --deep-iteration.
    #[arg(long)]
    print_data_log: bool,
    /// Decode payloads as cluster metadata records (KIP-631); implies --print-data-log.
    #[arg(long)]
    cluster_metadata_decoder: bool,
    /// Print every record of every batch, not just the batches.
    #[arg(long)]
    deep_iteration: bool,
    /// Leave out the metadata of records (and so control records) when printing them.
    #[arg(long)]
    skip_record_metadata: bool,
    /// Check index entries against the log without printing them.
    #[arg(long)]
    verify_index_only: bool,
    /// Only run the check a broker runs on an index when it loads it.
    #[arg(long)]
    index_sanity_check: bool,
    /// Read at most this many bytes of each .log file (whole batches only).
    #[arg(long, value_name = "SIZE")]
    max_bytes: Option<u64>,
}

impl DumpLogArgs {
    fn deep(&self) -> bool {
        self.deep_iteration || self.print_data()
    }

    fn print_data(&self) -> bool {
        self.print_data_log || self.cluster_metadata_decoder
    }
}

/// Dumps every file to stdout; exits with status 1 when any was unreadable or damaged.
pub fn run(args: DumpLogArgs) -> anyhow::Result<()> {
    let mut dumper = Dumper::new(&args, BufWriter::new(io::stdout().lock()), io::stderr().lock());
    match dumper.dump_all(&args.files) {
        Ok(()) => {}
        // The reader went away (`| head`): nothing left to do.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if dumper.failed {
        std::process::exit(1);
    }
    Ok(())
}

/// Why dumping one file stopped.
#[derive(Debug)]
enum Failure {
    /// Writing the output failed: nothing more can be done.
    Output(io::Error),
    /// The file cannot be read or is damaged beyond the point reached.
    File(String),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Self::Output(e)
    }
}

fn unreadable(path: &Path, e: io::Error) -> Failure {
    Failure::File(format!("cannot read {}: {e}", path.display()))
}

struct Dumper<'a, W: Write, E: Write> {
    args: &'a DumpLogArgs,
    out: W,
    err: E,
    /// Reports printed after every file is dumped, as Kafka does.
    findings: Vec<String>,
    failed: bool,
}

impl<'a, W: Write, E: Write> Dumper<'a, W, E> {
    fn new(args: &'a DumpLogArgs, out: W, err: E) -> Self {
        Self { args, out, err, findings: Vec::new(), failed: false }
    }

    fn dump_all(&mut self, files: &[PathBuf]) -> io::Result<()> {
        for path in files {
            writeln!(self.out, "Dumping {}", path.display())?;
            match self.dump_file(path) {
                Ok(()) => {}
                Err(Failure::Output(e)) => return Err(e),
                Err(Failure::File(message)) => {
                    self.out.flush()?;
                    writeln!(self.err, "strom dump-log: {message}")?;
                    self.failed = true;
                }
            }
        }
        self.out.flush()?;
        for finding in &self.findings {
            writeln!(self.err, "{finding}")?;
        }
        Ok(())
    }

    fn dump_file(&mut self, path: &Path) -> Result<(), Failure> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("log") => self.dump_log(path),
            Some("checkpoint") => self.dump_snapshot(path),
            Some("index") => self.dump_offset_index(path),
            Some("timeindex") => self.dump_time_index(path),
            Some("snapshot") => self.dump_producer_snapshot(path),
            Some("txnindex") => self.dump_txn_index(path),
            _ => {
                self.out.flush()?;
                writeln!(self.err, "Ignoring unknown file {}", path.display())?;
                Ok(())
            }
        }
    }

    /// Notes a problem to report at the end; the exit status becomes 1.
    fn problem(&mut self, line: String) {
        self.findings.push(line);
        self.failed = true;
    }

    /// Notes a titled list of problems, if there are any.
    fn report(&mut self, title: String, lines: Vec<String>) {
        if !lines.is_empty() {
            self.problem(title);
            self.findings.extend(lines);
        }
    }

    // ------------------------------------------------------------ .log

    fn dump_log(&mut self, path: &Path) -> Result<(), Failure> {
        let base_offset = base_offset_of(path)?;
        writeln!(self.out, "Log starting offset: {base_offset}")?;
        self.dump_batches(path, base_offset)
    }

    /// A KIP-630 snapshot, `<end offset>-<epoch>.checkpoint`: batches like a
    /// segment's from offset 0, under the line Kafka prints for one.
    fn dump_snapshot(&mut self, path: &Path) -> Result<(), Failure> {
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let id = name.strip_suffix(".checkpoint").and_then(|stem| stem.split_once('-'));
        let Some((offset, epoch)) =
            id.and_then(|(o, e)| Some((o.parse::<u64>().ok()?, e.parse::<i32>().ok()?)))
        else {
            return Err(Failure::File(format!(
                "{}: not named <end offset>-<epoch>.checkpoint",
                path.display()
            )));
        };
        writeln!(self.out, "Snapshot end offset: {offset}, epoch: {epoch}")?;
        self.dump_batches(path, 0)
    }

    fn dump_batches(&mut self, path: &Path, base_offset: i64) -> Result<(), Failure> {
        let file = File::open(path).map_err(|e| unreadable(path, e))?;
        let len = file.metadata().map_err(|e| unreadable(path, e))?.len();
        let limit = self.args.max_bytes.map_or(len, |max| max.min(len));
        let mut batches = BatchReader::new(file, limit);
        let mut gaps = OffsetGaps { last_offset: base_offset.wrapping_sub(1), gaps: Vec::new() };
        while let Some(batch) = batches.next().map_err(|e| self.log_failure(path, e))? {
            if self.print_batch(&batch)? && self.args.deep() {
                self.print_records(path, &batch, &mut gaps)?;
            }
        }
        let trailing = len - batches.position;
        if trailing > 0 && self.args.max_bytes.is_none() {
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
            writeln!(self.out, "Found {trailing} invalid bytes at the end of {name}")?;
            self.failed = true;
        }
        if !gaps.gaps.is_empty() {
            // A compacted log has gaps by design: worth showing, not a failure.
            self.findings.push(format!("Non-consecutive offsets in {}", absolute(path)));
            self.findings
                .extend(gaps.gaps.iter().map(|(before, after)| format!("  {before} is followed by {after}")));
        }
        Ok(())
    }

    fn log_failure(&self, path: &Path, e: ReadError) -> Failure {
        match e {
            ReadError::Io(e) => unreadable(path, e),
            ReadError::Corrupt { position, reason } => {
                Failure::File(format!("{}: corrupt batch at position {position}: {reason}", path.display()))
            }
        }
    }

    /// Prints the batch line; false when its records cannot be read.
    fn print_batch(&mut self, batch: &StoredBatch<'_>) -> io::Result<bool> {
        let StoredBatch { position, header, bytes } = batch;
        if header.magic != MAGIC_V2 {
            writeln!(
                self.out,
                "baseOffset: {} position: {position} size: {} magic: {} isvalid: false (Strom reads only magic 2)",
                header.base_offset, header.size, header.magic
            )?;
            self.failed = true;
            return Ok(false);
        }
        let valid = batch::compute_crc(bytes) == header.crc;
        self.failed |= !valid;
        write_batch_line(&mut self.out, *position, header, valid)?;
        Ok(true)
    }

    fn print_records(
        &mut self,
        path: &Path,
        batch: &StoredBatch<'_>,
        gaps: &mut OffsetGaps,
    ) -> io::Result<()> {
        let StoredBatch { position, header, bytes } = batch;
        let problem = |e| {
            format!("{}: cannot read the records of the batch at position {position}: {e}", path.display())
        };
        let data = match records_body(bytes, header) {
            Ok(data) => data,
            Err(e) => {
                self.problem(problem(e));
                return Ok(());
            }
        };
        let count = usize::try_from(header.records_count).unwrap_or(0);
        for record in Records::counted(&data, count) {
            let with_headers = record.and_then(|record| Ok((record, record.headers()?)));
            let (record, headers) = match with_headers {
                Ok(parsed) => parsed,
                Err(e) => {
                    self.problem(problem(e));
                    break;
                }
            };
            gaps.see(header.base_offset.wrapping_add(i64::from(record.offset_delta)));
            write_record_line(&mut self.out, header, &record, &headers, self.args)?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ indexes

    fn dump_offset_index(&mut self, path: &Path) -> Result<(), Failure> {
        let log = LogFile::open_beside(path)?;
        let mut entries = IndexEntries::<OffsetPosition>::open(path)?;
        if self.args.index_sanity_check {
            return self
                .sanity_check(path, entries, |entry, previous| entry.check_follows(previous, log.len));
        }
        let mut mismatches = Vec::new();
        while let Some(entry) = entries.next().map_err(|e| unreadable(path, e))? {
            match log.header_at(u64::from(entry.position)) {
                Some(batch) if batch.last_offset() == entry.offset => {}
                Some(batch) => mismatches.push(format!(
                    "  Index offset: {}, log offset: {}",
                    entry.offset,
                    batch.last_offset()
                )),
                None => mismatches.push(format!(
                    "  Index offset: {}, no batch at position {}",
                    entry.offset, entry.position
                )),
            }
            if !self.args.verify_index_only {
                writeln!(self.out, "offset: {} position: {}", entry.offset, entry.position)?;
            }
        }
        if entries.count == 0 {
            writeln!(self.out, "{} is empty.", path.display())?;
        }
        // Kafka lists mismatches from the highest index offset down.
        mismatches.reverse();
        self.report(format!("Mismatches in :{}", absolute(path)), mismatches);
        Ok(())
    }

    fn dump_time_index(&mut self, path: &Path) -> Result<(), Failure> {
        let mut entries = IndexEntries::<TimestampOffset>::open(path)?;
        if self.args.index_sanity_check {
            let base_offset = entries.base_offset;
            return self
                .sanity_check(path, entries, |entry, previous| entry.check_follows(previous, base_offset));
        }
        let mut log = LogFile::open_beside(path)?;
        let mut errors = TimeIndexErrors::default();
        let mut previous_timestamp = -1;
        while let Some(entry) = entries.next().map_err(|e| unreadable(path, e))? {
            errors.check(&entry, log.batch_holding(entry.offset), previous_timestamp);
            previous_timestamp = entry.timestamp;
            if !self.args.verify_index_only {
                writeln!(self.out, "timestamp: {} offset: {}", entry.timestamp, entry.offset)?;
            }
        }
        if entries.count == 0 {
            writeln!(self.out, "{} is empty.", path.display())?;
        }
        let file = absolute(path);
        self.report(format!("Found timestamp mismatch in :{file}"), errors.mismatches);
        self.report(format!("Found out of order timestamp in :{file}"), errors.out_of_order);
        self.report("The following indexed offsets are not found in the log.".into(), errors.not_found);
        Ok(())
    }

    /// Checks every entry against the one before it, as a broker does on load.
    fn sanity_check<T: IndexEntry>(
        &mut self,
        path: &Path,
        mut entries: IndexEntries<T>,
        check: impl Fn(&T, Option<&T>) -> Result<(), &'static str>,
    ) -> Result<(), Failure> {
        let mut previous: Option<T> = None;
        while let Some(entry) = entries.next().map_err(|e| unreadable(path, e))? {
            if let Err(reason) = check(&entry, previous.as_ref()) {
                let i = entries.count - 1;
                return Err(Failure::File(format!(
                    "{} failed sanity check: entry {i} {reason}",
                    path.display()
                )));
            }
            previous = Some(entry);
        }
        if entries.reader.partial_bytes > 0 {
            let (partial, size) = (entries.reader.partial_bytes, T::BYTES);
            return Err(Failure::File(format!(
                "{} failed sanity check: it ends with {partial} bytes, not a whole entry of {size}",
                path.display()
            )));
        }
        writeln!(self.out, "{} passed sanity check.", path.display())?;
        Ok(())
    }

    // ------------------------------------------------------------ .snapshot, .txnindex

    fn dump_producer_snapshot(&mut self, path: &Path) -> Result<(), Failure> {
        let bytes = std::fs::read(path).map_err(|e| unreadable(path, e))?;
        let entries = parse_producer_snapshot(&bytes)
            .map_err(|reason| Failure::File(format!("{}: {reason}", path.display())))?;
        for entry in entries {
            writeln!(self.out, "{entry}")?;
        }
        Ok(())
    }

    fn dump_txn_index(&mut self, path: &Path) -> Result<(), Failure> {
        const ENTRY: usize = 34;
        let mut entries = EntryReader::open(path, ENTRY)?;
        let mut position = 0;
        while let Some(raw) = entries.next().map_err(|e| unreadable(path, e))? {
            let version = i16_at(raw, 0);
            if version != 0 {
                return Err(Failure::File(format!(
                    "{}: unexpected aborted transaction version {version} at position {position}",
                    path.display()
                )));
            }
            writeln!(
                self.out,
                "version: {version} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
                i64_at(raw, 2),
                i64_at(raw, 10),
                i64_at(raw, 18),
                i64_at(raw, 26)
            )?;
            position += ENTRY;
        }
        if entries.partial_bytes > 0 {
            return Err(Failure::File(format!(
                "{}: ends with {} bytes, not a whole aborted transaction",
                path.display(),
                entries.partial_bytes
            )));
        }
        Ok(())
    }
}

/// The base offset a segment file is named by (`00000000000000000042.log`).
fn base_offset_of(path: &Path) -> Result<i64, Failure> {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let digits = name.split('.').next().unwrap_or_default();
    digits.parse().map_err(|_| {
        Failure::File(format!("{}: the file name does not start with a segment base offset", path.display()))
    })
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}

// ---------------------------------------------------------------- formatting

fn timestamp_type_name(header: &BatchHeader) -> &'static str {
    match header.timestamp_type() {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

fn codec_name(id: i16) -> String {
    match id {
        0 => "none".into(),
        1 => "gzip".into(),
        2 => "snappy".into(),
        3 => "lz4".into(),
        4 => "zstd".into(),
        other => format!("unknown({other})"),
    }
}

/// Java's `OptionalLong` as Kafka prints it.
fn optional_long(value: Option<i64>) -> String {
    value.map_or_else(|| "OptionalLong.empty".into(), |v| format!("OptionalLong[{v}]"))
}

fn write_batch_line(
    out: &mut impl Write,
    position: u64,
    header: &BatchHeader,
    valid: bool,
) -> io::Result<()> {
    writeln!(
        out,
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} deleteHorizonMs: {} \
         position: {position} {}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: {valid}",
        header.base_offset,
        header.last_offset(),
        header.records_count,
        header.base_sequence,
        header.last_sequence(),
        header.producer_id,
        header.producer_epoch,
        header.partition_leader_epoch,
        header.is_transactional(),
        header.is_control(),
        optional_long(header.delete_horizon_ms()),
        timestamp_type_name(header),
        header.max_timestamp,
        header.size,
        header.magic,
        codec_name(header.compression()),
        header.crc,
    )
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

fn size_of(bytes: Option<&[u8]>) -> i64 {
    bytes.map_or(-1, |b| b.len() as i64)
}

/// One `| offset: …` line; nothing at all for a record with nothing to show.
fn write_record_line(
    out: &mut impl Write,
    header: &BatchHeader,
    record: &RecordView<'_>,
    headers: &[RecordHeader<'_>],
    args: &DumpLogArgs,
) -> io::Result<()> {
    let mut line = String::new();
    if !args.skip_record_metadata {
        let keys: Vec<_> = headers.iter().map(|h| text(h.key)).collect();
        line = format!(
            "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
            header.base_offset.wrapping_add(i64::from(record.offset_delta)),
            timestamp_type_name(header),
            header.record_timestamp(record.timestamp_delta),
            size_of(record.key),
            size_of(record.value),
            header.record_sequence(record.offset_delta),
            keys.join(","),
        );
        if header.is_control() {
            line.push_str(&describe_control_record(record));
        }
    }
    if args.print_data() && !header.is_control() {
        let mut prefix = if args.skip_record_metadata { "| " } else { " " };
        let mut field = |name: &str, value: &str| {
            line.push_str(&format!("{prefix}{name}: {value}"));
            prefix = " ";
        };
        if !headers.is_empty() {
            let headers: Vec<String> = headers
                .iter()
                .map(|h| match h.value {
                    Some(value) => format!("{}={}", text(h.key), text(value)),
                    None => text(h.key).into_owned(),
                })
                .collect();
            field("headers", &format!("[{}]", headers.join(",")));
        }
        if let Some(key) = record.key {
            field("key", &text(key));
        }
        match record.value {
            Some(value) if args.cluster_metadata_decoder => field("payload", &metadata_payload(value)),
            Some(value) => field("payload", &text(value)),
            None => {}
        }
    }
    if line.is_empty() {
        return Ok(());
    }
    writeln!(out, "{line}")
}

/// A metadata log value as its record (type, fields, version), or
/// why it does not decode.
fn metadata_payload(value: &[u8]) -> String {
    match MetadataRecord::decode_frame(value) {
        Ok((record, version)) => format!("{record:?} version: {version}"),
        Err(e) => format!("undecodable metadata record ({e}): {}", text(value)),
    }
}

/// What Kafka prints after a control record's metadata.
fn describe_control_record(record: &RecordView<'_>) -> String {
    let Some(key) = record.key.filter(|k| k.len() >= 4 && i16_at(k, 0) >= 0) else {
        return " controlType: UNKNOWN(malformed key)".into();
    };
    let type_id = i16_at(key, 2);
    let name = match type_id {
        0 => "ABORT",
        1 => "COMMIT",
        2 => "LEADER_CHANGE",
        3 => "SNAPSHOT_HEADER",
        4 => "SNAPSHOT_FOOTER",
        5 => "KRAFT_VERSION",
        6 => "KRAFT_VOTERS",
        _ => "UNKNOWN",
    };
    if let Some(message) = (3..=6).contains(&type_id).then(|| kraft_control_json(type_id, record.value)) {
        return message;
    }
    if !(0..=1).contains(&type_id) {
        return format!(" controlType: {name}({type_id})");
    }
    // An end transaction marker's value: version (i16), coordinator epoch (i32).
    match record.value.filter(|v| v.len() >= 6) {
        Some(value) => format!(" endTxnMarker: {name} coordinatorEpoch: {}", i32_at(value, 2)),
        None => format!(" endTxnMarker: {name} (malformed marker value)"),
    }
}

/// A snapshot's control record as Kafka prints it: the message's name and
/// its JSON, fields in schema order (`*JsonConverter`), read at version 0
/// as `ControlRecordUtils` reads them.
fn kraft_control_json(type_id: i16, value: Option<&[u8]>) -> String {
    use kafka_protocol::messages::{
        KRaftVersionRecord, SnapshotFooterRecord, SnapshotHeaderRecord, VotersRecord,
    };
    use kafka_protocol::protocol::Decodable;
    let mut bytes: &[u8] = value.unwrap_or_default();
    let decoded = match type_id {
        3 => SnapshotHeaderRecord::decode(&mut bytes, 0).map(|r| {
            let json = format!(
                r#"{{"version":{},"lastContainedLogTimestamp":{}}}"#,
                r.version, r.last_contained_log_timestamp
            );
            ("SnapshotHeader", json)
        }),
        4 => SnapshotFooterRecord::decode(&mut bytes, 0)
            .map(|r| ("SnapshotFooter", format!(r#"{{"version":{}}}"#, r.version))),
        5 => KRaftVersionRecord::decode(&mut bytes, 0).map(|r| {
            ("KRaftVersion", format!(r#"{{"version":{},"kRaftVersion":{}}}"#, r.version, r.k_raft_version))
        }),
        _ => VotersRecord::decode(&mut bytes, 0).map(|r| ("KRaftVoters", voters_json(&r))),
    };
    match decoded {
        Ok((name, json)) => format!(" {name} {json}"),
        Err(e) => format!(" controlType: UNKNOWN({type_id}) (undecodable: {e})"),
    }
}

fn voters_json(record: &kafka_protocol::messages::VotersRecord) -> String {
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let voters: Vec<String> = record
        .voters
        .iter()
        .map(|voter| {
            let endpoints: Vec<String> = voter
                .endpoints
                .iter()
                .map(|e| {
                    format!(r#"{{"name":{},"host":{},"port":{}}}"#, quoted(&e.name), quoted(&e.host), e.port)
                })
                .collect();
            let feature = &voter.k_raft_version_feature;
            format!(
                r#"{{"voterId":{},"voterDirectoryId":{},"endpoints":[{}],"kRaftVersionFeature":{{"minSupportedVersion":{},"maxSupportedVersion":{}}}}}"#,
                voter.voter_id.0,
                quoted(&crate::topics::kafka_uuid(voter.voter_directory_id.as_bytes())),
                endpoints.join(","),
                feature.min_supported_version,
                feature.max_supported_version,
            )
        })
        .collect();
    format!(r#"{{"version":{},"voters":[{}]}}"#, record.version, voters.join(","))
}

// ---------------------------------------------------------------- readers

/// One whole batch of a `.log` file.
struct StoredBatch<'a> {
    position: u64,
    header: BatchHeader,
    bytes: &'a [u8],
}

/// Record offsets that do not follow the previous one, as (previous, next).
struct OffsetGaps {
    last_offset: i64,
    gaps: Vec<(i64, i64)>,
}

impl OffsetGaps {
    fn see(&mut self, offset: i64) {
        if offset != self.last_offset.wrapping_add(1) {
            self.gaps.push((self.last_offset, offset));
        }
        self.last_offset = offset;
    }
}

enum ReadError {
    Io(io::Error),
    Corrupt { position: u64, reason: String },
}

/// Reads the whole batches of a `.log` file in order, one at a time, up to `limit`.
struct BatchReader {
    reader: BufReader<File>,
    /// Where the next batch starts; after the last one, the end of the valid part.
    position: u64,
    limit: u64,
    buf: Vec<u8>,
}

impl BatchReader {
    fn new(file: File, limit: u64) -> Self {
        Self { reader: BufReader::with_capacity(1 << 16, file), position: 0, limit, buf: Vec::new() }
    }

    /// The next batch; `None` at the end or
    /// before a batch that does not fit (a torn tail, or past `limit`).
    fn next(&mut self) -> Result<Option<StoredBatch<'_>>, ReadError> {
        if self.limit - self.position < LOG_OVERHEAD as u64 {
            return Ok(None);
        }
        let corrupt = |e: strom_storage::StorageError| ReadError::Corrupt {
            position: self.position,
            reason: e.to_string(),
        };
        self.buf.resize(LOG_OVERHEAD, 0);
        self.reader.read_exact(&mut self.buf).map_err(ReadError::Io)?;
        let size = batch::batch_size(&self.buf).expect("12 bytes read").map_err(corrupt)?;
        if size as u64 > self.limit - self.position {
            return Ok(None);
        }
        self.buf.resize(size, 0);
        self.reader.read_exact(&mut self.buf[LOG_OVERHEAD..]).map_err(ReadError::Io)?;
        let header = BatchHeader::parse(&self.buf).map_err(corrupt)?;
        let position = self.position;
        self.position += size as u64;
        Ok(Some(StoredBatch { position, header, bytes: &self.buf }))
    }
}

/// Reads the fixed-size entries of an index file in order.
struct EntryReader {
    reader: BufReader<File>,
    entry_bytes: usize,
    buf: Vec<u8>,
    /// Bytes left over after the last whole entry, once the end is reached.
    partial_bytes: usize,
}

impl EntryReader {
    fn open(path: &Path, entry_bytes: usize) -> Result<Self, Failure> {
        let file = File::open(path).map_err(|e| unreadable(path, e))?;
        Ok(Self { reader: BufReader::new(file), entry_bytes, buf: vec![0; entry_bytes], partial_bytes: 0 })
    }

    fn next(&mut self) -> io::Result<Option<&[u8]>> {
        let mut filled = 0;
        while filled < self.entry_bytes {
            match self.reader.read(&mut self.buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled < self.entry_bytes {
            self.partial_bytes = filled;
            return Ok(None);
        }
        Ok(Some(&self.buf))
    }
}

/// An entry of `.index` or `.timeindex`.
trait IndexEntry: Sized {
    const BYTES: usize;
    fn decode(raw: &[u8], base_offset: i64) -> Self;
    fn offset(&self) -> i64;
}

impl IndexEntry for OffsetPosition {
    const BYTES: usize = OffsetIndex::ENTRY;

    fn decode(raw: &[u8], base_offset: i64) -> Self {
        OffsetPosition::decode(raw, base_offset)
    }

    fn offset(&self) -> i64 {
        self.offset
    }
}

impl IndexEntry for TimestampOffset {
    const BYTES: usize = TimeIndex::ENTRY;

    fn decode(raw: &[u8], base_offset: i64) -> Self {
        TimestampOffset::decode(raw, base_offset)
    }

    fn offset(&self) -> i64 {
        self.offset
    }
}

/// The entries of an index in use. An index is preallocated while its
/// segment is active and trimmed when it rolls, so an untrimmed one ends in
/// zeros: as Kafka does, the entries end at the first later entry that
/// points back at the segment's base offset (or at an all-zero first entry).
struct IndexEntries<T> {
    reader: EntryReader,
    base_offset: i64,
    /// Entries yielded so far.
    count: usize,
    kind: std::marker::PhantomData<T>,
}

impl<T: IndexEntry> IndexEntries<T> {
    fn open(path: &Path) -> Result<Self, Failure> {
        let base_offset = base_offset_of(path)?;
        let reader = EntryReader::open(path, T::BYTES)?;
        Ok(Self { reader, base_offset, count: 0, kind: std::marker::PhantomData })
    }

    fn next(&mut self) -> io::Result<Option<T>> {
        let Some(raw) = self.reader.next()? else { return Ok(None) };
        let entry = T::decode(raw, self.base_offset);
        let unused =
            if self.count == 0 { raw.iter().all(|b| *b == 0) } else { entry.offset() == self.base_offset };
        if unused {
            return Ok(None);
        }
        self.count += 1;
        Ok(Some(entry))
    }
}

/// The `.log` an index belongs to, read at random positions.
struct LogFile {
    file: File,
    len: u64,
    /// Position and header of the batch a forward scan stopped at.
    scan: Option<(u64, BatchHeader)>,
}

impl LogFile {
    fn open_beside(index: &Path) -> Result<Self, Failure> {
        let path = index.with_extension("log");
        let file = File::open(&path).map_err(|e| unreadable(&path, e))?;
        let len = file.metadata().map_err(|e| unreadable(&path, e))?.len();
        Ok(Self { file, len, scan: None })
    }

    /// The header of the whole batch at `position`, if there is one.
    fn header_at(&self, position: u64) -> Option<BatchHeader> {
        let mut buf = [0u8; HEADER_LEN];
        self.file.read_exact_at(&mut buf, position).ok()?;
        let header = BatchHeader::parse(&buf).ok()?;
        (position + header.size as u64 <= self.len).then_some(header)
    }

    /// The first batch whose last offset is `>= offset`, scanning forward from
    /// the previous answer (time index offsets increase) or from the start.
    fn batch_holding(&mut self, offset: i64) -> Option<BatchHeader> {
        let mut position = match self.scan {
            Some((position, header)) if header.base_offset <= offset => position,
            _ => 0,
        };
        // Each step moves forward by a whole batch, so the loop ends at the end of the file.
        loop {
            let header = self.header_at(position)?;
            self.scan = Some((position, header));
            if header.last_offset() >= offset {
                return Some(header);
            }
            position += header.size as u64;
        }
    }
}

/// Kafka's three complaints about a time index, one line per entry.
#[derive(Default)]
struct TimeIndexErrors {
    mismatches: Vec<String>,
    out_of_order: Vec<String>,
    not_found: Vec<String>,
}

impl TimeIndexErrors {
    fn check(&mut self, entry: &TimestampOffset, batch: Option<BatchHeader>, previous_timestamp: i64) {
        match batch {
            None => self.not_found.push(format!("Indexed offset: {}, found log offset: -1", entry.offset)),
            Some(batch) if batch.last_offset() != entry.offset => self.not_found.push(format!(
                "Indexed offset: {}, found log offset: {}",
                entry.offset,
                batch.last_offset()
            )),
            Some(batch) => {
                if batch.max_timestamp != entry.timestamp {
                    self.mismatches.push(format!(
                        "  Index timestamp: {}, log timestamp: {}",
                        entry.timestamp, batch.max_timestamp
                    ));
                }
                if previous_timestamp >= entry.timestamp {
                    self.out_of_order.push(format!(
                        "  Index timestamp: {}, Previously indexed timestamp: {previous_timestamp}",
                        entry.timestamp
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------- producer snapshot

/// Kafka's producer snapshot: version (i16) 1, CRC-32C (u32) of the rest,
/// then an array (i32 count) of fixed-size producer entries.
const SNAPSHOT_ENTRIES_AT: usize = 6;
const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// Each producer's line, as Kafka prints it.
fn parse_producer_snapshot(bytes: &[u8]) -> Result<Vec<String>, String> {
    if bytes.len() < SNAPSHOT_ENTRIES_AT + 4 {
        return Err(format!("{} bytes cannot hold a producer snapshot", bytes.len()));
    }
    let version = i16_at(bytes, 0);
    if version != 1 {
        return Err(format!("Snapshot contained an unknown file version {version}"));
    }
    let stored = u32::from_be_bytes(bytes[2..6].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&bytes[SNAPSHOT_ENTRIES_AT..]);
    if stored != computed {
        return Err(format!(
            "Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}"
        ));
    }
    let count = i32_at(bytes, SNAPSHOT_ENTRIES_AT);
    let entries = &bytes[SNAPSHOT_ENTRIES_AT + 4..];
    if usize::try_from(count).ok().and_then(|n| n.checked_mul(SNAPSHOT_ENTRY_BYTES)) != Some(entries.len()) {
        return Err(format!(
            "Snapshot failed schema validation: {count} entries do not fill {} bytes",
            entries.len()
        ));
    }
    Ok(entries.chunks_exact(SNAPSHOT_ENTRY_BYTES).map(describe_producer).collect())
}

fn describe_producer(entry: &[u8]) -> String {
    let (producer_id, epoch, last_sequence) = (i64_at(entry, 0), i16_at(entry, 8), i32_at(entry, 10));
    let (last_offset, offset_delta, timestamp) = (i64_at(entry, 14), i32_at(entry, 22), i64_at(entry, 26));
    let (coordinator_epoch, txn_first_offset) = (i32_at(entry, 34), i64_at(entry, 38));
    let mut line = format!(
        "producerId: {producer_id} producerEpoch: {epoch} coordinatorEpoch: {coordinator_epoch} \
         currentTxnFirstOffset: {} lastTimestamp: {timestamp}",
        optional_long((txn_first_offset >= 0).then_some(txn_first_offset))
    );
    if last_offset >= 0 {
        line.push_str(&format!(
            " firstSequence: {} lastSequence: {last_sequence} lastOffset: {last_offset} \
             offsetDelta: {offset_delta} timestamp: {timestamp}",
            batch::decrement_sequence(last_sequence, offset_delta)
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
    use strom_storage::producer_state::AppendOrigin;
    use strom_storage::{Log, LogConfig};

    const NOW_MS: i64 = 1_700_000_000_000;

    fn record(
        offset: i64,
        key: Option<&str>,
        value: Option<&str>,
        headers: &[(&str, Option<&str>)],
    ) -> Record {
        let bytes = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset,
            // The encoder starts a new batch where offset minus sequence
            // changes; this gives one batch with base sequence -1.
            sequence: offset as i32 - 1,
            timestamp: 1_000 + offset,
            key: key.map(bytes),
            value: value.map(bytes),
            headers: headers
                .iter()
                .map(|(k, v)| (StrBytes::from_string(k.to_string()), v.map(bytes)))
                .collect(),
        }
    }

    fn encode(records: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, records, &RecordEncodeOptions { version: 2, compression })
            .unwrap();
        buf.to_vec()
    }

    /// A log in a temporary directory whose segment files the tests dump.
    struct Segment {
        dir: tempfile::TempDir,
        log: Log,
    }

    impl Segment {
        fn new(config: LogConfig) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let (log, _) = Log::open(dir.path(), config, 0, 0, true, NOW_MS).unwrap();
            Self { dir, log }
        }

        /// Appends as the broker, which may also write control batches.
        fn append(&mut self, batch: &[u8]) {
            self.log.append_as(batch, 3, NOW_MS, AppendOrigin::Coordinator).unwrap();
        }

        fn path(&self, suffix: &str) -> PathBuf {
            self.dir.path().join(format!("00000000000000000000{suffix}"))
        }

        /// The stored header of the batch at `position`.
        fn header_at(&self, position: u64) -> BatchHeader {
            let bytes = std::fs::read(self.path(".log")).unwrap();
            BatchHeader::parse(&bytes[position as usize..]).unwrap()
        }
    }

    struct Dump {
        out: String,
        err: String,
        failed: bool,
    }

    fn dump(args: DumpLogArgs) -> Dump {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut dumper = Dumper::new(&args, &mut out, &mut err);
        dumper.dump_all(&args.files).unwrap();
        let failed = dumper.failed;
        Dump { out: String::from_utf8(out).unwrap(), err: String::from_utf8(err).unwrap(), failed }
    }

    fn files(paths: &[PathBuf]) -> DumpLogArgs {
        DumpLogArgs { files: paths.to_vec(), ..DumpLogArgs::default() }
    }

    fn small_index_config() -> LogConfig {
        LogConfig { index_interval_bytes: 100, max_index_bytes: 4096, ..LogConfig::default() }
    }

    /// A log of `batches` batches of three 40-byte records each.
    fn filled_segment(batches: i64) -> Segment {
        let mut segment = Segment::new(small_index_config());
        for b in 0..batches {
            let mut records: Vec<_> =
                (0..3).map(|i| record(i, Some("k"), Some(&format!("{b:040}")), &[])).collect();
            for r in &mut records {
                r.timestamp += 10 * b;
            }
            segment.append(&encode(&records, Compression::None));
        }
        segment
    }

    #[test]
    fn a_batch_line_carries_every_header_field_in_kafkas_order() {
        let mut segment = Segment::new(LogConfig::default());
        segment.append(&encode(
            &[record(0, Some("a"), Some("b"), &[]), record(1, None, None, &[])],
            Compression::Gzip,
        ));
        let first = segment.header_at(0);
        segment.append(&encode(&[record(0, Some("c"), Some("d"), &[])], Compression::None));
        let second = segment.header_at(first.size as u64);

        let dump = dump(files(&[segment.path(".log")]));

        let lines: Vec<&str> = dump.out.lines().collect();
        assert_eq!(lines[0], format!("Dumping {}", segment.path(".log").display()));
        assert_eq!(lines[1], "Log starting offset: 0");
        assert_eq!(
            lines[2],
            format!(
                "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 \
                 producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false isControl: false \
                 deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 size: {} magic: 2 \
                 compresscodec: gzip crc: {} isvalid: true",
                first.size, first.crc
            )
        );
        assert!(lines[3].starts_with("baseOffset: 2 lastOffset: 2 count: 1 "), "{}", lines[3]);
        assert!(lines[3].contains(&format!(" position: {} CreateTime: 1000 ", first.size)));
        assert!(lines[3].ends_with(&format!("compresscodec: none crc: {} isvalid: true", second.crc)));
        assert_eq!(lines.len(), 4);
        assert!(!dump.failed, "{}", dump.err);
    }

    #[test]
    fn the_cluster_metadata_decoder_shows_each_record_by_type() {
        use strom_metadata::kraft_records::TopicRecord;
        let topic: MetadataRecord = TopicRecord { name: "orders".into(), ..Default::default() }.into();
        let mut value = BytesMut::new();
        topic.encode_frame(0, &mut value).unwrap();
        let mut framed = record(0, None, None, &[]);
        framed.value = Some(value.freeze());
        let mut garbage = record(1, None, Some("not a record"), &[]);
        garbage.timestamp = 1001;
        let mut segment = Segment::new(LogConfig::default());
        segment.append(&encode(&[framed, garbage], Compression::None));

        let decoded = dump(DumpLogArgs { cluster_metadata_decoder: true, ..files(&[segment.path(".log")]) });
        let lines: Vec<&str> = decoded.out.lines().filter(|l| l.starts_with('|')).collect();
        assert!(lines[0].contains(r#"payload: Topic(TopicRecord { name: "orders""#), "{}", lines[0]);
        assert!(lines[1].contains("payload: undecodable metadata record ("), "{}", lines[1]);
        assert!(lines[1].ends_with("): not a record"), "{}", lines[1]);
    }

    #[test]
    fn deep_iteration_prints_each_record_and_print_data_log_its_contents() {
        let mut segment = Segment::new(LogConfig::default());
        let records = [
            record(0, Some("key-0"), Some("value-0"), &[("trace", Some("abc")), ("empty", None)]),
            record(1, None, Some("no key"), &[]),
            record(2, Some("tombstone"), None, &[]),
        ];
        segment.append(&encode(&records, Compression::Zstd));

        let deep = dump(DumpLogArgs { deep_iteration: true, ..files(&[segment.path(".log")]) });
        let record_lines: Vec<&str> = deep.out.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(
            record_lines,
            [
                "| offset: 0 CreateTime: 1000 keySize: 5 valueSize: 7 sequence: -1 headerKeys: [trace,empty]",
                "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 6 sequence: -1 headerKeys: []",
                "| offset: 2 CreateTime: 1002 keySize: 9 valueSize: -1 sequence: -1 headerKeys: []",
            ]
        );

        let data = dump(DumpLogArgs { print_data_log: true, ..files(&[segment.path(".log")]) });
        let record_lines: Vec<&str> = data.out.lines().filter(|l| l.starts_with('|')).collect();
        assert!(record_lines[0]
            .ends_with("headerKeys: [trace,empty] headers: [trace=abc,empty] key: key-0 payload: value-0"));
        assert!(record_lines[1].ends_with("headerKeys: [] payload: no key"));
        assert!(record_lines[2].ends_with("headerKeys: [] key: tombstone"));

        let bare = dump(DumpLogArgs {
            print_data_log: true,
            skip_record_metadata: true,
            ..files(&[segment.path(".log")])
        });
        let record_lines: Vec<&str> = bare.out.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(record_lines[1], "| payload: no key");
        assert!(!deep.failed && !data.failed && !bare.failed);
    }

    #[test]
    fn log_append_time_and_producer_fields_are_shown_as_stored() {
        let config = LogConfig { timestamp_type: TimestampType::LogAppendTime, ..LogConfig::default() };
        let mut segment = Segment::new(config);
        let mut records: Vec<_> = (0..3).map(|i| record(i, Some("k"), Some("v"), &[])).collect();
        for r in &mut records {
            (r.producer_id, r.producer_epoch, r.sequence) = (42, 7, r.offset as i32);
        }
        let mut batch = encode(&records, Compression::Lz4);
        // A sequence about to wrap, which the encoder cannot produce in one batch.
        batch[batch::BASE_SEQUENCE..batch::BASE_SEQUENCE + 4].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        let crc = batch::compute_crc(&batch);
        batch[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        segment.append(&batch);

        let dump = dump(DumpLogArgs { deep_iteration: true, ..files(&[segment.path(".log")]) });

        let batch = dump.out.lines().find(|l| l.starts_with("baseOffset")).unwrap();
        assert!(batch.contains(&format!(
            "baseSequence: {} lastSequence: 0 producerId: 42 producerEpoch: 7 ",
            i32::MAX - 1
        )));
        assert!(batch.contains(&format!(" LogAppendTime: {NOW_MS} ")), "{batch}");
        let sequences: Vec<&str> = dump
            .out
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| l.split(" sequence: ").nth(1).unwrap())
            .collect();
        assert_eq!(
            sequences,
            [&format!("{} headerKeys: []", i32::MAX - 1), "2147483647 headerKeys: []", "0 headerKeys: []"]
        );
        assert!(dump.out.contains(&format!("| offset: 0 LogAppendTime: {NOW_MS} keySize: 1")));
    }

    #[test]
    fn control_records_show_the_transaction_marker() {
        let mut segment = Segment::new(LogConfig::default());
        let mut data = record(0, Some("k"), Some("v"), &[]);
        (data.transactional, data.producer_id, data.producer_epoch, data.sequence) = (true, 9, 0, 0);
        segment.append(&encode(&[data], Compression::None));
        let mut marker = record(0, None, None, &[]);
        (marker.transactional, marker.control, marker.producer_id, marker.producer_epoch) =
            (true, true, 9, 0);
        marker.key = Some(Bytes::from_static(&[0, 0, 0, 1])); // version 0, COMMIT
        marker.value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 5])); // version 0, coordinator epoch 5
        segment.append(&encode(&[marker], Compression::None));

        let dump = dump(DumpLogArgs { print_data_log: true, ..files(&[segment.path(".log")]) });

        let lines: Vec<&str> = dump.out.lines().collect();
        assert!(lines[2].contains("isTransactional: true isControl: false"), "{}", lines[2]);
        assert!(lines[3].ends_with("key: k payload: v"));
        assert!(lines[4].contains("isTransactional: true isControl: true"), "{}", lines[4]);
        assert!(
            lines[5].ends_with("keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 5"),
            "{}",
            lines[5]
        );
    }

    #[test]
    fn a_flipped_byte_makes_the_batch_invalid_and_the_dump_fail() {
        let mut segment = Segment::new(LogConfig::default());
        segment.append(&encode(&[record(0, Some("k"), Some("value"), &[])], Compression::None));
        segment.append(&encode(&[record(0, Some("k"), Some("value"), &[])], Compression::None));
        let mut bytes = std::fs::read(segment.path(".log")).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x20; // inside the second batch's value: still parses
        std::fs::write(segment.path(".log"), &bytes).unwrap();

        let dump = dump(DumpLogArgs { print_data_log: true, ..files(&[segment.path(".log")]) });

        let valid: Vec<bool> = dump
            .out
            .lines()
            .filter_map(|l| l.strip_prefix("baseOffset").map(|l| l.ends_with("isvalid: true")))
            .collect();
        assert_eq!(valid, [true, false]);
        assert!(dump.out.contains("payload: valuE"), "records of a damaged batch are still shown");
        assert!(dump.failed);
    }

    #[test]
    fn a_torn_tail_is_reported_as_invalid_bytes() {
        let segment = filled_segment(3);
        let len = std::fs::metadata(segment.path(".log")).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(segment.path(".log")).unwrap();
        file.set_len(len - 10).unwrap();
        let torn = segment.header_at(0).size as u64 - 10;

        let dump = dump(files(&[segment.path(".log")]));

        assert_eq!(dump.out.lines().filter(|l| l.starts_with("baseOffset")).count(), 2);
        assert!(dump
            .out
            .contains(&format!("Found {torn} invalid bytes at the end of 00000000000000000000.log")));
        assert!(dump.failed);
    }

    #[test]
    fn a_corrupt_length_stops_the_file_with_a_message() {
        let segment = filled_segment(2);
        let second = segment.header_at(0).size;
        let mut bytes = std::fs::read(segment.path(".log")).unwrap();
        bytes[second + 8..second + 12].copy_from_slice(&5i32.to_be_bytes());
        std::fs::write(segment.path(".log"), &bytes).unwrap();

        let dump = dump(files(&[segment.path(".log")]));

        assert_eq!(dump.out.lines().filter(|l| l.starts_with("baseOffset")).count(), 1);
        assert!(dump.err.contains(&format!("corrupt batch at position {second}")), "{}", dump.err);
        assert!(dump.failed);
    }

    #[test]
    fn max_bytes_stops_before_the_first_batch_that_does_not_fit() {
        let segment = filled_segment(3);
        let size = segment.header_at(0).size as u64;
        let dump = dump(DumpLogArgs { max_bytes: Some(2 * size + 1), ..files(&[segment.path(".log")]) });
        assert_eq!(dump.out.lines().filter(|l| l.starts_with("baseOffset")).count(), 2);
        assert!(!dump.out.contains("invalid bytes"));
        assert!(!dump.failed);
    }

    #[test]
    fn missing_and_unknown_files_are_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("00000000000000000000.log");
        let unknown = dir.path().join("leader-epoch-checkpoint");
        std::fs::write(&unknown, "0\n").unwrap();

        let dump = dump(files(&[missing.clone(), unknown.clone()]));

        let errors: Vec<&str> = dump.err.lines().collect();
        assert_eq!(errors.len(), 2, "{}", dump.err);
        assert!(errors[0].contains(&format!("cannot read {}", missing.display())), "{}", errors[0]);
        assert_eq!(errors[1], format!("Ignoring unknown file {}", unknown.display()));
        assert!(dump.failed);
    }

    /// (offset, position) of every entry, through the storage crate's own reader.
    fn stored_index_entries(segment: &Segment) -> Vec<String> {
        let index = segment.log.segments().next().unwrap().index().unwrap();
        (0..index.entries())
            .map(|i| index.entry(i))
            .take_while(|e| e.offset > 0)
            .map(|e| format!("offset: {} position: {}", e.offset, e.position))
            .collect()
    }

    #[test]
    fn an_active_index_is_dumped_up_to_its_preallocated_zeros() {
        let segment = filled_segment(6);
        let expected = stored_index_entries(&segment);
        assert!(expected.len() >= 3, "the small interval indexes most batches");
        segment.log.segments().next().unwrap().flush().unwrap();
        assert_eq!(std::fs::metadata(segment.path(".index")).unwrap().len(), 4096, "still preallocated");

        let dump = dump(files(&[segment.path(".index"), segment.path(".timeindex")]));

        let entries: Vec<&str> = dump.out.lines().filter(|l| l.starts_with("offset:")).collect();
        assert_eq!(entries, expected);
        let times: Vec<&str> = dump.out.lines().filter(|l| l.starts_with("timestamp:")).collect();
        assert_eq!(times.len(), expected.len(), "one time entry per offset entry: {}", dump.out);
        assert_eq!(times[0], "timestamp: 1012 offset: 5", "the second batch's last record");
        assert!(!dump.failed, "{}", dump.err);
    }

    #[test]
    fn a_trimmed_index_is_dumped_whole_and_passes_the_sanity_check() {
        let mut segment = filled_segment(6);
        let expected = stored_index_entries(&segment);
        segment.log.close(NOW_MS).unwrap();

        let dump = dump(files(&[segment.path(".index")]));
        let entries: Vec<&str> = dump.out.lines().filter(|l| l.starts_with("offset:")).collect();
        assert_eq!(entries, expected);

        let paths = [segment.path(".index"), segment.path(".timeindex")];
        let sane = super::tests::dump(DumpLogArgs { index_sanity_check: true, ..files(&paths) });
        assert!(sane.out.contains(&format!("{} passed sanity check.", paths[0].display())));
        assert!(sane.out.contains(&format!("{} passed sanity check.", paths[1].display())));
        assert!(!sane.failed, "{}", sane.err);
    }

    #[test]
    fn an_index_entry_that_disagrees_with_the_log_is_a_mismatch() {
        let mut segment = filled_segment(6);
        segment.log.close(NOW_MS).unwrap();
        let mut index = std::fs::read(segment.path(".index")).unwrap();
        let first_offset = u32::from_be_bytes(index[0..4].try_into().unwrap());
        index[0..4].copy_from_slice(&(first_offset + 1).to_be_bytes());
        std::fs::write(segment.path(".index"), &index).unwrap();

        let verify = dump(DumpLogArgs { verify_index_only: true, ..files(&[segment.path(".index")]) });
        assert_eq!(verify.out.lines().count(), 1, "only the Dumping line: {}", verify.out);
        assert!(verify.err.contains(&format!("Mismatches in :{}", segment.path(".index").display())));
        assert!(verify
            .err
            .contains(&format!("  Index offset: {}, log offset: {first_offset}", first_offset + 1)));
        assert!(verify.failed);

        // The load-time check looks at order, not at the log: an offset larger than the next
        // entry's breaks it.
        index[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(segment.path(".index"), &index).unwrap();
        let sane = dump(DumpLogArgs { index_sanity_check: true, ..files(&[segment.path(".index")]) });
        assert!(sane.err.contains("failed sanity check: entry 1 is out of order"), "{}", sane.err);
        assert!(sane.failed);
    }

    #[test]
    fn an_empty_index_says_so() {
        let segment = Segment::new(LogConfig::default());
        segment.log.segments().next().unwrap().flush().unwrap();
        let dump = dump(files(&[segment.path(".index")]));
        assert!(dump.out.contains(&format!("{} is empty.", segment.path(".index").display())));
        assert!(!dump.failed);
    }

    #[test]
    fn a_time_index_entry_with_the_wrong_timestamp_is_reported() {
        let mut segment = filled_segment(6);
        segment.log.close(NOW_MS).unwrap();
        let mut index = std::fs::read(segment.path(".timeindex")).unwrap();
        let stored = i64::from_be_bytes(index[0..8].try_into().unwrap());
        index[0..8].copy_from_slice(&(stored + 500).to_be_bytes());
        std::fs::write(segment.path(".timeindex"), &index).unwrap();

        let dump = dump(files(&[segment.path(".timeindex")]));

        assert!(dump.err.contains("Found timestamp mismatch in :"), "{}", dump.err);
        assert!(dump.err.contains(&format!("  Index timestamp: {}, log timestamp: {stored}", stored + 500)));
        assert!(dump.err.contains("Found out of order timestamp in :"), "the next entry is now older");
        assert!(dump.failed);
    }

    #[test]
    fn files_come_as_a_comma_list_or_repeated_flags() {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: DumpLogArgs,
        }
        let parsed = <Command as clap::Parser>::try_parse_from([
            "dump-log",
            "--files",
            "a.log,b.index",
            "--files",
            "c.timeindex",
        ])
        .unwrap();
        assert_eq!(parsed.args.files, [PathBuf::from("a.log"), "b.index".into(), "c.timeindex".into()]);
        assert!(<Command as clap::Parser>::try_parse_from(["dump-log"]).is_err(), "--files is required");
    }

    #[test]
    fn offsets_that_skip_ahead_are_listed_as_non_consecutive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        // Batches at 0..=1 and 5..=6, as compaction leaves them.
        let mut bytes =
            encode(&[record(0, Some("a"), None, &[]), record(1, Some("b"), None, &[])], Compression::None);
        bytes.extend(encode(
            &[record(5, Some("c"), None, &[]), record(6, Some("d"), None, &[])],
            Compression::None,
        ));
        std::fs::write(&path, &bytes).unwrap();

        let dump = dump(DumpLogArgs { deep_iteration: true, ..files(std::slice::from_ref(&path)) });

        assert_eq!(
            dump.err,
            format!("Non-consecutive offsets in {}\n  1 is followed by 5\n", path.display())
        );
        assert!(!dump.failed, "gaps are normal in a compacted log");
    }

    #[test]
    fn damaged_files_never_panic() {
        let mut segment = filled_segment(4);
        let records: Vec<_> =
            (0..5).map(|i| record(i, Some("k"), Some("compressed value"), &[("h", None)])).collect();
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            segment.append(&encode(&records, codec));
        }
        segment.log.close(NOW_MS).unwrap();
        let suffixes = [".log", ".index", ".timeindex"];
        let originals: Vec<Vec<u8>> =
            suffixes.iter().map(|s| std::fs::read(segment.path(s)).unwrap()).collect();
        let paths: Vec<PathBuf> = suffixes.iter().map(|s| segment.path(s)).collect();
        // A fixed linear congruential sequence: every run damages the same bytes.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move |below: usize| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % below
        };
        let mut detected = 0;
        for round in 0..200 {
            let (which, original) = (round % 3, &originals[round % 3]);
            let mut damaged = original.clone();
            for _ in 0..1 + random(3) {
                let at = random(damaged.len());
                damaged[at] = random(256) as u8;
            }
            damaged.truncate(damaged.len() - random(8).min(damaged.len()));
            std::fs::write(&paths[which], &damaged).unwrap();
            let full = dump(DumpLogArgs { print_data_log: true, ..files(&paths) });
            dump(DumpLogArgs { index_sanity_check: true, ..files(&paths[1..]) });
            detected += usize::from(full.failed);
            std::fs::write(&paths[which], original).unwrap();
        }
        assert!(detected > 150, "most damage is noticed, {detected} of 200");
    }

    /// producer id, epoch, last sequence, last offset, offset delta, timestamp,
    /// coordinator epoch, current transaction's first offset.
    type ProducerRow = (i64, i16, i32, i64, i32, i64, i32, i64);

    fn producer_snapshot(entries: &[ProducerRow]) -> Vec<u8> {
        let mut body = (entries.len() as i32).to_be_bytes().to_vec();
        for &(id, epoch, last_sequence, last_offset, delta, timestamp, coordinator_epoch, txn_first) in
            entries
        {
            body.extend(id.to_be_bytes());
            body.extend(epoch.to_be_bytes());
            body.extend(last_sequence.to_be_bytes());
            body.extend(last_offset.to_be_bytes());
            body.extend(delta.to_be_bytes());
            body.extend(timestamp.to_be_bytes());
            body.extend(coordinator_epoch.to_be_bytes());
            body.extend(txn_first.to_be_bytes());
        }
        let mut bytes = 1i16.to_be_bytes().to_vec();
        bytes.extend(crc32c::crc32c(&body).to_be_bytes());
        bytes.extend(body);
        bytes
    }

    #[test]
    fn producer_snapshots_are_read_in_kafkas_format() {
        let bytes = producer_snapshot(&[(1000, 2, 9, 41, 4, 1234, 3, -1), (1001, 0, -1, -1, 0, 55, -1, 17)]);
        assert_eq!(
            parse_producer_snapshot(&bytes).unwrap(),
            [
                "producerId: 1000 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong.empty \
                 lastTimestamp: 1234 firstSequence: 5 lastSequence: 9 lastOffset: 41 offsetDelta: 4 timestamp: 1234",
                "producerId: 1001 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong[17] \
                 lastTimestamp: 55",
            ]
        );
        let mut damaged = bytes.clone();
        damaged[20] ^= 1;
        assert!(parse_producer_snapshot(&damaged).unwrap_err().contains("CRC is no longer valid"));
        assert!(parse_producer_snapshot(&bytes[..bytes.len() - 3]).is_err());
        assert!(parse_producer_snapshot(&bytes[..4]).is_err());
    }

    #[test]
    fn a_transaction_index_lists_aborted_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut bytes = Vec::new();
        for (pid, first, last, lso) in [(7i64, 10i64, 20i64, 5i64), (8, 30, 31, 30)] {
            bytes.extend(0i16.to_be_bytes());
            for field in [pid, first, last, lso] {
                bytes.extend(field.to_be_bytes());
            }
        }
        bytes.extend([0, 0, 0]);
        std::fs::write(&path, &bytes).unwrap();

        let dump = dump(files(&[path]));

        let lines: Vec<&str> = dump.out.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "version: 0 producerId: 7 firstOffset: 10 lastOffset: 20 lastStableOffset: 5",
                "version: 0 producerId: 8 firstOffset: 30 lastOffset: 31 lastStableOffset: 30",
            ]
        );
        assert!(dump.err.contains("ends with 3 bytes"), "{}", dump.err);
        assert!(dump.failed);
    }
}

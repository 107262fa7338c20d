//! Fuzz harnesses for `walfill-replay`, and the input layouts they read.
//!
//! Each libFuzzer target in `fuzz_targets/` is one call into this library:
//! the harness decodes the fuzzer's bytes into the arguments of the replay
//! crate's public API (a segment size and start position, a record header,
//! a relation schema, a type) and drives that API the way the replay
//! pipeline does. A harness panics only when the replay crate panics or
//! breaks a promise its documentation makes (for example that input may be
//! split anywhere with the same result); malformed input must merely yield
//! errors.
//!
//! The same modules also *encode* inputs, which the seed generator
//! (`seedgen/`) uses to turn real WAL from the fixtures into seed corpora
//! that start the fuzzers deep inside valid data.
//!
//! | target       | module        | what it drives |
//! |--------------|---------------|----------------|
//! | `wal_stream` | [`stream`]    | `WalDecoder` fed in arbitrary splits, every record through `interpret` |
//! | `wal_record` | [`record`]    | `Record::parse` on one record, `interpret`, tuples of the events |
//! | `tuple`      | [`tuple`]     | `deform`, `detoast_inline`, `decompress`, `decode_chunk`, `ToastChunks` |
//! | `datum`      | [`datum`]     | `types::output` / `output_into` for every built-in type and arrays, in every major version's dialect |
//!
//! [`known`] holds hand-made inputs for decoder discrepancies the
//! `wal_stream` harness once found, with tests that they stay fixed.

pub mod bytes;
pub mod datum;
pub mod known;
pub mod record;
pub mod stream;
pub mod tuple;

//! libFuzzer target `wal_stream`: see [`walfill_fuzz::stream`] for the input layout
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| walfill_fuzz::stream::run(data));

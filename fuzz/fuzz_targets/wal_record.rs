//! libFuzzer target `wal_record`: see [`walfill_fuzz::record`] for the input layout
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| walfill_fuzz::record::run(data));

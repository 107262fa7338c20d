//! libFuzzer target `tuple`: see [`walfill_fuzz::tuple`] for the input layout
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| walfill_fuzz::tuple::run(data));

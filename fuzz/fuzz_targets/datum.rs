//! libFuzzer target `datum`: see [`walfill_fuzz::datum`] for the input layout
//! and what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| walfill_fuzz::datum::run(data));

//! libFuzzer's entry for [`bootd_fuzz::inventory_report`] (its doc says what is checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootd_fuzz::inventory_report(data));

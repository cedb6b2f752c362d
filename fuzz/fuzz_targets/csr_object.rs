//! libFuzzer's entry for [`bootd_fuzz::csr_object`] (its doc says what is checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bootd_fuzz::csr_object(data));

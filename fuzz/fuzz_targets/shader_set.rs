#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| golden_lens_fuzz::targets::shader_set(data));

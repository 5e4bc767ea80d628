//! Fuzz target: `mesh_core::fuzzing::request_state` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh_core::fuzzing::request_state(data));

//! Fuzz target: `mesh::fuzzing::tool_arguments` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh::fuzzing::tool_arguments(data));

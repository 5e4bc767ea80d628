//! Fuzz target: `mesh::fuzzing::mcp_frame` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mesh::fuzzing::mcp_frame(data));
